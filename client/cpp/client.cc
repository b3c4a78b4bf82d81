// Client: channel setup (message limits, load balancing, credentials) and one synchronous call per
// RPC, each with the configured deadline, each returning absl::StatusOr.
#include "client/cpp/client.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
  grpc::ChannelArguments args;
  const int limit = static_cast<int>(options.max_message_bytes);
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  if (absl::StartsWith(target, "dns:") && !options.dns_load_balancing_policy.empty()) {
    args.SetLoadBalancingPolicyName(options.dns_load_balancing_policy);
  }
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  for (const auto& [name, value] : options.channel_args) args.SetInt(name, value);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, credentials, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to '", target, "'"));
  }
  if (options.connect_timeout.count() > 0 &&
      !channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout)) {
    return absl::UnavailableError(absl::StrCat("cannot connect to '", target, "' within ",
                                               options.connect_timeout.count(), " ms"));
  }
  // The stripes: channels like the main one (credentials, token, limits), each with a channel id
  // of its own and its own subchannel pool, so that each opens a TCP connection of its own.
  std::vector<std::shared_ptr<grpc::Channel>> stripe_channels;
  if (options.stripes < 0 || options.stripe_chunk_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("stripes ", options.stripes,
                                                   " must be 0 or more and stripe_chunk_bytes ",
                                                   options.stripe_chunk_bytes, " positive"));
  }
  for (int i = 0; i < options.stripes; ++i) {
    grpc::ChannelArguments stripe_args = args;
    stripe_args.SetInt("grpc.channel_id", i + 1);
    stripe_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stripe_channels.push_back(grpc::CreateCustomChannel(target, credentials, stripe_args));
  }
  return std::make_unique<Client>(Key(), target, std::move(options), std::move(channel),
                                  std::move(stripe_channels));
}

