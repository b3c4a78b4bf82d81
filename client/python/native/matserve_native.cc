// matserve_native: the Python client's compiled data plane. The C++ client's striped transfer
// (client/cpp/striped_transfer.h) behind a small Python C API, so that a Python call's operands
// leave from the arrays' own memory and its result lands in one preallocated array, with no copy
// made in Python and the GIL released while bytes move. matserve_client uses it when it imports
// (matserve_client/native.py); the pure-Python path stays the fallback.
//
// Built against Python's stable ABI (3.11 and later) as matserve_native.abi3.so. Functions:
//   open(target, stripes, chunk_bytes, max_message_bytes[, tls]) -> handle; tls: None
//     (plaintext) or (root_pem, key_pem, chain_pem), each bytes or None (roots: the system's)
//   put(handle, headers, buffers, colocate_with, timeout, metadata, made) -> [ResidentInfo bytes]
//   get(handle, handles, outs, timeout, metadata) -> None
//   unary(handle, method, request, timeout, metadata) -> reply bytes
//   release(handle, handles, timeout, metadata) -> None
// headers: serialized matserve.v1.Matrix headers; buffers: C-contiguous byte buffers; outs:
// writable ones; timeout: seconds or None; metadata: (key, value) pairs for every call. A failed
// call raises matserve_native.Error(code, message), code being the gRPC status code's number;
// put() appends every handle it made to `made`, also when it fails.
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/cpp/process_settings.h"
#include "client/cpp/striped_transfer.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace {

using matserve::client::StripedTransfer;
namespace v1 = ::matserve::v1;

constexpr char kCapsuleName[] = "matserve_native.Stripes";

// The module's one mutable global: its exception type, made once at import and owned by the
// module object (CPython's single-phase modules keep it for the process's life).
PyObject* g_error = nullptr;

// One Py_buffer held for the duration of a call; released on scope exit.
class HeldBuffer {
 public:
  HeldBuffer() = default;
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  HeldBuffer(HeldBuffer&& other) noexcept : view_(other.view_), held_(other.held_) {
    other.held_ = false;
  }
  ~HeldBuffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  bool get(PyObject* object, bool writable) {
    held_ = PyObject_GetBuffer(object, &view_, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) == 0;
    return held_;
  }
  std::string_view bytes() const {
    return {static_cast<const char*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }
  std::span<char> out() const {
    return {static_cast<char*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// A call's deadline and metadata, read from Python before the GIL is released.
struct CallSettings {
  double timeout_s = -1;  // negative: no deadline
  std::vector<std::pair<std::string, std::string>> metadata;

  StripedTransfer::Prepare prepare() const {
    return [this](grpc::ClientContext& c) {
      if (timeout_s >= 0) {
        c.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::duration<double>(timeout_s)));
      }
      for (const auto& [key, value] : metadata) c.AddMetadata(key, value);
    };
  }
};

std::string utf8(PyObject* text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text, &size);
  return data == nullptr ? std::string() : std::string(data, static_cast<std::size_t>(size));
}

bool read_settings(PyObject* timeout, PyObject* metadata, CallSettings& out) {
  if (timeout != Py_None) {
    out.timeout_s = PyFloat_AsDouble(timeout);
    if (out.timeout_s == -1.0 && PyErr_Occurred() != nullptr) return false;
  }
  PyObject* items = PySequence_Fast(metadata, "metadata must be a sequence of (key, value)");
  if (items == nullptr) return false;
  const Py_ssize_t n = PySequence_Size(items);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* pair = PySequence_GetItem(items, i);
    PyObject* key = pair != nullptr ? PySequence_GetItem(pair, 0) : nullptr;
    PyObject* value = pair != nullptr ? PySequence_GetItem(pair, 1) : nullptr;
    if (key != nullptr && value != nullptr) out.metadata.emplace_back(utf8(key), utf8(value));
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(pair);
    if (PyErr_Occurred() != nullptr) {
      Py_DECREF(items);
      return false;
    }
  }
  Py_DECREF(items);
  return true;
}

PyObject* raise(const absl::Status& s) {
  // An empty message's data() may be null, which "s#" would give as None.
  const std::string message(s.message());
  PyObject* args = Py_BuildValue("(is#)", static_cast<int>(s.code()), message.c_str(),
                                 static_cast<Py_ssize_t>(message.size()));
  if (args != nullptr) {
    PyErr_SetObject(g_error, args);
    Py_DECREF(args);
  }
  return nullptr;
}

StripedTransfer* transfer_of(PyObject* capsule) {
  return static_cast<StripedTransfer*>(PyCapsule_GetPointer(capsule, kCapsuleName));
}

// The transfer a call's capsule holds and the call's settings; null (a Python error set) when
// either cannot be read.
StripedTransfer* begin_call(PyObject* capsule, PyObject* timeout, PyObject* metadata,
                            CallSettings& settings) {
  StripedTransfer* transfer = transfer_of(capsule);
  if (transfer == nullptr || !read_settings(timeout, metadata, settings)) return nullptr;
  return transfer;
}

