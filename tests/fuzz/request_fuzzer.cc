// libFuzzer target over matserve's requests. The first byte picks the mode (modulo 5): 0, 1, 2
// parse the rest as a MultiplyRequest, TransposeRequest or the first UploadChunk of a stream and
// validate it against small limits with a resolver that knows one fake handle (invariants on
// success: every byte span lies inside the request, sizes match the shapes); 3 runs the rest as a
// session of calls on the real service in process (service_session.h: streams, resident
// matrices, permissions, and the server back to zero resident bytes after each input); 4 the
// same with shared-memory regions of real objects (service_shm.h).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/stubs/logging.h"
#include "matserve/v1/matrix_service.pb.h"
#include "server/runtime/jobs.h"
#include "server/runtime/resident_store.h"
#include "server/service/limits.h"
#include "server/service/validation.h"
#include "tests/fuzz/service_session.h"

namespace {

using matserve::server::HostMatrix;
using matserve::server::Operand;
using matserve::server::ResidentMatrix;
using matserve::server::ServiceLimits;

constexpr char kKnownHandle[] = "00112233445566778899aabbccddeeff";

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "request_fuzzer: invariant violated: %s\n", what);
    std::abort();
  }
}

ServiceLimits fuzz_limits() {
  ServiceLimits l;
  l.max_message_bytes = 1 << 20;
  l.max_dimension = 4096;
  l.max_matrix_bytes = 1 << 20;
  return l;
}

// One fake resident matrix (24 x 8 fp32, no device memory) behind kKnownHandle.
std::shared_ptr<ResidentMatrix> fake_resident() {
  auto m = std::make_shared<ResidentMatrix>();
  m->handle = kKnownHandle;
  absl::MutexLock lock(&m->mu);
  m->rows = 24;
  m->cols = 8;
  return m;
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> resolve(const std::string& field,
                                                        const std::string& handle) {
  static const std::shared_ptr<ResidentMatrix> known = fake_resident();
  if (handle == kKnownHandle) return known;
  return absl::NotFoundError(field + ": unknown handle");
}

// `span` lies inside `whole` (the request's serialized-then-parsed bytes field).
bool inside(std::span<const std::byte> span, const std::string& whole) {
  if (span.empty()) return true;
  const auto* lo = reinterpret_cast<const std::byte*>(whole.data());
  return span.data() >= lo && span.data() + span.size() <= lo + whole.size();
}

void check_operand(const Operand& o, const matserve::v1::Matrix& m, const ServiceLimits& limits) {
  check(o.rows >= 1 && o.cols >= 1, "operand dims >= 1");
  if (o.is_resident()) {
    check(o.data.empty(), "resident operand has no inline bytes");
    return;
  }
  check(o.rows <= limits.max_dimension && o.cols <= limits.max_dimension, "dims within limits");
  check(o.bytes() == o.data.size(), "operand bytes == rows * cols * element size");
  check(static_cast<std::int64_t>(o.bytes()) <= limits.max_matrix_bytes, "matrix bytes limit");
  check(inside(o.data, m.data()), "operand span inside the request");
}

void fuzz_multiply(const std::uint8_t* data, std::size_t size, const ServiceLimits& limits) {
  matserve::v1::MultiplyRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<matserve::server::GemmJob> job =
      matserve::server::validate_multiply(req, limits, resolve);
  if (!job.ok()) return;
  check_operand(job->a, req.a(), limits);
  check_operand(job->b, req.b(), limits);
  const std::int64_t kb = job->transpose_b ? job->b.cols : job->b.rows;
  check(job->k() == kb, "inner dimensions agree");
  check(job->a.dtype == job->b.dtype, "a and b share one dtype");
  check(static_cast<std::int64_t>(job->out_bytes()) <= limits.max_matrix_bytes, "output limit");
  if (job->c.has_value()) {
    check_operand(*job->c, req.c(), limits);
    check(job->c->rows == job->m() && job->c->cols == job->n(), "c is m x n");
    check(job->c->dtype == job->out_dtype, "c has the output dtype");
  }
}

void fuzz_transpose(const std::uint8_t* data, std::size_t size, const ServiceLimits& limits) {
  matserve::v1::TransposeRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<matserve::server::TransposeJob> job =
      matserve::server::validate_transpose(req, limits, resolve);
  if (!job.ok()) return;
  check_operand(job->a, req.a(), limits);
  check(job->out_bytes() == job->a.bytes(), "transpose output size");
  check(!job->in_place || job->a.is_resident(), "in_place only on a resident matrix");
}

void fuzz_upload_header(const std::uint8_t* data, std::size_t size, const ServiceLimits& limits) {
  matserve::v1::UploadChunk chunk;
  if (!chunk.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<HostMatrix> h =
      matserve::server::validate_header("header", chunk.header(), limits);
  if (h.ok()) {
    check(h->rows >= 1 && h->cols >= 1, "header dims >= 1");
    check(h->rows <= limits.max_dimension && h->cols <= limits.max_dimension, "header dims limit");
    check(static_cast<std::int64_t>(h->bytes()) <= limits.max_matrix_bytes, "header bytes limit");
    check(h->data.empty(), "a header carries no data span");
  }
  // The whole-matrix path (Upload) on the same bytes.
  absl::StatusOr<HostMatrix> m =
      matserve::server::validate_matrix("matrix", chunk.header(), limits);
  if (m.ok()) {
    check(m->bytes() == m->data.size(), "matrix bytes == data size");
    check(inside(m->data, chunk.header().data()), "matrix span inside the request");
  }
}

// Protobuf logs every string field with invalid UTF-8 that it parses, as most mutated inputs
// have one: those lines are dropped, every other message still goes to stderr.
void protobuf_log(google::protobuf::LogLevel level, const char* file, int line,
                  const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_ERROR &&
      message.find("invalid UTF-8") != std::string::npos) {
    return;
  }
  std::fprintf(stderr, "[libprotobuf %d %s:%d] %s\n", static_cast<int>(level), file, line,
               message.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = (google::protobuf::SetLogHandler(protobuf_log), true);
  (void)quiet;
  if (size < 1) return 0;
  static const ServiceLimits limits = fuzz_limits();
  switch (data[0] % 5) {
    case 0: fuzz_multiply(data + 1, size - 1, limits); break;
    case 1: fuzz_transpose(data + 1, size - 1, limits); break;
    case 2: fuzz_upload_header(data + 1, size - 1, limits); break;
    case 3: matserve::fuzz::fuzz_service_session(data + 1, size - 1, false); break;
    default: matserve::fuzz::fuzz_service_session(data + 1, size - 1, true); break;
  }
  return 0;
}
