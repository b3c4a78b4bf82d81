// Striped transfer: a matrix's bytes moved as ranges over several gRPC connections at once (one
// channel per stripe, kept apart by distinct channel arguments so that each has its own TCP
// connection). put() creates resident matrices empty and writes all their ranges, get() reads
// ranges of resident matrices into the caller's buffers. The ranges are asynchronous calls, a few
// in flight on every stripe at once: the first ones started together by a few threads kept for
// that (call_starters.h), each next one from the last one's completion (no thread is made per
// call). Ranges go through the generic stub as hand-written messages
// (range_wire.h): a range is sent from the caller's memory and read into the caller's buffer with
// no protobuf copy.
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
#include "client/cpp/call_starters.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
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

  // Sets a call's deadline and metadata (the token).
  using Prepare = std::function<void(grpc::ClientContext&)>;

  // `count` channels to `target`, each with a channel id of its own and its own subchannel pool,
  // so that each opens a TCP connection of its own (gRPC would fold equal channels into one).
  static std::vector<std::shared_ptr<grpc::Channel>> open_channels(
      const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const grpc::ChannelArguments& args, int count);

  // `channels`: one per stripe (at least one); `prepare`: what every call gets unless one is
  // given; `chunk_bytes`: the largest range one call carries.
  StripedTransfer(std::vector<std::shared_ptr<grpc::Channel>> channels, Prepare prepare,
                  std::int64_t chunk_bytes);

  // Creates one resident matrix per source, all at once over the stripes (one that a multi-GPU
  // server places on another device than the first is made again beside it), then writes every
  // range of them all over the stripes. The sources' handles are appended to `made` in their
  // order (then any other handle still to release), also when a later step fails (the caller
  // releases them all).
  absl::Status put(std::span<const Source> sources, std::vector<std::string>& made) {
    return put(sources, made, prepare_, "").status();
  }
  // The same with each call prepared by `prepare`, every matrix made beside `colocate_with` (a
  // resident handle) when that is not empty; the matrices' ResidentInfos in the sources' order.
  absl::StatusOr<std::vector<v1::ResidentInfo>> put(std::span<const Source> sources,
                                                    std::vector<std::string>& made,
                                                    const Prepare& prepare,
                                                    const std::string& colocate_with);
  absl::Status get(std::span<const Sink> sinks) { return get(sinks, prepare_); }
  absl::Status get(std::span<const Sink> sinks, const Prepare& prepare);

  // For bindings that make the whole call here (the Python client's compiled data plane): one
  // unary call of `method` ("/matserve.v1.MatrixService/Multiply") with the serialized `request`
  // on the first stripe, its serialized reply; and one Release of `handles`.
  absl::StatusOr<std::string> unary(const std::string& method, std::string_view request,
                                    const Prepare& prepare);
  absl::Status release(std::span<const std::string> handles, const Prepare& prepare);

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
  // What run() does with one range: its request, and what to do with its reply.
  struct RangeCalls {
    const char* method;
    std::function<grpc::ByteBuffer(const Range&)> request;
    std::function<absl::Status(const Range&, const grpc::ByteBuffer&)> done;
  };
  struct Flight;
  // Calls `calls.method` for every range, kRangesInFlightPerStripe at a time on every stripe;
  // returns once all have finished (after a failure, no new one starts): the first error.
  absl::Status run(const std::vector<Range>& ranges, const RangeCalls& calls,
                   const Prepare& prepare);
  // Starts the next range of `flight` on lane `lane` (its stripe: lane % stripes), or retires the
  // lane when none is left.
  void start_next(Flight& flight, std::size_t lane);
  // The items' ranges: at most chunk_bytes() each, but small enough that every stripe gets one
  // (down to kMinRangeBytes), so that a call of a few MiB still spreads over every connection.
  std::vector<Range> split(std::span<const std::int64_t> sizes) const;
  struct Creation;
  // Starts one CreateResident of `header`'s shape on the stripe; `pending` counts it down once
  // done.
  void start_create(Stripe& stripe, Creation& c, const v1::Matrix& header,
                    const std::string& colocate_with, absl::BlockingCounter& pending,
                    const Prepare& prepare);
  // Every source's matrix, created at once; their ResidentInfos into `infos`, their handles into
  // `made` in the sources' order (and any other handle still to release after them).
  absl::Status create_all(std::span<const Source> sources, std::vector<v1::ResidentInfo>& infos,
                          std::vector<std::string>& made, const Prepare& prepare,
                          const std::string& colocate_with);
  static constexpr std::size_t kRangesInFlightPerStripe = 2;
  static constexpr std::int64_t kMinRangeBytes = std::int64_t{256} << 10;
  // The most threads that start a run's first ranges (besides the caller's own).
  static constexpr std::size_t kMaxStarters = 15;

  std::vector<Stripe> stripes_;
  Prepare prepare_;
  std::atomic<std::int64_t> chunk_bytes_;
  // Declared last: its threads are joined before the stripes go.
  std::unique_ptr<CallStarters> starters_;
};

}  // namespace matserve::client
