// `matserve-cli multiply`: operands from .npy files, --random or resident handles; the request;
// the call; the client-side float64 check; --out; the report; the --tolerance verdict.
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/command_util.h"
#include "client/cli/commands.h"
#include "client/cli/report.h"
#include "client/cli/shm_transport.h"
#include "client/cli/verify.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {
namespace {

namespace v1 = ::matserve::v1;

absl::Status set_matrix(NpyArray array, v1::Matrix* out) {
  absl::StatusOr<v1::Matrix> m = matrix_from_npy(std::move(array));
  if (!m.ok()) return m.status();
  *out = *std::move(m);
  return absl::OkStatus();
}

absl::Status random_inputs(const MultiplyOptions& opt, v1::MultiplyRequest& request) {
  const auto [m, n, k] = *opt.random;
  const kernels::DType dtype = opt.dtype.value_or(kernels::DType::kF32);
  NpyArray a = opt.transpose_a ? random_matrix(k, m, dtype, opt.layout, opt.seed)
                               : random_matrix(m, k, dtype, opt.layout, opt.seed);
  NpyArray b = opt.transpose_b ? random_matrix(n, k, dtype, opt.layout, opt.seed + 1)
                               : random_matrix(k, n, dtype, opt.layout, opt.seed + 1);
  if (absl::Status s = set_matrix(std::move(a), request.mutable_a()); !s.ok()) return s;
  if (absl::Status s = set_matrix(std::move(b), request.mutable_b()); !s.ok()) return s;
  if (opt.beta.value_or(0.0) != 0.0) {
    return set_matrix(
        random_matrix(m, n, opt.output_dtype.value_or(dtype),
                      opt.output_layout.value_or(kernels::Layout::kRowMajor), opt.seed + 2),
        request.mutable_c());
  }
  return absl::OkStatus();
}

// Files and handles. A and B read from files must agree in dtype unless --dtype converts them.
absl::Status file_and_handle_inputs(const MultiplyOptions& opt, v1::MultiplyRequest& request) {
  std::optional<NpyArray> a, b;
  if (!opt.a.empty()) {
    absl::StatusOr<NpyArray> la = load_input(opt.a, opt.dtype);
    if (!la.ok()) return la.status();
    a = *std::move(la);
  }
  if (!opt.b.empty()) {
    absl::StatusOr<NpyArray> lb = load_input(opt.b, opt.dtype);
    if (!lb.ok()) return lb.status();
    b = *std::move(lb);
  }
  if (a && b && a->dtype != b->dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        opt.a, " is ", std::string(kernels::dtype_name(a->dtype)), " but ", opt.b, " is ",
        std::string(kernels::dtype_name(b->dtype)), "; pass --dtype to send both as one type"));
  }
  const std::optional<kernels::DType> in_type = a   ? std::optional(a->dtype)
                                                : b ? std::optional(b->dtype)
                                                    : opt.dtype;
  if (a) {
    if (absl::Status s = set_matrix(*std::move(a), request.mutable_a()); !s.ok()) return s;
  }
  if (b) {
    if (absl::Status s = set_matrix(*std::move(b), request.mutable_b()); !s.ok()) return s;
  }
  request.set_a_handle(opt.a_handle);
  request.set_b_handle(opt.b_handle);
  request.set_c_handle(opt.c_handle);
  if (!opt.c.empty()) {
    // C travels in the output dtype and in the output layout (the server requires both).
    absl::StatusOr<NpyArray> c = load_input(opt.c, opt.output_dtype ? opt.output_dtype : in_type);
    if (!c.ok()) return c.status();
    const kernels::Layout want = opt.output_layout.value_or(c->layout);
    c->bytes = to_layout(c->bytes, c->rows, c->cols, c->dtype, c->layout, want);
    c->layout = want;
    return set_matrix(*std::move(c), request.mutable_c());
  }
  return absl::OkStatus();
}

}  // namespace

