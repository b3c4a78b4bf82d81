// Client: channel setup (message limits, load balancing, credentials) and one synchronous call per
// RPC, each with the configured deadline, each returning absl::StatusOr.
#include "client/cpp/client.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/replica_router.h"
#include "client/cpp/shm_nonce.h"
#include "client/cpp/striped_transfer.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/sync_stream.h"

namespace matserve::client {

absl::Status from_grpc_status(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::string status_code_name(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);  // empty for a code Abseil does not know
  return name.empty() ? absl::StrCat("CODE_", static_cast<int>(code)) : name;
}

absl::StatusOr<std::unique_ptr<Client>> Client::connect(const std::string& target,
                                                        ClientOptions options) {
  if (target.empty()) return absl::InvalidArgumentError("empty target");
  if (options.max_message_bytes <= 0 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes ", options.max_message_bytes, " is outside 1 .. 2^31-1"));
  }
  absl::StatusOr<std::optional<std::vector<std::string>>> addresses = replica_addresses(target);
  if (!addresses.ok()) return addresses.status();
  const bool routed = addresses->has_value();
  grpc::ChannelArguments args;
  const int limit = static_cast<int>(options.max_message_bytes);
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  if (!routed && absl::StartsWith(target, "dns:") && !options.dns_load_balancing_policy.empty()) {
    args.SetLoadBalancingPolicyName(options.dns_load_balancing_policy);
  }
  if (routed && absl::StartsWith(target, "dns:///")) {
    // Each channel goes to one resolved address; the name stays the authority and TLS name.
    const std::string name = target.substr(7);
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, name);
    if (options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(name.substr(0, name.rfind(':')));
    }
  }
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  for (const auto& [name, value] : options.channel_args) args.SetInt(name, value);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>> channels;
  for (const std::string& address : routed ? **addresses : std::vector<std::string>{target}) {
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, credentials, args);
    if (channel == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to '", address, "'"));
    }
    if (options.connect_timeout.count() > 0 &&
        !channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout)) {
      return absl::UnavailableError(absl::StrCat("cannot connect to '", address, "' within ",
                                                 options.connect_timeout.count(), " ms"));
    }
    channels.emplace_back(address, std::move(channel));
  }
  // The stripes: channels like the main one (credentials, token, limits), each with a channel id
  // of its own and its own subchannel pool, so that each opens a TCP connection of its own.
  // Striping needs one replica: its temporaries must all land on the replica that computes.
  if (options.stripes < 0 || options.stripe_chunk_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("stripes ", options.stripes,
                                                   " must be 0 or more and stripe_chunk_bytes ",
                                                   options.stripe_chunk_bytes, " positive"));
  }
  if (routed) options.stripes = 0;
  std::vector<std::shared_ptr<grpc::Channel>> stripe_channels =
      StripedTransfer::open_channels(target, credentials, args, options.stripes);
  return std::make_unique<Client>(Key(), target, std::move(options), std::move(channels), routed,
                                  std::move(stripe_channels));
}

Client::Client(Key, std::string target, ClientOptions options,
               std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>> channels,
               bool routed, std::vector<std::shared_ptr<grpc::Channel>> stripe_channels)
    : target_(std::move(target)), options_(std::move(options)) {
  std::vector<ReplicaRouter::Replica> replicas;
  for (auto& entry : channels) {
    ReplicaRouter::Replica r;
    r.address = std::move(entry.first);
    r.stub = v1::MatrixService::NewStub(entry.second);
    r.health = ::grpc::health::v1::Health::NewStub(entry.second);
    r.channel = std::move(entry.second);
    replicas.push_back(std::move(r));
  }
  router_ = std::make_unique<ReplicaRouter>(
      target_, std::move(replicas), [this](grpc::ClientContext& c) { prepare_context(c); }, routed);
  if (stripe_channels.empty()) return;
  // A range leaves room in its message for the request's other fields.
  constexpr std::int64_t kHeadroom = std::int64_t{1} << 20;
  const std::int64_t chunk = std::max<std::int64_t>(
      1, std::min(options_.stripe_chunk_bytes, options_.max_message_bytes - kHeadroom));
  striped_ = std::make_unique<StripedTransfer>(
      std::move(stripe_channels), [this](grpc::ClientContext& c) { prepare_context(c); }, chunk);
}

Client::~Client() = default;

void Client::prepare_context(grpc::ClientContext& context) const {
  if (options_.deadline.count() > 0) {
    context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  }
  if (!options_.bearer_token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.bearer_token));
  }
}