void free_transfer(PyObject* capsule) {
  // Owned by the capsule since open(); handed back to a unique_ptr to be destroyed.
  std::unique_ptr<StripedTransfer> owned(transfer_of(capsule));
}

// A PEM given as bytes, or None: into `out`; false (a Python error set) for anything else.
bool pem(PyObject* object, std::string& out) {
  if (object == Py_None) return true;
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(object, &data, &size) != 0) return false;
  out.assign(data, static_cast<std::size_t>(size));
  return true;
}

PyObject* open_stripes(PyObject*, PyObject* args) {
  const char* target = nullptr;
  int stripes = 0;
  long long chunk_bytes = 0;
  long long max_message_bytes = 0;
  PyObject* tls_pems = Py_None;
  if (PyArg_ParseTuple(args, "siLL|O", &target, &stripes, &chunk_bytes, &max_message_bytes,
                       &tls_pems) == 0) {
    return nullptr;
  }
  grpc::SslCredentialsOptions tls;
  const bool secure = tls_pems != Py_None;
  if (secure) {
    PyObject *roots, *key, *chain;
    if (PyArg_ParseTuple(tls_pems, "OOO", &roots, &key, &chain) == 0 ||
        !pem(roots, tls.pem_root_certs) || !pem(key, tls.pem_private_key) ||
        !pem(chain, tls.pem_cert_chain)) {
      return nullptr;
    }
  }
  if (stripes <= 0 || chunk_bytes <= 0 || max_message_bytes <= 0) {
    PyErr_SetString(PyExc_ValueError,
                    "stripes, chunk_bytes and max_message_bytes must be positive");
    return nullptr;
  }
  grpc::ChannelArguments channel_args;
  const int limit = static_cast<int>(std::min<long long>(max_message_bytes, INT32_MAX));
  channel_args.SetMaxReceiveMessageSize(limit);
  channel_args.SetMaxSendMessageSize(limit);
  auto transfer = std::make_unique<StripedTransfer>(
      StripedTransfer::open_channels(
          target, secure ? grpc::SslCredentials(tls) : grpc::InsecureChannelCredentials(),
          channel_args, stripes),
      [](grpc::ClientContext&) {}, chunk_bytes);
  PyObject* capsule = PyCapsule_New(transfer.get(), kCapsuleName, free_transfer);
  if (capsule != nullptr) (void)transfer.release();  // the capsule owns it now
  return capsule;
}

PyObject* put(PyObject*, PyObject* args) {
  PyObject *capsule, *headers, *buffers, *timeout, *metadata, *made;
  const char* colocate = nullptr;
  if (PyArg_ParseTuple(args, "OOOsOOO", &capsule, &headers, &buffers, &colocate, &timeout,
                       &metadata, &made) == 0) {
    return nullptr;
  }
  CallSettings settings;
  StripedTransfer* transfer = begin_call(capsule, timeout, metadata, settings);
  if (transfer == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Size(headers);
  if (n < 0 || PySequence_Size(buffers) != n) {
    PyErr_SetString(PyExc_ValueError, "one buffer per header");
    return nullptr;
  }
  std::vector<v1::Matrix> parsed(static_cast<std::size_t>(n));
  std::vector<HeldBuffer> held(static_cast<std::size_t>(n));
  std::vector<StripedTransfer::Source> sources;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* header = PySequence_GetItem(headers, i);
    PyObject* buffer = PySequence_GetItem(buffers, i);
    HeldBuffer header_bytes;
    const bool ok = header != nullptr && buffer != nullptr && header_bytes.get(header, false) &&
                    held[static_cast<std::size_t>(i)].get(buffer, false);
    if (ok && !parsed[static_cast<std::size_t>(i)].ParseFromArray(
                  header_bytes.bytes().data(), static_cast<int>(header_bytes.bytes().size()))) {
      PyErr_SetString(PyExc_ValueError, "a header is not a serialized matserve.v1.Matrix");
    }
    Py_XDECREF(header);
    Py_XDECREF(buffer);
    if (PyErr_Occurred() != nullptr) return nullptr;
    sources.push_back(
        {&parsed[static_cast<std::size_t>(i)], held[static_cast<std::size_t>(i)].bytes()});
  }
  std::vector<std::string> handles;
  absl::StatusOr<std::vector<v1::ResidentInfo>> infos;
  const std::string colocate_with(colocate);
  Py_BEGIN_ALLOW_THREADS;
  infos = transfer->put(sources, handles, settings.prepare(), colocate_with);
  Py_END_ALLOW_THREADS;
  for (const std::string& h : handles) {
    PyObject* text = PyUnicode_FromStringAndSize(h.data(), static_cast<Py_ssize_t>(h.size()));
    if (text == nullptr || PyList_Append(made, text) != 0) {
      Py_XDECREF(text);
      return nullptr;
    }
    Py_DECREF(text);
  }
  if (!infos.ok()) return raise(infos.status());
  PyObject* out = PyList_New(0);
  for (const v1::ResidentInfo& info : *infos) {
    const std::string bytes = info.SerializeAsString();
    PyObject* b = PyBytes_FromStringAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
    if (out == nullptr || b == nullptr || PyList_Append(out, b) != 0) {
      Py_XDECREF(b);
      Py_XDECREF(out);
      return nullptr;
    }
    Py_DECREF(b);
  }
  return out;
}

