// matserve::client::Client: a thin, synchronous wrapper over the MatrixService stub with the
// settings a matrix service needs (1 GiB messages instead of gRPC's 4 MiB, a per-call deadline,
// round-robin over every address of a dns:/// target) and absl::Status errors mapped 1:1; resident
// matrices upload in one message or streamed, whichever fits; large inline operands and results
// move striped over several connections (striped_calls.cc, docs/client.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cpp/polled_call.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "matserve/v1/matrix_service.grpc.pb.h"

namespace grpc {
class Channel;
class ChannelCredentials;
class Status;
}  // namespace grpc

namespace matserve::client {

namespace v1 = ::matserve::v1;
class StripedTransfer;
class ReplicaRouter;
struct Route;

struct ClientOptions {
  // Largest message sent or received. gRPC's 4 MiB default refuses a 1024 x 1024 fp32 matrix;
  // protobuf cannot exceed 2 GiB. Keep it equal to the server's limit (GetServerInfo says it).
  std::int64_t max_message_bytes = std::int64_t{1} << 30;
  // Deadline of each call; zero or negative means none.
  std::chrono::milliseconds deadline = std::chrono::seconds(120);
  // Load-balancing policy for "dns:///" targets (every resolved address gets calls in turn, e.g.
  // the pods behind a headless Kubernetes Service). Other targets keep gRPC's default.
  std::string dns_load_balancing_policy = "round_robin";
  // Null means insecure (plaintext) credentials.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the name the server's certificate must carry when it differs from the target's
  // host (e.g. a certificate for "matserve.example" reached as 127.0.0.1). Empty: the target's.
  std::string tls_server_name;
  // Sent as "authorization: Bearer <token>" on every call when not empty (servers started with
  // --auth_tokens_file require it; the health service does not).
  std::string bearer_token;
  // When positive, connect() waits this long for the channel to become ready and returns
  // UNAVAILABLE if it does not; otherwise the channel connects lazily on the first call.
  std::chrono::milliseconds connect_timeout{0};
  // More integer gRPC channel arguments (name, value), e.g. {"grpc.http2.max_frame_size", 1 << 20}:
  // transport tuning, set after the ones above.
  std::vector<std::pair<std::string, int>> channel_args;
  // Striped transfer: multiply, multiply_batched and transpose calls whose inline operands
  // together carry at least stripe_threshold_bytes move them (and the result) as ranges of at most
  // stripe_chunk_bytes over `stripes` more connections at once, through resident matrices the
  // call makes and releases (the token needs the `resident` permission; without it, or against a
  // server without ranged transfer, the call goes inline). 0 stripes: every call inline.
  // A striped MultiplyBatched writes each operand's stack into one resident matrix (a_stacked)
  // and reads the results kept stacked in one. The defaults are the best of a loopback sweep on
  // an H100 node (docs/client.md): 16 connections of 2 MiB ranges; striping wins from 1024^3
  // fp32 (8 MiB of operands) up.
  int stripes = 16;
  std::int64_t stripe_threshold_bytes = std::int64_t{8} << 20;
  std::int64_t stripe_chunk_bytes = std::int64_t{2} << 20;
  // Wait for each unary reply by polling (the calling thread spins on its call's completion
  // queue) instead of sleeping: the reply is read without waking an idle CPU, tens of
  // microseconds a call on hosts whose idle CPUs halt, at the price of one busy core per call in
  // flight. Off by default; for latency-bound callers (polled_call.h).
  bool poll_replies = false;
};

// grpc::Status -> absl::Status: the code numbers agree, the message is kept.
absl::Status from_grpc_status(const grpc::Status& status);

// The canonical upper-case name of a status code ("INVALID_ARGUMENT", "UNAVAILABLE", ...).
std::string status_code_name(absl::StatusCode code);

// One Client may be shared by threads: every call makes its own context on the shared channel.
class Client {
 public:
  // `target` is any gRPC target: "host:port", "unix:/path", ... Several replicas: a list
  // "host:port,host:port" or "dns:///name:port" (every address the name resolves to now) gets a
  // channel per replica; calls naming a resident handle go to the replica whose id the handle
  // carries, calls naming a region to the replica it was registered with, others round robin
  // (replica_router.h; striping needs a single-replica target).
  static absl::StatusOr<std::unique_ptr<Client>> connect(const std::string& target,
                                                         ClientOptions options = {});

  absl::StatusOr<v1::MultiplyReply> multiply(const v1::MultiplyRequest& request);
  // `request.batch` products of one shape in one call: operands stacked inline (Matrix.batch) or
  // as handle lists; the reply's c stacks the results (or `results` lists them with keep_result).
  absl::StatusOr<v1::MultiplyBatchedReply> multiply_batched(
      const v1::MultiplyBatchedRequest& request);
  absl::StatusOr<v1::TransposeReply> transpose(const v1::TransposeRequest& request);
  absl::StatusOr<v1::ListKernelsReply> list_kernels();
  absl::StatusOr<v1::GetServerInfoReply> get_server_info();
  // grpc.health.v1.Health/Check for `service` ("" = the whole server): the status's name,
  // e.g. "SERVING" or "NOT_SERVING".
  absl::StatusOr<std::string> health(const std::string& service = {});