absl::Status Client::run_routed(const Route& route, const RoutedCall& call) {
  return router_->run(route, [&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
    return call(*r.stub, context);
  });
}

absl::StatusOr<v1::MultiplyReply> Client::multiply(const v1::MultiplyRequest& request) {
  if (request.output_shm().region().empty() &&
      stripes_call({inline_bytes(request.has_a(), request.a()),
                    inline_bytes(request.has_b(), request.b()),
                    inline_bytes(request.has_c(), request.c())})) {
    absl::StatusOr<std::optional<v1::MultiplyReply>> r = multiply_striped(request);
    if (!r.ok()) return r.status();
    if (r->has_value()) return **std::move(r);
  }
  return unary(&v1::MatrixService::StubInterface::Multiply,
               &v1::MatrixService::StubInterface::PrepareAsyncMultiply, request, route_of(request));
}

absl::StatusOr<v1::MultiplyBatchedReply> Client::multiply_batched(
    const v1::MultiplyBatchedRequest& request) {
  if (request.output_shm().region().empty() &&
      stripes_call({inline_bytes(request.has_a(), request.a()),
                    inline_bytes(request.has_b(), request.b()),
                    inline_bytes(request.has_c(), request.c())})) {
    absl::StatusOr<std::optional<v1::MultiplyBatchedReply>> r = multiply_batched_striped(request);
    if (!r.ok()) return r.status();
    if (r->has_value()) return **std::move(r);
  }
  return unary(&v1::MatrixService::StubInterface::MultiplyBatched,
               &v1::MatrixService::StubInterface::PrepareAsyncMultiplyBatched, request,
               route_of(request));
}

absl::StatusOr<v1::TransposeReply> Client::transpose(const v1::TransposeRequest& request) {
  if (request.output_shm().region().empty() && !request.in_place() &&
      stripes_call({inline_bytes(request.has_a(), request.a())})) {
    absl::StatusOr<std::optional<v1::TransposeReply>> r = transpose_striped(request);
    if (!r.ok()) return r.status();
    if (r->has_value()) return **std::move(r);
  }
  return unary(&v1::MatrixService::StubInterface::Transpose,
               &v1::MatrixService::StubInterface::PrepareAsyncTranspose, request,
               route_of(request));
}

absl::StatusOr<v1::ListKernelsReply> Client::list_kernels() {
  const v1::ListKernelsRequest request;
  return unary(&v1::MatrixService::StubInterface::ListKernels,
               &v1::MatrixService::StubInterface::PrepareAsyncListKernels, request, {});
}

absl::StatusOr<std::string> Client::health(const std::string& service) {
  namespace health = ::grpc::health::v1;
  health::HealthCheckRequest request;
  request.set_service(service);
  health::HealthCheckResponse reply;
  if (absl::Status s = router_->run(
          {},
          [&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
            return call_unary(
                options_.poll_replies, [&] { return r.health->Check(&context, request, &reply); },
                [&](grpc::CompletionQueue* cq) {
                  return r.health->PrepareAsyncCheck(&context, request, cq);
                },
                &reply);
          });
      !s.ok()) {
    return s;
  }
  return health::HealthCheckResponse::ServingStatus_Name(reply.status());
}

absl::StatusOr<v1::GetServerInfoReply> Client::get_server_info() {
  const v1::GetServerInfoRequest request;
  return unary(&v1::MatrixService::StubInterface::GetServerInfo,
               &v1::MatrixService::StubInterface::PrepareAsyncGetServerInfo, request, {});
}

absl::StatusOr<v1::ResidentInfo> Client::upload(const v1::Matrix& matrix, std::int64_t chunk_bytes,
                                                const std::string& colocate_with) {
  constexpr std::int64_t kHeadroom = std::int64_t{1} << 20;  // header fields, framing
  const auto size = static_cast<std::int64_t>(matrix.data().size());
  if (chunk_bytes <= 0 && size + kHeadroom <= options_.max_message_bytes) {
    v1::UploadRequest request;
    *request.mutable_matrix() = matrix;
    request.set_colocate_with(colocate_with);
    absl::StatusOr<v1::UploadReply> reply = unary(
        &v1::MatrixService::StubInterface::Upload,
        &v1::MatrixService::StubInterface::PrepareAsyncUpload, request, {.handle = colocate_with});
    if (!reply.ok()) return reply.status();
    return std::move(*reply->mutable_resident());
  }
  if (chunk_bytes <= 0)
    chunk_bytes =
        std::min<std::int64_t>(std::int64_t{4} << 20, options_.max_message_bytes - kHeadroom);
  return upload_stream(matrix, chunk_bytes, colocate_with);
}