PyObject* get(PyObject*, PyObject* args) {
  PyObject *capsule, *handles, *outs, *timeout, *metadata;
  if (PyArg_ParseTuple(args, "OOOOO", &capsule, &handles, &outs, &timeout, &metadata) == 0) {
    return nullptr;
  }
  CallSettings settings;
  StripedTransfer* transfer = begin_call(capsule, timeout, metadata, settings);
  if (transfer == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Size(handles);
  if (n < 0 || PySequence_Size(outs) != n) {
    PyErr_SetString(PyExc_ValueError, "one output buffer per handle");
    return nullptr;
  }
  std::vector<HeldBuffer> held(static_cast<std::size_t>(n));
  std::vector<StripedTransfer::Sink> sinks;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* handle = PySequence_GetItem(handles, i);
    PyObject* out = PySequence_GetItem(outs, i);
    std::string name = handle != nullptr ? utf8(handle) : std::string();
    if (out != nullptr && PyErr_Occurred() == nullptr) {
      (void)held[static_cast<std::size_t>(i)].get(out, true);
    }
    Py_XDECREF(handle);
    Py_XDECREF(out);
    if (PyErr_Occurred() != nullptr) return nullptr;
    sinks.push_back({std::move(name), held[static_cast<std::size_t>(i)].out()});
  }
  absl::Status status;
  Py_BEGIN_ALLOW_THREADS;
  status = transfer->get(sinks, settings.prepare());
  Py_END_ALLOW_THREADS;
  if (!status.ok()) return raise(status);
  Py_RETURN_NONE;
}

PyObject* unary(PyObject*, PyObject* args) {
  PyObject *capsule, *request, *timeout, *metadata;
  const char* method = nullptr;
  if (PyArg_ParseTuple(args, "OsOOO", &capsule, &method, &request, &timeout, &metadata) == 0) {
    return nullptr;
  }
  CallSettings settings;
  StripedTransfer* transfer = begin_call(capsule, timeout, metadata, settings);
  HeldBuffer bytes;
  if (transfer == nullptr || !bytes.get(request, false)) return nullptr;
  const std::string name(method);
  absl::StatusOr<std::string> reply;
  Py_BEGIN_ALLOW_THREADS;
  reply = transfer->unary(name, bytes.bytes(), settings.prepare());
  Py_END_ALLOW_THREADS;
  if (!reply.ok()) return raise(reply.status());
  return PyBytes_FromStringAndSize(reply->data(), static_cast<Py_ssize_t>(reply->size()));
}

PyObject* release(PyObject*, PyObject* args) {
  PyObject *capsule, *handles, *timeout, *metadata;
  if (PyArg_ParseTuple(args, "OOOO", &capsule, &handles, &timeout, &metadata) == 0) {
    return nullptr;
  }
  CallSettings settings;
  StripedTransfer* transfer = begin_call(capsule, timeout, metadata, settings);
  if (transfer == nullptr) return nullptr;
  std::vector<std::string> names;
  const Py_ssize_t n = PySequence_Size(handles);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* h = PySequence_GetItem(handles, i);
    if (h != nullptr) names.push_back(utf8(h));
    Py_XDECREF(h);
    if (PyErr_Occurred() != nullptr) return nullptr;
  }
  if (n < 0) return nullptr;
  absl::Status status;
  Py_BEGIN_ALLOW_THREADS;
  status = transfer->release(names, settings.prepare());
  Py_END_ALLOW_THREADS;
  if (!status.ok()) return raise(status);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"open", open_stripes, METH_VARARGS,
     "open(target, stripes, chunk_bytes, max_message_bytes[, tls]): the stripes' connections; "
     "tls: None or (root_pem, key_pem, chain_pem)"},
    {"put", put, METH_VARARGS,
     "put(stripes, headers, buffers, colocate_with, timeout, metadata, made): creates one "
     "resident matrix per header and writes its buffer as ranges; their ResidentInfos"},
    {"get", get, METH_VARARGS,
     "get(stripes, handles, outs, timeout, metadata): reads each resident matrix into its buffer"},
    {"unary", unary, METH_VARARGS,
     "unary(stripes, method, request, timeout, metadata): one call on the first stripe"},
    {"release", release, METH_VARARGS,
     "release(stripes, handles, timeout, metadata): one Release of the handles"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "matserve_native",
    "The matserve Python client's compiled data plane (striped transfers).",
    -1,
    kMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit_matserve_native() {
  // Also speeds up grpcio's own calls in this process where it shares the system's absl.
  matserve::client::turn_off_lock_order_checks();
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  g_error = PyErr_NewException("matserve_native.Error", nullptr, nullptr);
  if (g_error == nullptr || PyModule_AddObjectRef(module, "Error", g_error) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
