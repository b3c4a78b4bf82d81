// An in-process matserve for the fuzz target's service sessions: the real MatrixServiceImpl on
// the CPU backend with tiny limits. Calls go straight to its handlers with a ServerContext that
// carries the caller's metadata (no threads, microseconds per call), the streaming ones through
// gRPC's stream interfaces, with gRPC's message size limits applied around them as the server
// applies them. A gRPC server that listens on no port serves the same service through its
// in-process channel, for streams driven over real gRPC (about a millisecond each). Built once
// per process; every fuzz input talks to the same one and leaves it as it found it (no resident
// matrix, no pool memory in use).
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/test/server_context_test_spouse.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "matserve/v1/matrix_service.grpc.pb.h"
#include "server/runtime/runtime.h"
#include "server/service/limits.h"
#include "server/service/matrix_service.h"

namespace matserve::fuzz {

// Who calls: two owners with every permission, one token that may only compute, and a caller
// with no token at all (authentication is on).
enum class Caller { kAlice, kBob, kComputeOnly, kAnonymous };
constexpr int kCallers = 4;

// A server-side context for a direct handler call, with the caller's metadata.
struct ServerCall {
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse{&context};  // holds the metadata it adds
};

class FuzzServer {
 public:
  static FuzzServer& get();

  server::MatrixServiceImpl& service();
  server::Runtime& runtime() { return *runtime_; }
  const server::ServiceLimits& limits() const { return limits_; }
  // Requests in flight according to the service's metrics (0 between calls).
  double in_flight() const;

  // A unary call as gRPC would make it: RESOURCE_EXHAUSTED, without calling the handler, for a
  // request larger than max_message_bytes, and instead of an OK reply larger than that. The
  // handler's trailing metadata goes to `trailers` when given.
  template <typename Request, typename Reply>
  grpc::Status unary(grpc::Status (server::MatrixServiceImpl::*handler)(grpc::ServerContext*,
                                                                        const Request*, Reply*),
                     Caller c, const Request& request, Reply* reply,
                     std::multimap<std::string, std::string>* trailers = nullptr) {
    const auto limit = static_cast<std::size_t>(limits_.max_message_bytes);
    if (request.ByteSizeLong() > limit) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "Received message larger than max");
    }
    const std::unique_ptr<ServerCall> call = server_call(c);
    grpc::Status s = (service().*handler)(&call->context, &request, reply);
    if (trailers != nullptr) *trailers = call->spouse.GetTrailingMetadata();
    if (s.ok() && reply->ByteSizeLong() > limit) {
      reply->Clear();
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "Sent message larger than max");
    }
    return s;
  }

  // The streaming RPCs, straight to the handler or (`over_grpc`) over the in-process channel. A
  // chunk larger than a message always goes over gRPC, which ends such a stream; then `orphan`
  // names the matrix the handler published if it succeeded although gRPC failed the call (the
  // caller never hears of it). Over gRPC, both return once the handler has returned.
  // DownloadStream returns every chunk the handler wrote, as written.
  grpc::Status upload_stream(Caller c, const std::vector<v1::UploadChunk>& chunks,
                             v1::UploadReply* reply, bool over_grpc, std::string* orphan);
  grpc::Status download_stream(Caller c, const v1::DownloadRequest& request,
                               std::vector<v1::DownloadChunk>* chunks, bool over_grpc);

 private:
  FuzzServer();
  struct Parts;

  // Contexts carrying `c`'s bearer token (none for kAnonymous): a client's, a handler's.
  std::unique_ptr<grpc::ClientContext> context(Caller c) const;
  std::unique_ptr<ServerCall> server_call(Caller c) const;

  server::ServiceLimits limits_;
  std::unique_ptr<Parts> parts_;
  server::Runtime* runtime_ = nullptr;
  std::unique_ptr<v1::MatrixService::Stub> stub_;
};

}  // namespace matserve::fuzz