int run_multiply(const Env& env, const MultiplyOptions& opt) {
  v1::MultiplyRequest request;
  const absl::Status inputs =
      opt.random ? random_inputs(opt, request) : file_and_handle_inputs(opt, request);
  if (!inputs.ok()) return input_error(env.err, inputs);
  set_multiply_options(opt, request);
  request.set_output_layout(request.has_c()
                                ? request.c().layout()
                                : to_proto(opt.output_layout.value_or(kernels::Layout::kRowMajor)));
  request.set_keep_result(opt.keep_result);
  request.set_split(opt.split);

  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  // With --shm the request names places in a region; the client-side check reads the bytes from
  // this copy of the original request.
  const v1::MultiplyRequest sent = request;
  std::optional<ShmTransport> shm;
  if (opt.shm) {
    const v1::Matrix& a = request.a();
    const v1::Matrix& b = request.b();
    const std::int64_t m = opt.transpose_a ? a.cols() : a.rows();
    const std::int64_t n = opt.transpose_b ? b.rows() : b.cols();
    const v1::DataType out =
        request.output_dtype() != v1::DATA_TYPE_UNSPECIFIED ? request.output_dtype() : a.dtype();
    absl::StatusOr<DType> out_type = from_proto(out);
    if (!out_type.ok()) return input_error(env.err, out_type.status());
    std::vector<v1::Matrix*> operands = {request.mutable_a(), request.mutable_b()};
    if (request.has_c()) operands.push_back(request.mutable_c());
    absl::StatusOr<ShmTransport> t = ShmTransport::create(
        **client, operands, m * n * static_cast<std::int64_t>(kernels::dtype_size(*out_type)),
        request.mutable_output_shm());
    if (!t.ok()) return rpc_error(env.err, t.status());
    shm.emplace(*std::move(t));
  }
  double gflops = 0, rpc_us = 0;
  absl::StatusOr<v1::MultiplyReply> reply =
      call_repeated<v1::MultiplyReply>([&] { return (*client)->multiply(request); },
                                       [](const v1::MultiplyReply& r) { return r.gflops(); },
                                       opt.warmup, opt.repeat, gflops, rpc_us);
  if (!reply.ok()) return rpc_error(env.err, reply.status());
  reply->set_gflops(gflops);
  if (shm) shm->fetch_result(*reply->mutable_c());

  RunSummary summary;
  summary.target = env.global.target;
  summary.variant_requested = opt.variant;
  summary.m = reply->c().rows();
  summary.n = reply->c().cols();
  summary.k = request.has_a()   ? (opt.transpose_a ? request.a().rows() : request.a().cols())
              : request.has_b() ? (opt.transpose_b ? request.b().cols() : request.b().rows())
                                : -1;
  const v1::DataType in_type = request.has_a()   ? request.a().dtype()
                               : request.has_b() ? request.b().dtype()
                                                 : v1::DATA_TYPE_UNSPECIFIED;
  summary.dtype = in_type == v1::DATA_TYPE_UNSPECIFIED ? "resident" : DTypeName(in_type);
  summary.output_dtype = DTypeName(reply->c().dtype());
  summary.layout = reply->c().layout() == v1::COL_MAJOR ? "col" : "row";
  summary.compute = compute_mode_name(opt.compute);
  summary.rpc_us = rpc_us;
  summary.warmup = opt.warmup;
  summary.runs = opt.repeat;
  if (opt.check) {
    absl::StatusOr<kernels::ErrorStats> check = verify_multiply(sent, reply->c());
    if (!check.ok()) return rpc_error(env.err, check.status());
    summary.client_check = *check;
  }
  if (!opt.out.empty()) {
    if (int rc = write_out(env, opt.out, std::move(*reply->mutable_c())); rc != kExitOk) return rc;
    summary.out_path = opt.out;
  }
  print_multiply(*reply, summary, env.global.json, env.out);
  return tolerance_exit(env, opt.tolerance,
                        reply->has_verification() ? &reply->verification() : nullptr,
                        summary.client_check);
}

}  // namespace matserve::client::cli