absl::StatusOr<v1::ResidentInfo> Client::upload_stream(const v1::Matrix& matrix,
                                                       std::int64_t chunk_bytes,
                                                       const std::string& colocate_with) {
  if (chunk_bytes <= 0 || chunk_bytes > options_.max_message_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes ", chunk_bytes, " is outside 1 .. max_message_bytes"));
  }
  v1::UploadReply reply;
  const auto call = [&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
    std::unique_ptr<grpc::ClientWriterInterface<v1::UploadChunk>> writer =
        r.stub->UploadStream(&context, &reply);
    const std::string& data = matrix.data();
    // First chunk: the header (no data) plus the first bytes; then the rest in order.
    std::size_t offset = 0;
    bool first = true;
    bool open = true;
    while (open && (first || offset < data.size())) {
      v1::UploadChunk chunk;
      if (first) {
        v1::Matrix* header = chunk.mutable_header();
        header->set_rows(matrix.rows());
        header->set_cols(matrix.cols());
        header->set_dtype(matrix.dtype());
        header->set_layout(matrix.layout());
        chunk.set_colocate_with(colocate_with);
        first = false;
      }
      const std::size_t n =
          std::min<std::size_t>(static_cast<std::size_t>(chunk_bytes), data.size() - offset);
      chunk.set_data(data.substr(offset, n));
      offset += n;
      open = writer->Write(chunk);  // false: the server ended the call; Finish says why
    }
    writer->WritesDone();
    return writer->Finish();
  };
  if (absl::Status s = router_->run({.handle = colocate_with}, call); !s.ok()) return s;
  return reply.resident();
}

absl::StatusOr<v1::Matrix> Client::download(const std::string& handle) {
  v1::DownloadRequest request;
  request.set_handle(handle);
  absl::StatusOr<v1::DownloadReply> reply =
      unary(&v1::MatrixService::StubInterface::Download,
            &v1::MatrixService::StubInterface::PrepareAsyncDownload, request, {.handle = handle});
  if (!reply.ok()) return reply.status();
  return std::move(*reply->mutable_matrix());
}

absl::StatusOr<v1::Matrix> Client::download_stream(const std::string& handle,
                                                   std::int64_t chunk_bytes) {
  v1::DownloadRequest request;
  request.set_handle(handle);
  request.set_chunk_bytes(chunk_bytes);
  v1::Matrix out;
  bool have_header = false;
  const auto call = [&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
    std::unique_ptr<grpc::ClientReaderInterface<v1::DownloadChunk>> reader =
        r.stub->DownloadStream(&context, request);
    v1::DownloadChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.has_header()) {
        const std::string first = std::move(*out.mutable_data());
        out = chunk.header();
        out.clear_data();
        out.mutable_data()->append(first);
        have_header = true;
      }
      out.mutable_data()->append(chunk.data());
    }
    return reader->Finish();
  };
  if (absl::Status s = router_->run({.handle = handle}, call); !s.ok()) return s;
  if (!have_header) return absl::DataLossError("DownloadStream sent no header");
  return out;
}

absl::StatusOr<v1::ReleaseReply> Client::release(const std::string& handle) {
  v1::ReleaseRequest request;
  request.set_handle(handle);
  return unary(&v1::MatrixService::StubInterface::Release,
               &v1::MatrixService::StubInterface::PrepareAsyncRelease, request, {.handle = handle});
}

absl::StatusOr<v1::ReleaseReply> Client::release(const std::vector<std::string>& handles) {
  // One call per replica holding some of them, in the order of their first handle.
  std::vector<std::pair<std::string, v1::ReleaseRequest>> groups;  // (first handle, request)
  for (const std::string& h : handles) {
    std::string key;
    if (router_->routed()) {
      absl::StatusOr<ReplicaRouter::Replica*> r = router_->for_handle(h);
      if (!r.ok()) return r.status();
      key = (*r)->address;
    }
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), {key, v1::ReleaseRequest()});
    it->second.add_handles(h);
  }
  v1::ReleaseReply total;
  for (const auto& [key, request] : groups) {
    absl::StatusOr<v1::ReleaseReply> reply =
        unary(&v1::MatrixService::StubInterface::Release,
              &v1::MatrixService::StubInterface::PrepareAsyncRelease, request,
              {.handle = router_->routed() ? request.handles(0) : std::string()});
    if (!reply.ok()) return reply.status();
    total.set_bytes_freed(total.bytes_freed() + reply->bytes_freed());
  }
  return total;
}

