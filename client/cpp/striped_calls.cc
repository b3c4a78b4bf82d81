// Client's striped path (docs/client.md): a multiply, multiply_batched or transpose whose inline
// operands together reach ClientOptions::stripe_threshold_bytes moves them as ranges over the
// stripe connections into resident matrices made for the call, runs the operation on their
// handles keeping the result, reads the result back in ranges into the reply, and releases every
// matrix it made, also after a failure. Smaller calls, and calls naming shared memory, go inline.
#include <array>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "client/cpp/replica_router.h"
#include "client/cpp/striped_transfer.h"
#include "grpcpp/client_context.h"

namespace matserve::client {
namespace {

// A server without ranged transfer (an older one), or a token without the `resident` permission:
// the call goes inline instead.
bool inline_instead(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnimplemented ||
         s.code() == absl::StatusCode::kPermissionDenied;
}

// Sizes `out` to `bytes` and lets `read(span)` fill them. With C++23's resize_and_overwrite the
// bytes are not zeroed first: for a 64 MiB result that zeroing (and its page faults, on one
// thread) took about 30 ms on a GPU node, where the ranges' own writes fault the pages in from
// several threads at once.
absl::Status read_into(std::string& out, std::size_t bytes,
                       const std::function<absl::Status(std::span<char>)>& read) {
#if defined(__cpp_lib_string_resize_and_overwrite)
  absl::Status status;
  out.resize_and_overwrite(bytes, [&](char* p, std::size_t n) {
    status = read({p, n});
    return n;
  });
  return status;
#else
  out.resize(bytes);
  return read({out.data(), out.size()});
#endif
}

// Reads the kept result `kept` over the stripes into `out` (sized to it here).
absl::Status read_kept(StripedTransfer& striped, const v1::ResidentInfo& kept, std::string& out) {
  return read_into(out, static_cast<std::size_t>(kept.bytes()), [&](std::span<char> bytes) {
    const StripedTransfer::Sink sink{kept.handle(), bytes};
    return striped.get({&sink, 1});
  });
}

}  // namespace

bool Client::stripes_call(std::initializer_list<std::int64_t> operand_bytes) const {
  if (striped_ == nullptr) return false;
  std::int64_t total = 0;
  for (std::int64_t b : operand_bytes) {
    if (b < 0) return false;
    total += b;
  }
  return total > 0 && total >= options_.stripe_threshold_bytes;
}

void Client::fit_ranges_to_server() {
  std::call_once(ranges_fitted_, [this] {
    absl::StatusOr<v1::GetServerInfoReply> info = get_server_info();
    if (!info.ok()) return;
    const v1::ServerLimits& l = info->limits();
    striped_->limit_chunk_bytes(l.max_range_bytes() > 0 ? l.max_range_bytes()
                                                        : l.max_message_bytes() - 1024);
  });
}

void Client::release_quietly(const std::vector<std::string>& handles) {
  if (handles.empty()) return;
  grpc::ClientContext context;
  prepare_context(context);
  v1::ReleaseRequest request;
  for (const std::string& h : handles) request.add_handles(h);
  v1::ReleaseReply reply;
  (void)router_->replica(0).stub->Release(&context, request,
                                          &reply);  // a matrix not released expires with its TTL
}

absl::StatusOr<std::optional<v1::MultiplyReply>> Client::multiply_striped(
    const v1::MultiplyRequest& request) {
  std::vector<std::string> made;
  const absl::Cleanup release = [&] { release_quietly(made); };
  // The request without its inline operands, which become handles.
  v1::MultiplyRequest r;
  r.set_transpose_a(request.transpose_a());
  r.set_transpose_b(request.transpose_b());
  if (request.has_alpha()) r.set_alpha(request.alpha());
  if (request.has_beta()) r.set_beta(request.beta());
  r.set_variant(request.variant());
  r.set_compute(request.compute());
  r.set_output_dtype(request.output_dtype());
  r.set_output_layout(request.output_layout());
  r.set_verify(request.verify());
  r.set_a_handle(request.a_handle());
  r.set_b_handle(request.b_handle());
  r.set_c_handle(request.c_handle());
  r.set_keep_result(true);
  std::vector<StripedTransfer::Source> sources;
  std::vector<std::string*> targets;
  const auto take = [&](bool present, const v1::Matrix& m, std::string* handle) {
    if (!present || m.data().empty()) return;
    sources.push_back({&m, m.data()});
    targets.push_back(handle);
  };
  take(request.has_a(), request.a(), r.mutable_a_handle());
  take(request.has_b(), request.b(), r.mutable_b_handle());
  take(request.has_c(), request.c(), r.mutable_c_handle());
  fit_ranges_to_server();
  if (absl::Status s = striped_->put(sources, made); !s.ok()) {
    if (made.empty() && inline_instead(s)) return std::nullopt;
    return s;
  }
  for (std::size_t i = 0; i < targets.size(); ++i) *targets[i] = made[i];
  absl::StatusOr<v1::MultiplyReply> called =
      unary(&v1::MatrixService::StubInterface::Multiply,
            &v1::MatrixService::StubInterface::PrepareAsyncMultiply, r, {});
  if (!called.ok()) return called.status();
  v1::MultiplyReply& reply = *called;
  if (request.keep_result()) return std::move(reply);  // the caller keeps it; the operands go
  made.push_back(reply.result().handle());
  if (absl::Status s = read_kept(*striped_, reply.result(), *reply.mutable_c()->mutable_data());
      !s.ok()) {
    return s;
  }
  reply.clear_result();
  return std::move(reply);
}

absl::StatusOr<std::optional<v1::TransposeReply>> Client::transpose_striped(
    const v1::TransposeRequest& request) {
  std::vector<std::string> made;
  const absl::Cleanup release = [&] { release_quietly(made); };
  v1::TransposeRequest r;
  if (request.has_scale()) r.set_scale(request.scale());
  r.set_variant(request.variant());
  r.set_verify(request.verify());
  r.set_keep_result(true);
  const StripedTransfer::Source source{&request.a(), request.a().data()};
  fit_ranges_to_server();
  if (absl::Status s = striped_->put({&source, 1}, made); !s.ok()) {
    if (made.empty() && inline_instead(s)) return std::nullopt;
    return s;
  }
  r.set_a_handle(made.front());
  absl::StatusOr<v1::TransposeReply> called =
      unary(&v1::MatrixService::StubInterface::Transpose,
            &v1::MatrixService::StubInterface::PrepareAsyncTranspose, r, {});
  if (!called.ok()) return called.status();
  v1::TransposeReply& reply = *called;
  if (request.keep_result()) return std::move(reply);
  made.push_back(reply.result().handle());
  if (absl::Status s = read_kept(*striped_, reply.result(), *reply.mutable_b()->mutable_data());
      !s.ok()) {
    return s;
  }
  reply.clear_result();
  return std::move(reply);
}

absl::StatusOr<std::optional<v1::MultiplyBatchedReply>> Client::multiply_batched_striped(
    const v1::MultiplyBatchedRequest& request) {
  std::vector<std::string> made;
  const absl::Cleanup release = [&] { release_quietly(made); };
  v1::MultiplyBatchedRequest r;
  r.set_batch(request.batch());
  *r.mutable_a_handles() = request.a_handles();
  *r.mutable_b_handles() = request.b_handles();
  *r.mutable_c_handles() = request.c_handles();
  r.set_a_stacked(request.a_stacked());
  r.set_b_stacked(request.b_stacked());
  r.set_c_stacked(request.c_stacked());
  if (request.has_a_scale()) r.set_a_scale(request.a_scale());
  if (request.has_b_scale()) r.set_b_scale(request.b_scale());
  r.set_transpose_a(request.transpose_a());
  r.set_transpose_b(request.transpose_b());
  if (request.has_alpha()) r.set_alpha(request.alpha());
  if (request.has_beta()) r.set_beta(request.beta());
  r.set_variant(request.variant());
  r.set_compute(request.compute());
  r.set_output_dtype(request.output_dtype());
  r.set_output_layout(request.output_layout());
  r.set_verify(request.verify());
  // Kept for the caller as asked (one each, or stacked in one); else kept stacked, read back.
  const bool callers = request.keep_result() || request.keep_stacked();
  r.set_keep_result(request.keep_result());
  r.set_keep_stacked(request.keep_stacked() || !callers);
  // Each inline operand's stack becomes one resident matrix: row-major (batch * rows) x cols,
  // column-major rows x (batch * cols), named by its *_stacked field; a broadcast matrix (batch
  // 1) becomes one handle for every product. Whatever the matrices' size: a few ranges move a
  // thousand small ones.
  std::array<v1::Matrix, 3> headers;  // the resident matrices' shapes (put reads them)
  std::vector<StripedTransfer::Source> sources;
  // Where each made handle goes: a *_stacked field, or (a broadcast matrix) a handle list.
  struct Destination {
    std::string* stacked;
    google::protobuf::RepeatedPtrField<std::string>* handles;
  };
  std::vector<Destination> destinations;
  const auto take = [&](bool present, const v1::Matrix& m, v1::Matrix& header, std::string* stacked,
                        google::protobuf::RepeatedPtrField<std::string>* handles) {
    if (!present || m.data().empty()) return;
    const std::int64_t n = std::max<std::int64_t>(m.batch(), 1);
    header.set_rows(m.rows());
    header.set_cols(m.cols());
    header.set_dtype(m.dtype());
    header.set_layout(m.layout());
    if (n > 1 && m.layout() == v1::COL_MAJOR) header.set_cols(m.cols() * n);
    if (n > 1 && m.layout() != v1::COL_MAJOR) header.set_rows(m.rows() * n);
    sources.push_back({&header, m.data()});
    destinations.push_back({n > 1 ? stacked : nullptr, handles});
  };
  take(request.has_a(), request.a(), headers[0], r.mutable_a_stacked(), r.mutable_a_handles());
  take(request.has_b(), request.b(), headers[1], r.mutable_b_stacked(), r.mutable_b_handles());
  take(request.has_c(), request.c(), headers[2], r.mutable_c_stacked(), r.mutable_c_handles());
  fit_ranges_to_server();
  if (absl::Status s = striped_->put(sources, made); !s.ok()) {
    if (made.empty() && inline_instead(s)) return std::nullopt;
    return s;
  }
  for (std::size_t i = 0; i < destinations.size(); ++i) {
    if (destinations[i].stacked != nullptr) {
      *destinations[i].stacked = made[i];
    } else {
      destinations[i].handles->Add(std::string(made[i]));
    }
  }
  grpc::ClientContext context;
  prepare_context(context);
  v1::MultiplyBatchedReply reply;
  if (absl::Status s =
          from_grpc_status(router_->replica(0).stub->MultiplyBatched(&context, r, &reply));
      !s.ok()) {
    for (const v1::ResidentInfo& k : reply.results()) made.push_back(k.handle());
    return s;
  }
  if (callers) return reply;
  std::int64_t total = 0;
  for (const v1::ResidentInfo& k : reply.results()) {
    made.push_back(k.handle());
    total += k.bytes();
  }
  const absl::Status read = read_into(*reply.mutable_c()->mutable_data(),
                                      static_cast<std::size_t>(total), [&](std::span<char> out) {
                                        std::vector<StripedTransfer::Sink> sinks;
                                        std::size_t offset = 0;
                                        for (const v1::ResidentInfo& k : reply.results()) {
                                          const auto n = static_cast<std::size_t>(k.bytes());
                                          sinks.push_back({k.handle(), out.subspan(offset, n)});
                                          offset += n;
                                        }
                                        return striped_->get(sinks);
                                      });
  if (!read.ok()) return read;
  reply.clear_results();
  return reply;
}

}  // namespace matserve::client
