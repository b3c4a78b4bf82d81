// `matserve-cli transpose`: A from a .npy file, --random or a resident handle (optionally in
// place); the call; the client-side float64 check; --out; the report; the --tolerance verdict.
#include <optional>
#include <utility>

#include "client/cli/command_util.h"
#include "client/cli/commands.h"
#include "client/cli/report.h"
#include "client/cli/shm_transport.h"
#include "client/cli/verify.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {

namespace v1 = ::matserve::v1;

int run_transpose(const Env& env, const TransposeOptions& opt) {
  v1::TransposeRequest request;
  if (opt.a_handle.empty()) {
    NpyArray a;
    if (opt.random) {
      a = random_matrix((*opt.random)[0], (*opt.random)[1],
                        opt.dtype.value_or(kernels::DType::kF32), opt.layout, opt.seed);
    } else {
      absl::StatusOr<NpyArray> la = load_input(opt.a, opt.dtype);
      if (!la.ok()) return input_error(env.err, la.status());
      a = *std::move(la);
    }
    absl::StatusOr<v1::Matrix> ma = matrix_from_npy(std::move(a));
    if (!ma.ok()) return input_error(env.err, ma.status());
    *request.mutable_a() = *std::move(ma);
  }
  request.set_a_handle(opt.a_handle);
  if (opt.scale) request.set_scale(*opt.scale);
  request.set_variant(opt.variant);
  request.set_verify(opt.verify);
  request.set_keep_result(opt.keep_result);
  request.set_in_place(opt.in_place);

  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  const v1::TransposeRequest sent = request;  // the bytes the client-side check reads
  std::optional<ShmTransport> shm;
  if (opt.shm) {
    const auto bytes = static_cast<std::int64_t>(request.a().data().size());
    absl::StatusOr<ShmTransport> t =
        ShmTransport::create(**client, {request.mutable_a()}, bytes, request.mutable_output_shm());
    if (!t.ok()) return rpc_error(env.err, t.status());
    shm.emplace(*std::move(t));
  }
  double gb_per_s = 0, rpc_us = 0;
  absl::StatusOr<v1::TransposeReply> reply =
      call_repeated<v1::TransposeReply>([&] { return (*client)->transpose(request); },
                                        [](const v1::TransposeReply& r) { return r.gb_per_s(); },
                                        opt.warmup, opt.repeat, gb_per_s, rpc_us);
  if (!reply.ok()) return rpc_error(env.err, reply.status());
  reply->set_gb_per_s(gb_per_s);
  if (shm) shm->fetch_result(*reply->mutable_b());

  RunSummary summary;
  summary.target = env.global.target;
  summary.variant_requested = opt.variant;
  // A's shape: from the request, or (resident A) from the reply's B, which is A^T.
  summary.m = request.has_a() ? request.a().rows() : reply->b().cols();
  summary.n = request.has_a() ? request.a().cols() : reply->b().rows();
  summary.dtype = DTypeName(request.has_a() ? request.a().dtype() : reply->b().dtype());
  summary.output_dtype = summary.dtype;
  summary.layout = (request.has_a() ? request.a().layout() : reply->b().layout()) == v1::COL_MAJOR
                       ? "col"
                       : "row";
  summary.rpc_us = rpc_us;
  summary.warmup = opt.warmup;
  summary.runs = opt.repeat;
  if (opt.check) {
    absl::StatusOr<kernels::ErrorStats> check = verify_transpose(sent, reply->b());
    if (!check.ok()) return rpc_error(env.err, check.status());
    summary.client_check = *check;
  }
  if (!opt.out.empty()) {
    if (int rc = write_out(env, opt.out, std::move(*reply->mutable_b())); rc != kExitOk) return rc;
    summary.out_path = opt.out;
  }
  print_transpose(*reply, summary, env.global.json, env.out);
  return tolerance_exit(env, opt.tolerance,
                        reply->has_verification() ? &reply->verification() : nullptr,
                        summary.client_check);
}

}  // namespace matserve::client::cli
