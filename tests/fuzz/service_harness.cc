// The in-process fuzz server: see service_harness.h.
#include "tests/fuzz/service_harness.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/runtime/cpu_backend.h"
#include "server/service/auth.h"
#include "server/service/matrix_service.h"

namespace matserve::fuzz {
namespace {

constexpr const char* kTokens[kCallers] = {"alice-token-0123456789", "bob-token-0123456789ab",
                                           "compute-token-01234567", nullptr};

// Tokens as --auth_tokens_file lines: alice and bob hold every permission, the third only compute.
constexpr char kTokenLines[] =
    "alice-token-0123456789 alice\n"
    "bob-token-0123456789ab bob\n"
    "compute-token-01234567 carol compute\n";

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "service_harness: %s\n", what);
  std::abort();
}

// An UploadStream's chunks, as the handler reads them from a client.
class ChunkReader final : public grpc::ServerReaderInterface<v1::UploadChunk> {
 public:
  explicit ChunkReader(const std::vector<v1::UploadChunk>& chunks) : chunks_(chunks) {}

  void SendInitialMetadata() override {}
  bool NextMessageSize(std::uint32_t* size) override {
    if (next_ == chunks_.size()) return false;
    *size = static_cast<std::uint32_t>(chunks_[next_].ByteSizeLong());
    return true;
  }
  bool Read(v1::UploadChunk* chunk) override {
    if (next_ == chunks_.size()) return false;
    *chunk = chunks_[next_++];
    return true;
  }

 private:
  const std::vector<v1::UploadChunk>& chunks_;
  std::size_t next_ = 0;
};

// A DownloadStream's chunks, as the handler writes them to a client that reads them all.
class ChunkWriter final : public grpc::ServerWriterInterface<v1::DownloadChunk> {
 public:
  explicit ChunkWriter(std::vector<v1::DownloadChunk>* chunks) : chunks_(chunks) {}

  void SendInitialMetadata() override {}
  bool Write(const v1::DownloadChunk& chunk, grpc::WriteOptions /*options*/) override {
    chunks_->push_back(chunk);
    return true;
  }

 private:
  std::vector<v1::DownloadChunk>* chunks_;
};

}  // namespace

// What the in-process gRPC server serves: the real service's streaming RPCs, each handler's own
// outcome kept. gRPC may end a stream itself (a message over the size limit) and answer the
// client while the handler still runs; the handler may even succeed. The session learns of it
// here, after the handler returned.
class StreamForwarder final : public v1::MatrixService::Service {
 public:
  explicit StreamForwarder(server::MatrixServiceImpl& impl) : impl_(impl) {}

  grpc::Status UploadStream(grpc::ServerContext* context,
                            grpc::ServerReader<v1::UploadChunk>* reader,
                            v1::UploadReply* reply) override {
    grpc::Status s = impl_.UploadStream(context, reader, reply);
    finish(s, reply->resident().handle());
    return s;
  }
  grpc::Status DownloadStream(grpc::ServerContext* context, const v1::DownloadRequest* request,
                              grpc::ServerWriter<v1::DownloadChunk>* writer) override {
    grpc::Status s = impl_.DownloadStream(context, request, writer);
    finish(s, "");
    return s;
  }

  std::uint64_t finished() const {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  // Waits until `n` handlers have returned; the last one's status and the handle an OK
  // UploadStream created. False after 10 s.
  bool wait(std::uint64_t n, grpc::Status* status, std::string* handle) const {
    absl::MutexLock lock(&mu_);
    const auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_ >= n; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10))) return false;
    *status = last_;
    *handle = last_handle_;
    return true;
  }

 private:
  void finish(const grpc::Status& s, const std::string& handle) {
    absl::MutexLock lock(&mu_);
    ++finished_;
    last_ = s;
    last_handle_ = handle;
  }

  server::MatrixServiceImpl& impl_;
  mutable absl::Mutex mu_;
  std::uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status last_ ABSL_GUARDED_BY(mu_);
  std::string last_handle_ ABSL_GUARDED_BY(mu_);
};

struct FuzzServer::Parts {
  server::Runtime runtime;
  server::Metrics metrics{server::BuildInfo{"fuzz", "fuzz", "none", "cpu"}};
  server::Authenticator auth;
  std::unique_ptr<server::MatrixServiceImpl> service;
  std::unique_ptr<StreamForwarder> forwarder;
  std::unique_ptr<grpc::Server> server;

  Parts(std::unique_ptr<server::Backend> backend, server::Authenticator a)
      : runtime(std::move(backend), server::TunedChoice{}, absl::Hours(1)), auth(std::move(a)) {}
};

