// The fuzz session's expectations: see service_model.h.
#include "tests/fuzz/service_model.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace matserve::fuzz {
namespace {

const char* caller_name(Caller c) {
  switch (c) {
    case Caller::kAlice: return "alice";
    case Caller::kBob: return "bob";
    case Caller::kComputeOnly: return "carol";
    default: return "anonymous";
  }
}

bool is_fresh_handle(const std::string& h) {
  if (h.size() != 32) return false;
  for (char ch : h) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

}  // namespace

void Model::substitute(std::string* field, std::vector<Tracked*>& named) {
  if (field->size() == 1 && !handles_.empty()) {
    *field = handles_[static_cast<unsigned char>((*field)[0]) % handles_.size()].handle;
  }
  if (!field->empty()) named.push_back(find(*field));
}

bool Model::usable(const std::vector<Tracked*>& named, Caller caller) {
  for (const Tracked* t : named) {
    if (t == nullptr || !t->live || t->owner != caller) return false;
  }
  return true;
}

Tracked* Model::find(const std::string& handle) {
  for (Tracked& t : handles_) {
    if (t.handle == handle) return &t;
  }
  return nullptr;
}

Tracked& Model::add(const std::string& handle, Caller owner, const v1::Matrix& shape) {
  expect(is_fresh_handle(handle), "a new resident matrix has a 32-hex-digit handle");
  expect(find(handle) == nullptr, "a new resident matrix has a handle never seen before");
  Tracked t;
  t.handle = handle;
  t.owner = owner;
  t.shape = shape_of(shape);
  handles_.push_back(std::move(t));
  return handles_.back();
}

std::vector<Tracked*> Model::live_of(Caller owner) {
  std::vector<Tracked*> out;
  for (Tracked& t : handles_) {
    if (t.live && t.owner == owner) out.push_back(&t);
  }
  return out;
}

void Model::log(const char* rpc, Caller caller, const grpc::Status& s) {
  absl::StrAppend(&log_, " ", rpc, "(", caller_name(caller),
                  ")=", static_cast<int>(s.error_code()));
  // MATSERVE_FUZZ_TRACE=1: every call and its status on stderr, to see what an input does.
  static const bool trace = std::getenv("MATSERVE_FUZZ_TRACE") != nullptr;
  if (trace) {
    std::fprintf(stderr, "  %s(%s): %d %s\n", rpc, caller_name(caller),
                 static_cast<int>(s.error_code()), s.error_message().c_str());
  }
}

void Model::note(const char* what) {
  absl::StrAppend(&log_, " [", what, "]");
  if (std::getenv("MATSERVE_FUZZ_TRACE") != nullptr) std::fprintf(stderr, "  [%s]\n", what);
}

void Model::check_status(const char* rpc, const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::ALREADY_EXISTS:
      expect(!s.error_message().empty(), "a failed call says why");
      // Client strings in it are quoted and cut: a message always fits gRPC's metadata.
      expect(s.error_message().size() <= 1024, "a status message is at most 1 KiB");
      return;
    default:
      std::fprintf(stderr, "service fuzz: %s returned code %d: %s\n", rpc,
                   static_cast<int>(s.error_code()), s.error_message().c_str());
      expect(false, "a failed call has a proper status code (not UNKNOWN, INTERNAL, ...)");
  }
}

void Model::expect(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "service fuzz: invariant violated: %s\nservice fuzz: calls (code):%s\n",
               what, log_.c_str());
  std::abort();
}

std::int64_t element_bytes(v1::DataType t) {
  switch (t) {
    case v1::FP64: return 8;
    case v1::FP32: return 4;
    case v1::FP16:
    case v1::BF16: return 2;
    case v1::FP8_E4M3: return 1;
    default: return 0;
  }
}

std::int64_t matrix_bytes(const v1::Matrix& m) {
  return m.rows() * m.cols() * element_bytes(m.dtype());
}

v1::Matrix shape_of(const v1::Matrix& m) {
  v1::Matrix s;
  s.set_rows(m.rows());
  s.set_cols(m.cols());
  s.set_dtype(m.dtype());
  s.set_layout(m.layout());
  return s;
}

bool same_shape(const v1::Matrix& a, const v1::Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && a.dtype() == b.dtype() &&
         a.layout() == b.layout();
}

}  // namespace matserve::fuzz