absl::StatusOr<v1::ListResidentReply> Client::list_resident() {
  v1::ListResidentReply all;  // every replica's, one after another
  const v1::ListResidentRequest request;
  if (absl::Status s = router_->each([&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
        v1::ListResidentReply reply;
        grpc::Status status = call_unary(
            options_.poll_replies, [&] { return r.stub->ListResident(&context, request, &reply); },
            [&](grpc::CompletionQueue* cq) {
              return r.stub->PrepareAsyncListResident(&context, request, cq);
            },
            &reply);
        all.MergeFrom(reply);
        return status;
      });
      !s.ok()) {
    return s;
  }
  return all;
}

absl::StatusOr<v1::SharedMemoryRegion> Client::register_shared_memory(const std::string& name,
                                                                      const std::string& key,
                                                                      std::int64_t byte_size,
                                                                      std::int64_t offset) {
  v1::RegisterSharedMemoryRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_byte_size(byte_size);
  request.set_offset(offset);
  // The server asks for proof of possession: its nonce written into the range's first bytes
  // (restored when `written` goes). The registrations of this process take turns; a few tries:
  // another process registering the same object at once may use up the nonce first.
  absl::MutexLock lock(&registration_mutex());
  std::optional<WrittenNonce> written;
  ReplicaRouter::Replica* const target_replica = router_->pick();
  for (int attempt = 1;; ++attempt) {
    // A try of each registration goes to one replica, the same for every try (its nonce), and
    // calls naming the region go there afterwards.
    grpc::ClientContext context;
    prepare_context(context);
    v1::RegisterSharedMemoryReply reply;
    const grpc::Status status =
        target_replica->stub->RegisterSharedMemory(&context, request, &reply);
    if (status.ok()) {
      router_->set_region(name, target_replica);
      return reply.region();
    }
    std::string nonce;
    for (const auto& [k, v] : context.GetServerTrailingMetadata()) {
      if (k == kShmNonceMetadataKey) nonce.assign(v.data(), v.size());
    }
    if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION || nonce.empty() ||
        attempt == 3) {
      return from_grpc_status(status);
    }
    written.reset();  // the bytes of an earlier try go back before the next write
    absl::StatusOr<WrittenNonce> w = WrittenNonce::write(key, offset, nonce);
    if (!w.ok()) return w.status();
    written.emplace(*std::move(w));
  }
}

absl::StatusOr<v1::SharedMemoryRegion> Client::register_cuda_memory(
    const v1::RegisterCudaMemoryRequest& request) {
  v1::RegisterSharedMemoryReply reply;
  ReplicaRouter::Replica* used = nullptr;
  if (absl::Status s = router_->run(
          {},
          [&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
            return r.stub->RegisterCudaMemory(&context, request, &reply);
          },
          &used);
      !s.ok()) {
    return s;
  }
  router_->set_region(request.name(), used);
  return reply.region();
}

absl::StatusOr<int> Client::unregister_shared_memory(const std::string& name) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  int unregistered = 0;
  const auto call = [&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
    v1::UnregisterSharedMemoryReply reply;
    grpc::Status status = r.stub->UnregisterSharedMemory(&context, request, &reply);
    unregistered += reply.unregistered();
    return status;
  };
  // "" drops every region of the caller: on every replica.
  absl::Status s = name.empty() && router_->routed() ? router_->each(call)
                                                     : router_->run({.region = name}, call);
  if (!s.ok()) return s;
  router_->set_region(name, nullptr);
  return unregistered;
}

absl::StatusOr<v1::ListSharedMemoryReply> Client::list_shared_memory() {
  v1::ListSharedMemoryReply all;  // every replica's, one after another
  if (absl::Status s = router_->each([&](ReplicaRouter::Replica& r, grpc::ClientContext& context) {
        v1::ListSharedMemoryReply reply;
        grpc::Status status =
            r.stub->ListSharedMemory(&context, v1::ListSharedMemoryRequest(), &reply);
        all.MergeFrom(reply);
        return status;
      });
      !s.ok()) {
    return s;
  }
  return all;
}

}  // namespace matserve::client
