// Fuzz sessions on the in-process server: see service_session.h.
#include "tests/fuzz/service_session.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/runtime/memory_pool.h"
#include "tests/fuzz/service_harness.h"
#include "tests/fuzz/service_model.h"
#include "tests/fuzz/service_shm.h"

namespace matserve::fuzz {
namespace {

constexpr int kMaxCalls = 48;  // per input, so that one input stays within milliseconds
constexpr std::int64_t kDefaultChunk = std::int64_t{4} << 20;  // DownloadStream's default

using Service = server::MatrixServiceImpl;
const v1::ListResidentRequest kListResident;
const v1::GetServerInfoRequest kServerInfo;
const v1::ListKernelsRequest kListKernels;

// The input's bytes, read front to back; reads past the end come back short.
struct Input {
  const std::uint8_t* p;
  std::size_t n;

  bool empty() const { return n == 0; }
  std::uint8_t byte() {
    const std::uint8_t b = p[0];
    ++p;
    --n;
    return b;
  }
  std::string_view take(std::size_t len) {
    len = std::min(len, n);
    std::string_view s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
  // [len lo][len hi][len bytes]
  std::string_view frame() {
    std::size_t len = empty() ? 0 : byte();
    if (!empty()) len |= std::size_t{byte()} << 8;
    return take(len);
  }
};

Caller caller_of(std::uint8_t op) {
  const int c = op >> 4;
  if (c < 10) return Caller::kAlice;
  if (c < 13) return Caller::kBob;
  if (c < 15) return Caller::kComputeOnly;
  return Caller::kAnonymous;
}

// Whether the server must refuse `caller` this call whatever the request says: `resident` calls
// need the resident permission, `info` calls the info permission (carol has only compute).
bool denied(Caller c, bool resident, bool info = false) {
  if (c == Caller::kAnonymous) return true;
  return c == Caller::kComputeOnly && (resident || info);
}

template <typename Message>
bool parse(Message& m, std::string_view bytes) {
  return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

v1::Matrix shape_of_resident(const v1::ResidentInfo& r) {
  v1::Matrix m;
  m.set_rows(r.rows());
  m.set_cols(r.cols());
  m.set_dtype(r.dtype());
  m.set_layout(r.layout());
  return m;
}

class Session {
 public:
  explicit Session(bool with_shm) : srv_(FuzzServer::get()) {
    if (with_shm) shm_.emplace(srv_, model_);
  }

  void call(std::uint8_t op, std::string_view payload);
  // Releases what the input left resident; the server must then hold nothing.
  void finish();

 private:
  void multiply(Caller c, std::string_view p);
  void transpose(Caller c, std::string_view p);
  void upload(Caller c, std::string_view p);
  void upload_stream(Caller c, std::string_view p, bool over_grpc);
  void download(Caller c, std::string_view p);
  void download_stream(Caller c, std::string_view p, bool over_grpc);
  void release(Caller c, std::string_view p);
  void list_resident(Caller c);
  void server_info(Caller c);
  void list_kernels(Caller c);

  // An operand's shape: the named resident matrix's (the call succeeded, so it is usable) or the
  // inline matrix's.
  v1::Matrix operand(const v1::Matrix& inline_matrix, const std::string& handle) {
    return handle.empty() ? shape_of(inline_matrix) : shape_of(model_.find(handle)->shape);
  }
  // A new resident matrix in an OK reply: its info agrees with `shape`; it is tracked from now on.
  Tracked& adopt(const v1::ResidentInfo& r, Caller owner, const v1::Matrix& shape);
  // ListResident's reply for `c` lists exactly the live matrices the session gave `c`.
  void check_listing(Caller c, const v1::ListResidentReply& reply);
  void check_contents(const Tracked& t, const std::string& bytes);

  // The shm places of a request's matrices and result: one-byte regions substituted, the regions
  // named recorded (nothing in a session without shared memory).
  void substitute_regions(v1::Matrix* m, std::vector<std::string>& regions) {
    if (shm_ && m->has_shm()) shm_->substitute(m->mutable_shm(), regions);
  }
  bool regions_usable(const std::vector<std::string>& regions, Caller c) const {
    return regions.empty() || (shm_ && shm_->usable(regions, c));
  }

  FuzzServer& srv_;
  Model model_;
  std::optional<ShmSession> shm_;  // in sessions with shared memory
};

void Session::call(std::uint8_t op, std::string_view payload) {
  const Caller c = caller_of(op);
  if (shm_) {
    switch (op & 0x0f) {
      case 10: shm_->register_region(c, payload); return;
      case 11: shm_->unregister(c, payload); return;
      case 12: shm_->list(c); return;
      case 13: shm_->resize(payload); return;
      default: break;
    }
  }
  switch (op & 0x0f) {
    case 0:
    case 10: multiply(c, payload); break;
    case 1:
    case 11: transpose(c, payload); break;
    case 2: upload(c, payload); break;
    case 3:
    case 12: upload_stream(c, payload, false); break;
    case 4: download(c, payload); break;
    case 5:
    case 13: download_stream(c, payload, false); break;
    case 6: release(c, payload); break;
    case 7: list_resident(c); break;
    case 8: server_info(c); break;
    case 9: list_kernels(c); break;
    case 14: upload_stream(c, payload, true); break;
    default: download_stream(c, payload, true); break;
  }
}

Tracked& Session::adopt(const v1::ResidentInfo& r, Caller owner, const v1::Matrix& shape) {
  model_.expect(same_shape(shape_of_resident(r), shape), "a resident result has the reply's shape");
  model_.expect(r.bytes() == matrix_bytes(shape), "a resident result's bytes match its shape");
  return model_.add(r.handle(), owner, shape);
}

void Session::check_contents(const Tracked& t, const std::string& bytes) {
  model_.expect(static_cast<std::int64_t>(bytes.size()) == matrix_bytes(t.shape),
                "a download carries rows * cols * element size bytes");
  if (t.contents_known) {
    model_.expect(bytes == t.shape.data(), "a download returns the bytes that were uploaded");
  }
}

void Session::multiply(Caller c, std::string_view p) {
  v1::MultiplyRequest req;
  if (!parse(req, p)) return;
  std::vector<Tracked*> named;
  model_.substitute(req.mutable_a_handle(), named);
  model_.substitute(req.mutable_b_handle(), named);
  model_.substitute(req.mutable_c_handle(), named);
  std::vector<std::string> regions;
  if (req.has_a()) substitute_regions(req.mutable_a(), regions);
  if (req.has_b()) substitute_regions(req.mutable_b(), regions);
  if (req.has_c()) substitute_regions(req.mutable_c(), regions);
  if (shm_ && req.has_output_shm()) shm_->substitute(req.mutable_output_shm(), regions);
  v1::MultiplyReply reply;
  const grpc::Status s = srv_.unary(&Service::Multiply, c, req, &reply);
  model_.log("Multiply", c, s);
  model_.check_status("Multiply", s);
  if (!s.ok()) return;
  model_.expect(!denied(c, req.keep_result() || !named.empty()), "Multiply checks permissions");
  model_.expect(Model::usable(named, c), "Multiply succeeds only on the caller's live handles");
  model_.expect(regions_usable(regions, c), "Multiply succeeds only on the caller's regions");
  const v1::Matrix a = operand(req.a(), req.a_handle());
  const v1::Matrix b = operand(req.b(), req.b_handle());
  const v1::Matrix& out = reply.c();
  model_.expect(out.rows() == (req.transpose_a() ? a.cols() : a.rows()), "Multiply: c has m rows");
  model_.expect(out.cols() == (req.transpose_b() ? b.rows() : b.cols()), "Multiply: c has n cols");
  const v1::DataType dtype =
      req.output_dtype() == v1::DATA_TYPE_UNSPECIFIED ? a.dtype() : req.output_dtype();
  model_.expect(out.dtype() == dtype && out.layout() == req.output_layout(),
                "Multiply: c has the output dtype and layout");
  if (req.keep_result()) {
    model_.expect(out.data().empty(), "Multiply keep_result: the reply carries no bytes");
    adopt(reply.result(), c, out);
  } else if (req.has_output_shm()) {
    model_.expect(out.data().empty() && !reply.has_result(),
                  "Multiply output_shm: the reply carries no bytes and keeps nothing");
  } else {
    model_.expect(static_cast<std::int64_t>(out.data().size()) == matrix_bytes(out),
                  "Multiply: c carries m * n elements");
    model_.expect(!reply.has_result(), "Multiply without keep_result keeps nothing");
  }
}

void Session::transpose(Caller c, std::string_view p) {
  v1::TransposeRequest req;
  if (!parse(req, p)) return;
  std::vector<Tracked*> named;
  model_.substitute(req.mutable_a_handle(), named);
  std::vector<std::string> regions;
  if (req.has_a()) substitute_regions(req.mutable_a(), regions);
  if (shm_ && req.has_output_shm()) shm_->substitute(req.mutable_output_shm(), regions);
  v1::TransposeReply reply;
  const grpc::Status s = srv_.unary(&Service::Transpose, c, req, &reply);
  model_.log("Transpose", c, s);
  model_.check_status("Transpose", s);
  if (!s.ok()) return;
  model_.expect(!denied(c, req.keep_result() || !named.empty()), "Transpose checks permissions");
  model_.expect(Model::usable(named, c), "Transpose succeeds only on the caller's live handles");
  model_.expect(regions_usable(regions, c), "Transpose succeeds only on the caller's regions");
  const v1::Matrix a = operand(req.a(), req.a_handle());
  const v1::Matrix& out = reply.b();
  model_.expect(out.rows() == a.cols() && out.cols() == a.rows() && out.dtype() == a.dtype() &&
                    out.layout() == a.layout(),
                "Transpose: b is a's transpose, same dtype and layout");
  if (req.in_place()) {
    model_.expect(out.data().empty(), "Transpose in_place: the reply carries no bytes");
    model_.expect(reply.result().handle() == req.a_handle(), "Transpose in_place keeps a_handle");
    model_.expect(same_shape(shape_of_resident(reply.result()), out), "in_place: result shape");
    Tracked* t = model_.find(req.a_handle());
    t->shape = shape_of(out);
    t->contents_known = false;
  } else if (req.keep_result()) {
    model_.expect(out.data().empty(), "Transpose keep_result: the reply carries no bytes");
    adopt(reply.result(), c, out);
  } else if (req.has_output_shm()) {
    model_.expect(out.data().empty() && !reply.has_result(),
                  "Transpose output_shm: the reply carries no bytes and keeps nothing");
  } else {
    model_.expect(static_cast<std::int64_t>(out.data().size()) == matrix_bytes(out),
                  "Transpose: b carries rows * cols elements");
    model_.expect(!reply.has_result(), "Transpose without keep_result keeps nothing");
  }
}

void Session::upload(Caller c, std::string_view p) {
  v1::UploadRequest req;
  if (!parse(req, p)) return;
  std::vector<Tracked*> named;
  model_.substitute(req.mutable_colocate_with(), named);
  v1::UploadReply reply;
  const grpc::Status s = srv_.unary(&Service::Upload, c, req, &reply);
  model_.log("Upload", c, s);
  model_.check_status("Upload", s);
  if (!s.ok()) return;
  model_.expect(!denied(c, true), "Upload checks permissions");
  model_.expect(Model::usable(named, c), "Upload colocates only with the caller's live handles");
  Tracked& t = adopt(reply.resident(), c, shape_of(req.matrix()));
  t.shape.set_data(req.matrix().data());
  t.contents_known = true;
}

void Session::upload_stream(Caller c, std::string_view p, bool over_grpc) {
  std::vector<v1::UploadChunk> chunks;
  std::vector<Tracked*> named;
  for (Input in{reinterpret_cast<const std::uint8_t*>(p.data()), p.size()}; !in.empty();) {
    v1::UploadChunk chunk;
    if (!parse(chunk, in.frame())) continue;
    model_.substitute(chunk.mutable_colocate_with(), named);
    chunks.push_back(std::move(chunk));
  }
  v1::UploadReply reply;
  std::string orphan;
  const grpc::Status s = srv_.upload_stream(c, chunks, &reply, over_grpc, &orphan);
  model_.log("UploadStream", c, s);
  model_.check_status("UploadStream", s);
  if (!orphan.empty()) {
    // A known race, not checked: gRPC ended the stream (an oversized message after all the
    // bytes) and answered the caller before the handler's IsCancelled() saw it, so the handler
    // published the matrix. It stays resident until the idle TTL; tracked here so that the final
    // release and the accounting still hold.
    model_.note("UploadStream: published although gRPC failed the call");
    Tracked& t = model_.add(orphan, c, shape_of(chunks[0].header()));
    for (const v1::UploadChunk& chunk : chunks) *t.shape.mutable_data() += chunk.data();
    t.contents_known = false;  // the oversized chunk never reached the handler
    return;
  }
  if (!s.ok()) return;
  model_.expect(!denied(c, true), "UploadStream checks permissions");
  model_.expect(Model::usable(named, c), "UploadStream colocates only with live handles");
  model_.expect(!chunks.empty() && chunks[0].has_header(), "UploadStream needs a header chunk");
  std::string contents;
  for (const v1::UploadChunk& chunk : chunks) contents += chunk.data();
  Tracked& t = adopt(reply.resident(), c, shape_of(chunks[0].header()));
  model_.expect(static_cast<std::int64_t>(contents.size()) == matrix_bytes(t.shape),
                "UploadStream: the chunks carry exactly the header's bytes");
  t.shape.set_data(std::move(contents));
  t.contents_known = true;
}

void Session::download(Caller c, std::string_view p) {
  v1::DownloadRequest req;
  if (!parse(req, p)) return;
  std::vector<Tracked*> named;
  model_.substitute(req.mutable_handle(), named);
  v1::DownloadReply reply;
  const grpc::Status s = srv_.unary(&Service::Download, c, req, &reply);
  model_.log("Download", c, s);
  model_.check_status("Download", s);
  if (!s.ok()) return;
  model_.expect(!denied(c, true), "Download checks permissions");
  model_.expect(!named.empty() && Model::usable(named, c), "Download of the caller's live handle");
  const Tracked& t = *named[0];
  model_.expect(same_shape(reply.matrix(), t.shape), "Download: the matrix keeps its shape");
  check_contents(t, reply.matrix().data());
}

void Session::download_stream(Caller c, std::string_view p, bool over_grpc) {
  v1::DownloadRequest req;
  if (!parse(req, p)) return;
  std::vector<Tracked*> named;
  model_.substitute(req.mutable_handle(), named);
  std::vector<v1::DownloadChunk> chunks;
  const grpc::Status s = srv_.download_stream(c, req, &chunks, over_grpc);
  model_.log("DownloadStream", c, s);
  model_.check_status("DownloadStream", s);
  if (!s.ok()) {
    model_.expect(chunks.empty(), "a failed DownloadStream sends no chunk");
    return;
  }
  model_.expect(!denied(c, true), "DownloadStream checks permissions");
  model_.expect(!named.empty() && Model::usable(named, c), "DownloadStream of a live handle");
  const Tracked& t = *named[0];
  const std::int64_t chunk_bytes =
      req.chunk_bytes() == 0 ? std::min(kDefaultChunk, srv_.limits().max_message_bytes / 2)
                             : req.chunk_bytes();
  model_.expect(!chunks.empty() && chunks[0].has_header(), "DownloadStream: a header comes first");
  model_.expect(same_shape(chunks[0].header(), t.shape), "DownloadStream: the header's shape");
  std::string contents;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto len = static_cast<std::int64_t>(chunks[i].data().size());
    model_.expect(i == 0 || !chunks[i].has_header(), "DownloadStream: one header only");
    model_.expect(
        static_cast<std::int64_t>(chunks[i].ByteSizeLong()) <= srv_.limits().max_message_bytes,
        "DownloadStream: every chunk fits in one message");
    model_.expect(len <= chunk_bytes && (i + 1 == chunks.size() || len == chunk_bytes),
                  "DownloadStream: full chunks of chunk_bytes, then the rest");
    model_.expect(len > 0 || chunks.size() == 1, "DownloadStream: no empty chunk");
    contents += chunks[i].data();
  }
  check_contents(t, contents);
}

void Session::release(Caller c, std::string_view p) {
  v1::ReleaseRequest req;
  if (!parse(req, p)) return;
  std::vector<Tracked*> named;
  model_.substitute(req.mutable_handle(), named);
  v1::ReleaseReply reply;
  const grpc::Status s = srv_.unary(&Service::Release, c, req, &reply);
  model_.log("Release", c, s);
  model_.check_status("Release", s);
  const bool mine = !named.empty() && Model::usable(named, c) && !denied(c, true);
  model_.expect(s.ok() == mine, "Release succeeds exactly on the caller's live handles");
  if (!s.ok()) return;
  Tracked& t = *named[0];
  model_.expect(reply.bytes_freed() == static_cast<std::int64_t>(server::MemoryPool::size_class(
                                           static_cast<std::size_t>(matrix_bytes(t.shape)))),
                "Release frees the matrix's block");
  t.live = false;
}

void Session::check_listing(Caller c, const v1::ListResidentReply& reply) {
  const std::vector<Tracked*> live = model_.live_of(c);
  model_.expect(reply.matrices_size() == static_cast<int>(live.size()),
                "ListResident lists as many matrices as the caller's calls created and kept");
  std::int64_t total = 0;
  for (const v1::ResidentInfo& r : reply.matrices()) {
    const Tracked* t = model_.find(r.handle());
    model_.expect(t != nullptr && t->live && t->owner == c,
                  "ListResident lists only the caller's live matrices (nothing leaked)");
    model_.expect(same_shape(shape_of_resident(r), t->shape), "ListResident: shapes");
    model_.expect(r.bytes() == matrix_bytes(t->shape), "ListResident: bytes");
    total += r.bytes();
  }
  model_.expect(reply.total_bytes() == total, "ListResident: total_bytes is the sum");
}

void Session::list_resident(Caller c) {
  v1::ListResidentReply reply;
  const grpc::Status s = srv_.unary(&Service::ListResident, c, kListResident, &reply);
  model_.log("ListResident", c, s);
  model_.check_status("ListResident", s);
  model_.expect(s.ok() == !denied(c, true), "ListResident answers callers with the permission");
  if (s.ok()) check_listing(c, reply);
}

void Session::server_info(Caller c) {
  v1::GetServerInfoReply reply;
  const grpc::Status s = srv_.unary(&Service::GetServerInfo, c, kServerInfo, &reply);
  model_.log("GetServerInfo", c, s);
  model_.check_status("GetServerInfo", s);
  model_.expect(s.ok() == !denied(c, false, true), "GetServerInfo answers callers with info");
  if (s.ok()) {
    model_.expect(reply.limits().max_dimension() == srv_.limits().max_dimension,
                  "GetServerInfo reports the limits");
  }
}

void Session::list_kernels(Caller c) {
  v1::ListKernelsReply reply;
  const grpc::Status s = srv_.unary(&Service::ListKernels, c, kListKernels, &reply);
  model_.log("ListKernels", c, s);
  model_.check_status("ListKernels", s);
  model_.expect(s.ok() == !denied(c, false, true), "ListKernels answers callers with info");
}

void Session::finish() {
  if (shm_) shm_->finish();
  for (Caller c : {Caller::kAlice, Caller::kBob}) {
    v1::ListResidentReply listed;
    const grpc::Status s = srv_.unary(&Service::ListResident, c, kListResident, &listed);
    model_.log("ListResident", c, s);
    model_.expect(s.ok(), "the final ListResident succeeds");
    check_listing(c, listed);
    for (const v1::ResidentInfo& r : listed.matrices()) {
      v1::ReleaseRequest req;
      req.set_handle(r.handle());
      v1::ReleaseReply reply;
      const grpc::Status rs = srv_.unary(&Service::Release, c, req, &reply);
      model_.log("Release", c, rs);
      model_.expect(rs.ok(), "the final Release succeeds");
    }
  }
  server::Runtime& runtime = srv_.runtime();
  const server::ResidentStats stats = runtime.residents().stats();
  model_.expect(stats.count == 0 && stats.bytes == 0, "no resident matrix after the final release");
  for (const server::DeviceStats& d : runtime.backend().stats()) {
    model_.expect(d.pool.in_use_bytes == 0 && d.pool.long_lived_bytes == 0,
                  "the pool has no block in use after the final release");
  }
  model_.expect(srv_.in_flight() == 0, "no request in flight between inputs");
}

}  // namespace

void fuzz_service_session(const std::uint8_t* data, std::size_t size, bool with_shm) {
  Session session(with_shm);
  Input in{data, size};
  for (int calls = 0; calls < kMaxCalls && !in.empty(); ++calls) {
    const std::uint8_t op = in.byte();
    session.call(op, in.frame());
  }
  session.finish();
}

}  // namespace matserve::fuzz
