// FakeMatrixService: results from kernels/cpu/reference.h (exact float64, rounded to the output
// dtype once), fixed timings, fixed server info and kernel list.
#include "tests/client/fake_service.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/matrix.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/reference.h"
#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"

namespace matserve::client::testing {
namespace {

namespace v1 = ::matserve::v1;

grpc::Status invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

void fill_timing(v1::Timing* t) {
  t->set_queue_us(1.5);
  t->set_host_to_device_us(20.25);
  t->set_kernel_us(100.0);
  t->set_device_to_host_us(30.0);
  t->set_total_us(160.0);
}

// Checks the variant name; "" and "auto" pick `fallback`.
grpc::Status pick_variant(const std::string& asked, const std::string& fallback, std::string* out) {
  if (asked.empty() || asked == "auto") {
    *out = fallback;
  } else if (asked == fallback || asked == "broken") {
    *out = asked;
  } else {
    return invalid(absl::StrCat("unknown variant '", asked, "'"));
  }
  return grpc::Status::OK;
}

// Product i's operand of a batch: `handle` from the handle list (one handle: every product's), or
// `matrix` cut from the inline stack (one matrix: every product's); neither when the batch has no
// such operand.
grpc::Status product_operand(const std::string& field, bool has_inline, const v1::Matrix& stack,
                             const google::protobuf::RepeatedPtrField<std::string>& handles,
                             std::int64_t i, std::int64_t count, std::optional<v1::Matrix>& matrix,
                             std::string& handle) {
  if (!handles.empty()) {
    if (handles.size() != 1 && handles.size() != count) {
      return invalid(
          absl::StrCat(field, "_handles: ", handles.size(), " handles, expected 1 or ", count));
    }
    handle = handles[handles.size() == 1 ? 0 : static_cast<int>(i)];
    return grpc::Status::OK;
  }
  if (!has_inline) return grpc::Status::OK;
  const std::int64_t stacked = std::max<std::int64_t>(stack.batch(), 1);
  if (stacked != 1 && stacked != count) {
    return invalid(absl::StrCat(field, ".batch: ", stacked, " matrices, expected 1 or ", count));
  }
  const std::size_t one = stack.data().size() / static_cast<std::size_t>(stacked);
  matrix.emplace();
  matrix->set_rows(stack.rows());
  matrix->set_cols(stack.cols());
  matrix->set_dtype(stack.dtype());
  matrix->set_layout(stack.layout());
  matrix->set_data(stack.data().substr(static_cast<std::size_t>(stacked == 1 ? 0 : i) * one, one));
  return grpc::Status::OK;
}

}  // namespace

v1::ResidentInfo FakeMatrixService::keep(v1::Matrix m, std::string handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (handle.empty()) {
    handle = absl::StrCat(replica_id_.empty() ? "" : replica_id_ + "/", "h", next_handle_++);
  }
  v1::ResidentInfo info;
  info.set_handle(handle);
  info.set_rows(m.rows());
  info.set_cols(m.cols());
  info.set_dtype(m.dtype());
  info.set_layout(m.layout());
  info.set_bytes(static_cast<std::int64_t>(m.data().size()));
  info.set_device("cpu");
  info.set_idle_expires_in_ms(60000);
  resident_[handle] = std::move(m);
  return info;
}

grpc::Status FakeMatrixService::resolve(const std::string& handle, v1::Matrix* m) const {
  if (handle.empty()) return grpc::Status::OK;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = resident_.find(handle);
  if (it == resident_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no resident matrix '", handle, "'"));
  }
  *m = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::resolve_handles(v1::MultiplyRequest& request) const {
  for (auto [handle, m] : {std::pair{request.mutable_a_handle(), request.mutable_a()},
                           std::pair{request.mutable_b_handle(), request.mutable_b()}}) {
    if (grpc::Status s = resolve(*handle, m); !s.ok()) return s;
    handle->clear();
  }
  if (!request.c_handle().empty()) {
    if (grpc::Status s = resolve(request.c_handle(), request.mutable_c()); !s.ok()) return s;
    request.clear_c_handle();
  }
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::Multiply(grpc::ServerContext*, const v1::MultiplyRequest* given,
                                         v1::MultiplyReply* reply) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_multiply_ = *given;
    ++multiply_calls_;
  }
  v1::MultiplyRequest resolved = *given;
  if (grpc::Status s = resolve_handles(resolved); !s.ok()) return s;
  if (grpc::Status s = Compute(resolved, reply); !s.ok()) return s;
  // As from a server with dynamic batching: the launch computed this request and another.
  reply->mutable_timing()->set_batch_wait_us(0.75);
  reply->mutable_timing()->set_merged_requests(2);
  release_named(given->release_handles());
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::MultiplyBatched(grpc::ServerContext*,
                                                const v1::MultiplyBatchedRequest* request,
                                                v1::MultiplyBatchedReply* reply) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_multiply_batched_ = *request;
    ++multiply_batched_calls_;
  }
  const std::int64_t count = request->batch();
  if (count < 1) return invalid(absl::StrCat("batch: ", count, " products, must be >= 1"));
  // Stacked resident operands become the inline stacks they hold (batch-major, as a_stacked
  // says: row-major batch * rows x cols, column-major rows x batch * cols).
  v1::Matrix stacks[3] = {request->a(), request->b(), request->c()};
  bool has[3] = {request->has_a(), request->has_b(), request->has_c()};
  const std::string* stacked[3] = {&request->a_stacked(), &request->b_stacked(),
                                   &request->c_stacked()};
  for (int f = 0; f < 3; ++f) {
    if (stacked[f]->empty()) continue;
    if (grpc::Status s = resolve(*stacked[f], &stacks[f]); !s.ok()) return s;
    const bool col = stacks[f].layout() == v1::COL_MAJOR;
    const std::int64_t dim = col ? stacks[f].cols() : stacks[f].rows();
    if (dim % count != 0) return invalid("a stacked operand's matrix is not batch matrices");
    if (col) {
      stacks[f].set_cols(dim / count);
    } else {
      stacks[f].set_rows(dim / count);
    }
    stacks[f].set_batch(count);
    has[f] = true;
  }
  std::string results;
  v1::MultiplyReply product;
  v1::Verification worst;
  for (std::int64_t i = 0; i < count; ++i) {
    v1::MultiplyRequest one;
    std::optional<v1::Matrix> a, b, c;
    for (auto [field, has_inline, stack, handles, matrix, handle] :
         {std::tuple{"a", has[0], &stacks[0], &request->a_handles(), &a, one.mutable_a_handle()},
          std::tuple{"b", has[1], &stacks[1], &request->b_handles(), &b, one.mutable_b_handle()},
          std::tuple{"c", has[2], &stacks[2], &request->c_handles(), &c, one.mutable_c_handle()}}) {
      if (grpc::Status s =
              product_operand(field, has_inline, *stack, *handles, i, count, *matrix, *handle);
          !s.ok()) {
        return s;
      }
    }
    if (a) *one.mutable_a() = *std::move(a);
    if (b) *one.mutable_b() = *std::move(b);
    if (c) *one.mutable_c() = *std::move(c);
    one.set_transpose_a(request->transpose_a());
    one.set_transpose_b(request->transpose_b());
    if (request->has_alpha()) one.set_alpha(request->alpha());
    if (request->has_beta()) one.set_beta(request->beta());
    one.set_variant(request->variant());
    one.set_compute(request->compute());
    one.set_output_dtype(request->output_dtype());
    one.set_output_layout(request->output_layout());
    one.set_verify(request->verify());
    one.set_keep_result(request->keep_result() && !request->keep_stacked());
    if (grpc::Status s = resolve_handles(one); !s.ok()) return s;
    product.Clear();
    if (grpc::Status s = Compute(one, &product); !s.ok()) return s;
    results.append(product.c().data());
    if (product.has_result()) *reply->add_results() = product.result();
    worst.set_max_abs_error(
        std::max(worst.max_abs_error(), product.verification().max_abs_error()));
    worst.set_rel_l2_error(std::max(worst.rel_l2_error(), product.verification().rel_l2_error()));
  }
  v1::Matrix* c = reply->mutable_c();
  c->set_rows(product.c().rows());
  c->set_cols(product.c().cols());
  c->set_dtype(product.c().dtype());
  c->set_layout(product.c().layout());
  c->set_batch(count);
  if (request->keep_stacked()) {  // one resident matrix holding every product's result
    v1::Matrix all = *c;
    all.set_batch(0);
    if (all.layout() == v1::COL_MAJOR) {
      all.set_cols(all.cols() * count);
    } else {
      all.set_rows(all.rows() * count);
    }
    all.set_data(std::move(results));
    *reply->add_results() = keep(std::move(all), "");
    results.clear();
  }
  c->set_data(std::move(results));
  reply->set_variant(product.variant());
  reply->set_device(product.device());
  reply->set_precision(product.precision());
  fill_timing(reply->mutable_timing());
  reply->mutable_timing()->set_merged_requests(1);
  reply->set_gflops(123.5);
  if (request->verify()) *reply->mutable_verification() = worst;
  release_named(request->release_handles());
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::Compute(const v1::MultiplyRequest& request,
                                        v1::MultiplyReply* reply) {
  std::string variant;
  if (grpc::Status s = pick_variant(request.variant(), "fake_gemm", &variant); !s.ok()) return s;
  const v1::Matrix& a = request.a();
  const v1::Matrix& b = request.b();
  absl::StatusOr<kernels::DType> in_type = from_proto(a.dtype());
  if (!in_type.ok() || b.dtype() != a.dtype()) return invalid("A and B need one dtype");
  const kernels::DType out_type = request.output_dtype() == v1::DATA_TYPE_UNSPECIFIED
                                      ? *in_type
                                      : *from_proto(request.output_dtype());
  kernels::GemmRequestDesc desc;
  desc.a = {a.rows(), a.cols(), from_proto(a.layout()), request.transpose_a(), a.data().data()};
  desc.b = {b.rows(), b.cols(), from_proto(b.layout()), request.transpose_b(), b.data().data()};
  desc.c_layout = from_proto(request.output_layout());
  desc.in_type = *in_type;
  desc.out_type = out_type;
  desc.alpha = request.has_alpha() ? request.alpha() : 1.0;
  desc.beta = request.has_beta() ? request.beta() : 0.0;
  const std::int64_t m = request.transpose_a() ? a.cols() : a.rows();
  const std::int64_t k = request.transpose_a() ? a.rows() : a.cols();
  const std::int64_t kb = request.transpose_b() ? b.cols() : b.rows();
  const std::int64_t n = request.transpose_b() ? b.rows() : b.cols();
  if (k != kb) return invalid(absl::StrCat("inner dimensions differ: ", k, " vs ", kb));
  const kernels::GemmProblem p = kernels::canonicalize_gemm(desc);
  std::string c0;
  if (request.has_c() && desc.beta != 0.0) {
    const v1::Matrix& c = request.c();
    const kernels::DType c_type = *from_proto(c.dtype());
    c0 = convert_elements(to_layout(c.data(), m, n, c_type, from_proto(c.layout()), desc.c_layout),
                          c_type, out_type);
  }
  const std::vector<double> ref = kernels::reference_gemm(p, c0.empty() ? nullptr : c0.data());
  std::string out(ref.size() * kernels::dtype_size(out_type), '\0');
  for (std::size_t i = 0; i < ref.size(); ++i) {
    kernels::store_element(out.data(), out_type, static_cast<std::int64_t>(i), ref[i]);
  }
  if (variant == "broken" && !ref.empty()) {
    kernels::store_element(out.data(), out_type, 0, ref[0] + 1.0);
  }
  *reply->mutable_c() = *make_matrix(m, n, out_type, desc.c_layout, std::move(out));
  reply->set_variant(variant);
  reply->set_device("cpu (fake)");
  reply->set_precision(std::string(kernels::dtype_name(*in_type)));
  fill_timing(reply->mutable_timing());
  reply->set_gflops(123.5);
  if (request.compute() == v1::COMPUTE_FP8) {  // as if quantized with these scales
    reply->mutable_fp8_scales()->set_a_scale(0.25);
    reply->mutable_fp8_scales()->set_b_scale(0.5);
  }
  if (request.verify()) reply->mutable_verification()->set_rel_l2_error(variant == "broken");
  if (request.keep_result()) {
    *reply->mutable_result() = keep(reply->c());
    reply->mutable_c()->clear_data();
  }
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::Transpose(grpc::ServerContext*, const v1::TransposeRequest* request,
                                          v1::TransposeReply* reply) {
  std::string variant;
  if (grpc::Status s = pick_variant(request->variant(), "fake_transpose", &variant); !s.ok()) {
    return s;
  }
  v1::Matrix a = request->a();
  if (grpc::Status s = resolve(request->a_handle(), &a); !s.ok()) return s;
  absl::StatusOr<kernels::DType> dtype = from_proto(a.dtype());
  if (!dtype.ok()) return invalid("no dtype");
  const kernels::TransposeProblem p = kernels::canonicalize_transpose(
      a.rows(), a.cols(), from_proto(a.layout()), *dtype, a.data().data(), nullptr,
      request->has_scale() ? request->scale() : 1.0);
  const std::vector<double> ref = kernels::reference_transpose(p);
  std::string out(ref.size() * kernels::dtype_size(*dtype), '\0');
  for (std::size_t i = 0; i < ref.size(); ++i) {
    kernels::store_element(out.data(), *dtype, static_cast<std::int64_t>(i), ref[i]);
  }
  *reply->mutable_b() =
      *make_matrix(a.cols(), a.rows(), *dtype, from_proto(a.layout()), std::move(out));
  reply->set_variant(variant);
  reply->set_device("cpu (fake)");
  fill_timing(reply->mutable_timing());
  reply->set_gb_per_s(42.0);
  if (request->verify()) reply->mutable_verification()->set_max_abs_error(0.0);
  if (request->keep_result() || request->in_place()) {
    *reply->mutable_result() =
        keep(reply->b(), request->in_place() ? request->a_handle() : std::string());
    reply->mutable_b()->clear_data();
  }
  release_named(request->release_handles());
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::Upload(grpc::ServerContext*, const v1::UploadRequest* request,
                                       v1::UploadReply* reply) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++upload_calls_;
  }
  *reply->mutable_resident() = keep(request->matrix());
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::UploadStream(grpc::ServerContext*,
                                             grpc::ServerReader<v1::UploadChunk>* reader,
                                             v1::UploadReply* reply) {
  v1::Matrix m;
  v1::UploadChunk chunk;
  int chunks = 0;
  while (reader->Read(&chunk)) {
    if (chunks++ == 0) {
      if (!chunk.has_header()) return invalid("the first chunk needs the header");
      m = chunk.header();
    }
    m.mutable_data()->append(chunk.data());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    upload_stream_chunks_ = chunks;
  }
  *reply->mutable_resident() = keep(std::move(m));
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::Download(grpc::ServerContext*, const v1::DownloadRequest* request,
                                         v1::DownloadReply* reply) {
  return resolve(request->handle().empty() ? "-" : request->handle(), reply->mutable_matrix());
}

grpc::Status FakeMatrixService::DownloadStream(grpc::ServerContext*,
                                               const v1::DownloadRequest* request,
                                               grpc::ServerWriter<v1::DownloadChunk>* writer) {
  v1::Matrix m;
  if (grpc::Status s = resolve(request->handle().empty() ? "-" : request->handle(), &m); !s.ok()) {
    return s;
  }
  const std::size_t step =
      request->chunk_bytes() > 0 ? static_cast<std::size_t>(request->chunk_bytes()) : 4u << 20;
  int chunks = 0;
  v1::DownloadChunk first;
  *first.mutable_header() = m;
  first.mutable_header()->clear_data();
  writer->Write(first);
  ++chunks;
  for (std::size_t off = 0; off < m.data().size(); off += step) {
    v1::DownloadChunk chunk;
    chunk.set_data(m.data().substr(off, step));
    writer->Write(chunk);
    ++chunks;
  }
  std::lock_guard<std::mutex> lock(mu_);
  download_stream_chunks_ = chunks;
  return grpc::Status::OK;
}

void FakeMatrixService::release_named(
    const google::protobuf::RepeatedPtrField<std::string>& handles) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& handle : handles) resident_.erase(handle);
}

grpc::Status FakeMatrixService::Release(grpc::ServerContext*, const v1::ReleaseRequest* request,
                                        v1::ReleaseReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> handles(request->handles().begin(), request->handles().end());
  if (!request->handle().empty() || handles.empty()) handles.push_back(request->handle());
  std::int64_t freed = 0;
  for (const std::string& handle : handles) {
    auto it = resident_.find(handle);
    if (it == resident_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no resident matrix '", handle, "'"));
    }
    freed += static_cast<std::int64_t>(it->second.data().size());
    resident_.erase(it);
  }
  reply->set_bytes_freed(freed);
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::CreateResident(grpc::ServerContext*,
                                               const v1::CreateResidentRequest* request,
                                               v1::UploadReply* reply) {
  std::string device = "cpu";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ranged_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no ranged transfer");
    const int n = create_resident_calls_++;
    if (!request->colocate_with().empty()) {
      auto it = devices_.find(request->colocate_with());
      if (it == devices_.end()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "colocate_with: no such handle");
      }
      device = it->second;
    } else if (!create_devices_.empty()) {
      device = create_devices_[static_cast<std::size_t>(n) % create_devices_.size()];
    }
  }
  v1::Matrix m = request->header();
  const v1::DataType t = m.dtype();
  const std::int64_t size = t == v1::FP64 ? 8 : t == v1::FP32 ? 4 : t == v1::FP8_E4M3 ? 1 : 2;
  m.mutable_data()->assign(static_cast<std::size_t>(m.rows() * m.cols() * size), '\0');
  *reply->mutable_resident() = keep(std::move(m));
  reply->mutable_resident()->set_device(device);
  std::lock_guard<std::mutex> lock(mu_);
  devices_[reply->resident().handle()] = device;
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::WriteRange(grpc::ServerContext*,
                                           const v1::WriteRangeRequest* request,
                                           v1::WriteRangeReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  ++write_range_calls_;
  auto it = resident_.find(request->handle());
  if (it == resident_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such handle");
  std::string& data = *it->second.mutable_data();
  const auto offset = static_cast<std::size_t>(request->offset());
  if (offset + request->data().size() > data.size()) {
    return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "past the end");
  }
  data.replace(offset, request->data().size(), request->data());
  reply->set_bytes_received(static_cast<std::int64_t>(request->data().size()));
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::ReadRange(grpc::ServerContext*, const v1::ReadRangeRequest* request,
                                          v1::ReadRangeReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = resident_.find(request->handle());
  if (it == resident_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such handle");
  const std::string& data = it->second.data();
  const auto offset = static_cast<std::size_t>(request->offset());
  const auto length = static_cast<std::size_t>(request->length());
  if (offset + length > data.size()) {
    return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "past the end");
  }
  reply->set_data(data.substr(offset, length));
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::ListResident(grpc::ServerContext*, const v1::ListResidentRequest*,
                                             v1::ListResidentReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  std::int64_t total = 0;
  for (const auto& [handle, m] : resident_) {
    v1::ResidentInfo* info = reply->add_matrices();
    info->set_handle(handle);
    info->set_rows(m.rows());
    info->set_cols(m.cols());
    info->set_dtype(m.dtype());
    info->set_layout(m.layout());
    info->set_bytes(static_cast<std::int64_t>(m.data().size()));
    info->set_device("cpu");
    info->set_idle_expires_in_ms(60000);
    total += info->bytes();
  }
  reply->set_total_bytes(total);
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::ListKernels(grpc::ServerContext*, const v1::ListKernelsRequest*,
                                            v1::ListKernelsReply* reply) {
  v1::KernelInfo* g = reply->add_kernels();
  g->set_name("fake_gemm");
  g->set_family("cpu");
  g->set_operation(v1::GEMM);
  g->add_precisions("fp64");
  g->add_precisions("fp32");
  g->set_description("float64 reference, rounded once");
  g->set_backend("cpu");
  v1::KernelInfo* t = reply->add_kernels();
  t->set_name("fake_transpose");
  t->set_family("cpu");
  t->set_operation(v1::TRANSPOSE);
  t->add_precisions("fp32");
  t->set_constraints("rows <= 2^31");
  t->set_description("naive loop");
  t->set_backend("cpu");
  return grpc::Status::OK;
}

grpc::Status FakeMatrixService::GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                                              v1::GetServerInfoReply* reply) {
  reply->set_version("0.0.0-fake");
  {
    std::lock_guard<std::mutex> lock(mu_);
    reply->set_replica_id(replica_id_);
  }
  reply->set_backend("cpu");
  reply->set_git_sha("abcdef");
  v1::DeviceInfo* d = reply->add_devices();
  d->set_index(0);
  d->set_name("Fake \"GPU\"");
  d->set_compute_capability("9.0");
  d->set_memory_total_bytes(std::int64_t{80} << 30);
  d->set_memory_free_bytes(std::int64_t{79} << 30);
  d->set_multiprocessors(132);
  reply->mutable_limits()->set_max_message_bytes(std::int64_t{1} << 30);
  reply->mutable_limits()->set_max_dimension(65536);
  reply->mutable_limits()->set_max_matrix_bytes(std::int64_t{1} << 30);
  reply->mutable_limits()->set_resident_ttl_ms(60000);
  return grpc::Status::OK;
}

FakeServer::FakeServer() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(1 << 30);
  builder.SetMaxSendMessageSize(1 << 30);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
}

FakeServer::~FakeServer() {
  if (server_) server_->Shutdown();
}

}  // namespace matserve::client::testing