FuzzServer::FuzzServer() {
  // Tiny limits: every matrix is at most 64 x 64 and 16 KiB, so OpenBLAS work is trivial, and each
  // limit can be reached: a message (12 KiB) is smaller than the largest matrix (16 KiB, then only
  // the streams carry it), two owners' quotas (40 KiB each) exceed the pool's budget (64 KiB).
  limits_.max_message_bytes = 12 << 10;
  limits_.max_dimension = 64;
  limits_.max_matrix_bytes = 16 << 10;
  limits_.max_resident_bytes_per_owner = 40 << 10;
  // Shared memory: four regions and 96 KiB of them per owner, 160 KiB in all, so that each cap
  // can be reached with the session's 64 KiB objects.
  limits_.max_shm_regions_per_owner = 4;
  limits_.max_shared_memory_bytes_per_owner = 96 << 10;
  limits_.max_shared_memory_bytes = 160 << 10;

  server::CpuBackendOptions options;
  options.concurrency = 1;
  options.memory_budget_bytes = 64 << 10;
  options.max_queue = 4;
  absl::StatusOr<server::Authenticator> auth = server::Authenticator::parse(kTokenLines);
  if (!auth.ok()) die("cannot parse the fuzz tokens");
  parts_ = std::make_unique<Parts>(std::make_unique<server::CpuBackend>(options), *std::move(auth));
  runtime_ = &parts_->runtime;
  runtime_->shared_memory().set_max_regions_per_owner(limits_.max_shm_regions_per_owner);
  runtime_->shared_memory().set_max_bytes(limits_.max_shared_memory_bytes_per_owner,
                                          limits_.max_shared_memory_bytes);
  parts_->service = std::make_unique<server::MatrixServiceImpl>(parts_->runtime, parts_->metrics,
                                                                limits_, parts_->auth);

  grpc::ServerBuilder builder;
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  builder.SetMaxReceiveMessageSize(static_cast<int>(limits_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(limits_.max_message_bytes));
  parts_->forwarder = std::make_unique<StreamForwarder>(*parts_->service);
  builder.RegisterService(parts_->forwarder.get());
  parts_->server = builder.BuildAndStart();
  if (parts_->server == nullptr) die("the in-process gRPC server did not start");
  stub_ = v1::MatrixService::NewStub(parts_->server->InProcessChannel(grpc::ChannelArguments()));
}

FuzzServer& FuzzServer::get() {
  // Never destroyed: the process ends with the fuzzer, and gRPC's threads may still run then.
  static FuzzServer* const server = new FuzzServer();
  return *server;
}

server::MatrixServiceImpl& FuzzServer::service() {
  return *parts_->service;
}

double FuzzServer::in_flight() const {
  return parts_->metrics.in_flight_count();
}

std::unique_ptr<grpc::ClientContext> FuzzServer::context(Caller c) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (const char* token = kTokens[static_cast<int>(c)]; token != nullptr) {
    ctx->AddMetadata("authorization", std::string("Bearer ") + token);
  }
  return ctx;
}

grpc::Status FuzzServer::upload_stream(Caller c, const std::vector<v1::UploadChunk>& chunks,
                                       v1::UploadReply* reply, bool over_grpc,
                                       std::string* orphan) {
  const auto limit = static_cast<std::size_t>(limits_.max_message_bytes);
  for (const v1::UploadChunk& chunk : chunks) over_grpc = over_grpc || chunk.ByteSizeLong() > limit;
  if (!over_grpc) {
    ChunkReader reader(chunks);
    const std::unique_ptr<ServerCall> call = server_call(c);
    return service().upload_stream(&call->context, &reader, reply);
  }
  const std::uint64_t before = parts_->forwarder->finished();
  const std::unique_ptr<grpc::ClientContext> ctx = context(c);
  std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer =
      stub_->UploadStream(ctx.get(), reply);
  for (const v1::UploadChunk& chunk : chunks) {
    if (!writer->Write(chunk)) break;  // the server already answered
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  grpc::Status handler;
  std::string handle;
  if (!parts_->forwarder->wait(before + 1, &handler, &handle)) {
    die("an UploadStream handler did not return within 10 s");
  }
  if (!s.ok() && handler.ok()) *orphan = handle;
  return s;
}

grpc::Status FuzzServer::download_stream(Caller c, const v1::DownloadRequest& request,
                                         std::vector<v1::DownloadChunk>* chunks, bool over_grpc) {
  if (!over_grpc) {
    ChunkWriter writer(chunks);
    const std::unique_ptr<ServerCall> call = server_call(c);
    return service().download_stream(&call->context, &request, &writer);
  }
  const std::uint64_t before = parts_->forwarder->finished();
  const std::unique_ptr<grpc::ClientContext> ctx = context(c);
  std::unique_ptr<grpc::ClientReader<v1::DownloadChunk>> reader =
      stub_->DownloadStream(ctx.get(), request);
  for (v1::DownloadChunk chunk; reader->Read(&chunk);) chunks->push_back(std::move(chunk));
  const grpc::Status s = reader->Finish();
  grpc::Status handler;
  std::string handle;
  if (!parts_->forwarder->wait(before + 1, &handler, &handle)) {
    die("a DownloadStream handler did not return within 10 s");
  }
  return s;
}

std::unique_ptr<ServerCall> FuzzServer::server_call(Caller c) const {
  auto call = std::make_unique<ServerCall>();
  if (const char* token = kTokens[static_cast<int>(c)]; token != nullptr) {
    call->spouse.AddClientMetadata("authorization", std::string("Bearer ") + token);
  }
  return call;
}

}  // namespace matserve::fuzz