  // Resident matrices (kept in device memory between calls; name the handle in Multiply or
  // Transpose requests). Upload sends one message when the matrix fits in max_message_bytes (less
  // 1 MiB of headroom) and streams it in `chunk_bytes` pieces otherwise, or always when
  // `chunk_bytes` > 0. `colocate_with`: a resident handle whose device the new matrix goes to
  // (operands of one request must share a device); empty: the server's least-loaded device.
  absl::StatusOr<v1::ResidentInfo> upload(const v1::Matrix& matrix, std::int64_t chunk_bytes = 0,
                                          const std::string& colocate_with = {});
  // One message (the matrix must fit in max_message_bytes), or streamed in chunks of
  // `chunk_bytes` (> 0; the server's default when 0 is passed to DownloadStream).
  absl::StatusOr<v1::Matrix> download(const std::string& handle);
  absl::StatusOr<v1::Matrix> download_stream(const std::string& handle,
                                             std::int64_t chunk_bytes = 0);
  absl::StatusOr<v1::ReleaseReply> release(const std::string& handle);
  // Several handles in one call (e.g. a batch's results).
  absl::StatusOr<v1::ReleaseReply> release(const std::vector<std::string>& handles);
  absl::StatusOr<v1::ListResidentReply> list_resident();

  // Shared-memory regions (a server on this node): register `key` (e.g. a SharedMemoryObject's)
  // as `name`, then name region + offset in Matrix.shm and output_shm. Unregister "" = all.
  // This process must be able to write the object: the server's possession check (its nonce
  // written into the range's first bytes, then restored) is done here.
  absl::StatusOr<v1::SharedMemoryRegion> register_shared_memory(const std::string& name,
                                                                const std::string& key,
                                                                std::int64_t byte_size,
                                                                std::int64_t offset = 0);
  // GPU memory of this process exported by CUDA IPC (request.ipc_handle: a cudaIpcMemHandle_t).
  absl::StatusOr<v1::SharedMemoryRegion> register_cuda_memory(
      const v1::RegisterCudaMemoryRequest& request);
  absl::StatusOr<int> unregister_shared_memory(const std::string& name);
  absl::StatusOr<v1::ListSharedMemoryReply> list_shared_memory();

  const std::string& target() const { return target_; }
  const ClientOptions& options() const { return options_; }

  // Only connect() can make the key (passkey idiom: std::make_unique, no raw new).
  class Key {
    friend class Client;
    Key() = default;
  };
  // `channels`: one per replica (the first also serves the striped path); `routed`: several
  // replicas, calls routed by handle (false: one target, every call on channels[0]).
  Client(Key, std::string target, ClientOptions options,
         std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>> channels, bool routed,
         std::vector<std::shared_ptr<grpc::Channel>> stripe_channels = {});
  ~Client();

 private:
  void prepare_context(grpc::ClientContext& context) const;
  // One unary call of `rpc` on the replica `route` names (its handle's or region's; none: the
  // next in turn), with prepare_context's deadline and token: the reply, or the call's status.
  template <typename Request, typename Reply>
  using BlockingRpc = grpc::Status (v1::MatrixService::StubInterface::*)(grpc::ClientContext*,
                                                                         const Request&, Reply*);
  template <typename Request, typename Reply>
  using PreparedRpc = std::unique_ptr<grpc::ClientAsyncResponseReaderInterface<Reply>> (
      v1::MatrixService::StubInterface::*)(grpc::ClientContext*, const Request&,
                                           grpc::CompletionQueue*);
  // One unary call of `rpc` on the replica `route` names (its handle's or region's; none: the
  // next in turn), with prepare_context's deadline and token: the reply, or the call's status.
  // `prepared` is the same method's PrepareAsync form, used when replies are polled for.
  template <typename Request, typename Reply>
  absl::StatusOr<Reply> unary(BlockingRpc<Request, Reply> rpc, PreparedRpc<Request, Reply> prepared,
                              const Request& request, const Route& route) {
    Reply reply;
    if (absl::Status s = run_routed(
            route,
            [&](v1::MatrixService::StubInterface& stub, grpc::ClientContext& c) {
              return call_unary(
                  options_.poll_replies, [&] { return (stub.*rpc)(&c, request, &reply); },
                  [&](grpc::CompletionQueue* cq) { return (stub.*prepared)(&c, request, cq); },
                  &reply);
            });
        !s.ok()) {
      return s;
    }
    return reply;
  }
  using RoutedCall =
      std::function<grpc::Status(v1::MatrixService::StubInterface&, grpc::ClientContext&)>;
  absl::Status run_routed(const Route& route, const RoutedCall& call);
  absl::StatusOr<v1::ResidentInfo> upload_stream(const v1::Matrix& matrix, std::int64_t chunk_bytes,
                                                 const std::string& colocate_with);
  // The striped path (striped_calls.cc). stripes_call: whether operands of these inline sizes
  // (-1: shared memory) go striped. The *_striped calls return nullopt when the server cannot
  // take them so (no ranged transfer, or no `resident` permission): the caller goes inline.
  bool stripes_call(std::initializer_list<std::int64_t> operand_bytes) const;
  absl::StatusOr<std::optional<v1::MultiplyReply>> multiply_striped(
      const v1::MultiplyRequest& request);
  absl::StatusOr<std::optional<v1::MultiplyBatchedReply>> multiply_batched_striped(
      const v1::MultiplyBatchedRequest& request);
  absl::StatusOr<std::optional<v1::TransposeReply>> transpose_striped(
      const v1::TransposeRequest& request);
  void release_quietly(const std::vector<std::string>& handles);
  // Once per client, before its first striped call: ranges no larger than the server's
  // ServerLimits.max_range_bytes (GetServerInfo; unknown: the client's own limit stands).
  void fit_ranges_to_server();

  std::string target_;
  ClientOptions options_;
  std::unique_ptr<ReplicaRouter> router_;     // every call's replica
  std::unique_ptr<StripedTransfer> striped_;  // null with 0 stripes
  std::once_flag ranges_fitted_;
};

}  // namespace matserve::client
