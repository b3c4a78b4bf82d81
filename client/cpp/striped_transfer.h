// Striped transfer: a matrix's bytes moved as ranges over several gRPC connections at once (one
// channel per stripe, kept apart by distinct channel arguments so that each has its own TCP
// connection). put() creates resident matrices empty and writes all their ranges, get() reads
// ranges of resident matrices into the caller's buffers; each runs one thread per stripe. Ranges
// go through the generic stub as hand-written messages (range_wire.h): a range is sent from the
// caller's memory and read into the caller's buffer with no protobuf copy.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/blocking_counter.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "matserve/v1/matrix_service.grpc.pb.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace matserve::client {

namespace v1 = ::matserve::v1;

// Inline bytes an operand carries (0 for a handle or an absent one); -1 for shared memory, which
// keeps the whole call inline.
std::int64_t inline_bytes(bool present, const v1::Matrix& m);

class StripedTransfer {
 public:
  // A matrix to create: its header (rows, cols, dtype, layout; data ignored) and bytes.
  struct Source {
    const v1::Matrix* header;
    std::string_view bytes;
  };
  // A resident matrix's bytes to read into `out` (exactly its size).
  struct Sink {
    std::string handle;
    std::span<char> out;
  };

  // `channels`: one per stripe (at least one); `prepare`: sets the deadline and token of a call;
  // `chunk_bytes`: the largest range one call carries.
  StripedTransfer(std::vector<std::shared_ptr<grpc::Channel>> channels,
                  std::function<void(grpc::ClientContext&)> prepare, std::int64_t chunk_bytes);

  // Creates one resident matrix per source, all at once over the stripes (one that a multi-GPU
  // server places on another device than the first is made again beside it), then writes every
  // range of them all over the stripes. The sources' handles are appended to `made` in their
  // order (then any other handle still to release), also when a later step fails (the caller
  // releases them all).
  absl::Status put(std::span<const Source> sources, std::vector<std::string>& made);
  absl::Status get(std::span<const Sink> sinks);

  std::size_t stripes() const { return stripes_.size(); }
  std::int64_t chunk_bytes() const { return chunk_bytes_.load(); }
  // Ranges of at most `limit` bytes from now on (what one message of the server carries).
  void limit_chunk_bytes(std::int64_t limit);

 private:
  // One connection's stubs: the service's (CreateResident) and the generic one (ranges).
  struct Stripe {
    std::unique_ptr<v1::MatrixService::Stub> stub;
    std::unique_ptr<grpc::GenericStub> generic;
  };
  struct Range {
    std::size_t item;
    std::int64_t offset;
    std::int64_t length;
  };
  // Runs `one(stripe, range)` for every range over the stripes, one thread each; the first error.
  absl::Status run(const std::vector<Range>& ranges,
                   const std::function<absl::Status(Stripe&, const Range&)>& one);
  std::vector<Range> split(std::span<const std::int64_t> sizes) const;
  struct Creation;
  // Starts one CreateResident of `header`'s shape on the stripe; `pending` counts it down once
  // done.
  void start_create(Stripe& stripe, Creation& c, const v1::Matrix& header,
                    const std::string& colocate_with, absl::BlockingCounter& pending);
  // Releases one resident matrix.
  absl::Status release(const std::string& handle);
  // Every source's matrix, created at once; their ResidentInfos into `infos`, their handles into
  // `made` in the sources' order (and any other handle still to release after them).
  absl::Status create_all(std::span<const Source> sources, std::vector<v1::ResidentInfo>& infos,
                          std::vector<std::string>& made);
  // One unary call of `method` on the stripe's generic stub, waited for.
  absl::Status call(Stripe& stripe, const char* method, const grpc::ByteBuffer& request,
                    grpc::ByteBuffer* reply);

  std::vector<Stripe> stripes_;
  std::function<void(grpc::ClientContext&)> prepare_;
  std::atomic<std::int64_t> chunk_bytes_;
};

}  // namespace matserve::client