Client::Client(Key, std::string target, ClientOptions options,
               std::shared_ptr<grpc::Channel> channel,
               std::vector<std::shared_ptr<grpc::Channel>> stripe_channels)
    : target_(std::move(target)),
      options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::MatrixService::NewStub(channel_)),
      health_stub_(::grpc::health::v1::Health::NewStub(channel_)) {
  if (stripe_channels.empty()) return;
  std::vector<std::unique_ptr<v1::MatrixService::Stub>> stubs;
  for (const auto& c : stripe_channels) stubs.push_back(v1::MatrixService::NewStub(c));
  // A range leaves room in its message for the request's other fields.
  constexpr std::int64_t kHeadroom = std::int64_t{1} << 20;
  const std::int64_t chunk = std::max<std::int64_t>(
      1, std::min(options_.stripe_chunk_bytes, options_.max_message_bytes - kHeadroom));
  striped_ = std::make_unique<StripedTransfer>(
      std::move(stubs), [this](grpc::ClientContext& c) { prepare_context(c); }, chunk);
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

absl::StatusOr<v1::MultiplyReply> Client::multiply(const v1::MultiplyRequest& request) {
  if (request.output_shm().region().empty() &&
      stripes_call({inline_bytes(request.has_a(), request.a()),
                    inline_bytes(request.has_b(), request.b()),
                    inline_bytes(request.has_c(), request.c())})) {
    absl::StatusOr<std::optional<v1::MultiplyReply>> r = multiply_striped(request);
    if (!r.ok()) return r.status();
    if (r->has_value()) return **std::move(r);
  }
  grpc::ClientContext context;
  prepare_context(context);
  v1::MultiplyReply reply;
  if (absl::Status s = from_grpc_status(stub_->Multiply(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::MultiplyBatchedReply> Client::multiply_batched(
    const v1::MultiplyBatchedRequest& request) {
  // Each inline operand's stacked matrices become one resident matrix each: worth it only when
  // they are large.
  bool large_matrices = true;
  for (const v1::Matrix* m : {&request.a(), &request.b(), &request.c()}) {
    const std::int64_t n = std::max<std::int64_t>(m->batch(), 1);
    if (!m->data().empty() && static_cast<std::int64_t>(m->data().size()) / n <
                                  ClientOptions::kMinStripedBatchMatrixBytes)
      large_matrices = false;
  }
  if (request.output_shm().region().empty() && large_matrices &&
      stripes_call({inline_bytes(request.has_a(), request.a()),
                    inline_bytes(request.has_b(), request.b()),
                    inline_bytes(request.has_c(), request.c())})) {
    absl::StatusOr<std::optional<v1::MultiplyBatchedReply>> r = multiply_batched_striped(request);
    if (!r.ok()) return r.status();
    if (r->has_value()) return **std::move(r);
  }
  grpc::ClientContext context;
  prepare_context(context);
  v1::MultiplyBatchedReply reply;
  if (absl::Status s = from_grpc_status(stub_->MultiplyBatched(&context, request, &reply));
      !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::TransposeReply> Client::transpose(const v1::TransposeRequest& request) {
  if (request.output_shm().region().empty() && !request.in_place() &&
      stripes_call({inline_bytes(request.has_a(), request.a())})) {
    absl::StatusOr<std::optional<v1::TransposeReply>> r = transpose_striped(request);
    if (!r.ok()) return r.status();
    if (r->has_value()) return **std::move(r);
  }
  grpc::ClientContext context;
  prepare_context(context);
  v1::TransposeReply reply;
  if (absl::Status s = from_grpc_status(stub_->Transpose(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::ListKernelsReply> Client::list_kernels() {
  grpc::ClientContext context;
  prepare_context(context);
  v1::ListKernelsReply reply;
  const v1::ListKernelsRequest request;
  if (absl::Status s = from_grpc_status(stub_->ListKernels(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<std::string> Client::health(const std::string& service) {
  namespace health = ::grpc::health::v1;
  grpc::ClientContext context;
  prepare_context(context);
  health::HealthCheckRequest request;
  request.set_service(service);
  health::HealthCheckResponse reply;
  if (absl::Status s = from_grpc_status(health_stub_->Check(&context, request, &reply)); !s.ok())
    return s;
  return health::HealthCheckResponse::ServingStatus_Name(reply.status());
}

absl::StatusOr<v1::GetServerInfoReply> Client::get_server_info() {
  grpc::ClientContext context;
  prepare_context(context);
  v1::GetServerInfoReply reply;
  const v1::GetServerInfoRequest request;
  if (absl::Status s = from_grpc_status(stub_->GetServerInfo(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::ResidentInfo> Client::upload(const v1::Matrix& matrix, std::int64_t chunk_bytes,
                                                const std::string& colocate_with) {
  constexpr std::int64_t kHeadroom = std::int64_t{1} << 20;  // header fields, framing
  const auto size = static_cast<std::int64_t>(matrix.data().size());
  if (chunk_bytes <= 0 && size + kHeadroom <= options_.max_message_bytes) {
    grpc::ClientContext context;
    prepare_context(context);
    v1::UploadRequest request;
    *request.mutable_matrix() = matrix;
    request.set_colocate_with(colocate_with);
    v1::UploadReply reply;
    if (absl::Status s = from_grpc_status(stub_->Upload(&context, request, &reply)); !s.ok()) {
      return s;
    }
    return reply.resident();
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
  grpc::ClientContext context;
  prepare_context(context);
  v1::UploadReply reply;
  std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer =
      stub_->UploadStream(&context, &reply);
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
  if (absl::Status s = from_grpc_status(writer->Finish()); !s.ok()) return s;
  return reply.resident();
}

absl::StatusOr<v1::Matrix> Client::download(const std::string& handle) {
  grpc::ClientContext context;
  prepare_context(context);
  v1::DownloadRequest request;
  request.set_handle(handle);
  v1::DownloadReply reply;
  if (absl::Status s = from_grpc_status(stub_->Download(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return std::move(*reply.mutable_matrix());
}

absl::StatusOr<v1::Matrix> Client::download_stream(const std::string& handle,
                                                   std::int64_t chunk_bytes) {
  grpc::ClientContext context;
  prepare_context(context);
  v1::DownloadRequest request;
  request.set_handle(handle);
  request.set_chunk_bytes(chunk_bytes);
  std::unique_ptr<grpc::ClientReader<v1::DownloadChunk>> reader =
      stub_->DownloadStream(&context, request);
  v1::Matrix out;
  bool have_header = false;
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
  if (absl::Status s = from_grpc_status(reader->Finish()); !s.ok()) return s;
  if (!have_header) return absl::DataLossError("DownloadStream sent no header");
  return out;
}

absl::StatusOr<v1::ReleaseReply> Client::release(const std::string& handle) {
  grpc::ClientContext context;
  prepare_context(context);
  v1::ReleaseRequest request;
  request.set_handle(handle);
  v1::ReleaseReply reply;
  if (absl::Status s = from_grpc_status(stub_->Release(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::ReleaseReply> Client::release(const std::vector<std::string>& handles) {
  grpc::ClientContext context;
  prepare_context(context);
  v1::ReleaseRequest request;
  for (const std::string& h : handles) request.add_handles(h);
  v1::ReleaseReply reply;
  if (absl::Status s = from_grpc_status(stub_->Release(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
}

absl::StatusOr<v1::ListResidentReply> Client::list_resident() {
  grpc::ClientContext context;
  prepare_context(context);
  v1::ListResidentReply reply;
  const v1::ListResidentRequest request;
  if (absl::Status s = from_grpc_status(stub_->ListResident(&context, request, &reply)); !s.ok()) {
    return s;
  }
  return reply;
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
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    prepare_context(context);
    v1::RegisterSharedMemoryReply reply;
    const grpc::Status status = stub_->RegisterSharedMemory(&context, request, &reply);
    if (status.ok()) return reply.region();
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
  grpc::ClientContext context;
  prepare_context(context);
  v1::RegisterSharedMemoryReply reply;
  if (absl::Status s = from_grpc_status(stub_->RegisterCudaMemory(&context, request, &reply));
      !s.ok()) {
    return s;
  }
  return reply.region();
}

absl::StatusOr<int> Client::unregister_shared_memory(const std::string& name) {
  grpc::ClientContext context;
  prepare_context(context);
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  v1::UnregisterSharedMemoryReply reply;
  if (absl::Status s = from_grpc_status(stub_->UnregisterSharedMemory(&context, request, &reply));
      !s.ok()) {
    return s;
  }
  return reply.unregistered();
}

absl::StatusOr<v1::ListSharedMemoryReply> Client::list_shared_memory() {
  grpc::ClientContext context;
  prepare_context(context);
  v1::ListSharedMemoryReply reply;
  if (absl::Status s = from_grpc_status(
          stub_->ListSharedMemory(&context, v1::ListSharedMemoryRequest(), &reply));
      !s.ok()) {
    return s;
  }
  return reply;
}

}  // namespace matserve::client
