// `matserve-cli multiply --batch N`: N products of --random operands in one MultiplyBatched call
// (A, B and, when --beta is not 0, C stacked N deep), timed like multiply (medians over --repeat
// after --warmup), checked by the server with --verify, reported as multiply with the
// batch size.
#include <optional>
#include <utility>

#include "client/cli/command_util.h"
#include "client/cli/commands.h"
#include "client/cli/report.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {
namespace {

namespace v1 = ::matserve::v1;

// `count` random rows x cols matrices, each in `layout`, stacked batch-major in one Matrix;
// matrix i from seed `seed + i * seed_step`.
absl::StatusOr<v1::Matrix> random_stack(std::int64_t rows, std::int64_t cols, std::int64_t count,
                                        kernels::DType dtype, kernels::Layout layout,
                                        std::uint64_t seed, std::uint64_t seed_step) {
  v1::Matrix stack;
  for (std::int64_t i = 0; i < count; ++i) {
    absl::StatusOr<v1::Matrix> one = matrix_from_npy(
        random_matrix(rows, cols, dtype, layout, seed + static_cast<std::uint64_t>(i) * seed_step));
    if (!one.ok()) return one.status();
    if (i == 0) {
      stack = *std::move(one);
      stack.mutable_data()->reserve(stack.data().size() * static_cast<std::size_t>(count));
    } else {
      stack.mutable_data()->append(one->data());
    }
  }
  stack.set_batch(count);
  return stack;
}

// Product i's A, B and C come from seeds S + 3i, S + 3i + 1 and S + 3i + 2: product 0 is what
// `multiply --random` without --batch computes.
absl::Status random_batch_inputs(const MultiplyOptions& opt, v1::MultiplyBatchedRequest& request) {
  const auto [m, n, k] = *opt.random;
  const kernels::DType dtype = opt.dtype.value_or(kernels::DType::kF32);
  const std::int64_t count = opt.batch;
  absl::StatusOr<v1::Matrix> a = opt.transpose_a
                                     ? random_stack(k, m, count, dtype, opt.layout, opt.seed, 3)
                                     : random_stack(m, k, count, dtype, opt.layout, opt.seed, 3);
  if (!a.ok()) return a.status();
  *request.mutable_a() = *std::move(a);
  absl::StatusOr<v1::Matrix> b =
      opt.transpose_b ? random_stack(n, k, count, dtype, opt.layout, opt.seed + 1, 3)
                      : random_stack(k, n, count, dtype, opt.layout, opt.seed + 1, 3);
  if (!b.ok()) return b.status();
  *request.mutable_b() = *std::move(b);
  if (opt.beta.value_or(0.0) != 0.0) {
    absl::StatusOr<v1::Matrix> c =
        random_stack(m, n, count, opt.output_dtype.value_or(dtype),
                     opt.output_layout.value_or(kernels::Layout::kRowMajor), opt.seed + 2, 3);
    if (!c.ok()) return c.status();
    *request.mutable_c() = *std::move(c);
  }
  return absl::OkStatus();
}

// The batch's reply as print_multiply shows a product's: what ran, the timing and rate of the
// whole batch, the largest error over the products, C's header (no data).
v1::MultiplyReply as_shown(const v1::MultiplyBatchedReply& reply, double gflops) {
  v1::MultiplyReply shown;
  shown.set_variant(reply.variant());
  shown.set_device(reply.device());
  shown.set_precision(reply.precision());
  *shown.mutable_timing() = reply.timing();
  shown.set_gflops(gflops);
  if (reply.has_verification()) *shown.mutable_verification() = reply.verification();
  v1::Matrix* c = shown.mutable_c();
  c->set_rows(reply.c().rows());
  c->set_cols(reply.c().cols());
  c->set_dtype(reply.c().dtype());
  c->set_layout(reply.c().layout());
  c->set_batch(reply.c().batch());
  return shown;
}

}  // namespace

int run_multiply_batched(const Env& env, const MultiplyOptions& opt) {
  v1::MultiplyBatchedRequest request;
  request.set_batch(opt.batch);
  if (absl::Status s = random_batch_inputs(opt, request); !s.ok()) return input_error(env.err, s);
  set_multiply_options(opt, request);
  request.set_output_layout(to_proto(opt.output_layout.value_or(kernels::Layout::kRowMajor)));

  absl::StatusOr<std::unique_ptr<Client>> client = make_client(env.global);
  if (!client.ok()) return input_error(env.err, client.status());
  double gflops = 0, rpc_us = 0;
  absl::StatusOr<v1::MultiplyBatchedReply> reply = call_repeated<v1::MultiplyBatchedReply>(
      [&] { return (*client)->multiply_batched(request); },
      [](const v1::MultiplyBatchedReply& r) { return r.gflops(); }, opt.warmup, opt.repeat, gflops,
      rpc_us);
  if (!reply.ok()) return rpc_error(env.err, reply.status());

  RunSummary summary;
  summary.target = env.global.target;
  summary.variant_requested = opt.variant;
  summary.m = reply->c().rows();
  summary.n = reply->c().cols();
  summary.k = (*opt.random)[2];
  summary.dtype = DTypeName(request.a().dtype());
  summary.output_dtype = DTypeName(reply->c().dtype());
  summary.layout = reply->c().layout() == v1::COL_MAJOR ? "col" : "row";
  summary.compute = compute_mode_name(opt.compute);
  summary.rpc_us = rpc_us;
  summary.warmup = opt.warmup;
  summary.runs = opt.repeat;
  summary.batch = opt.batch;
  print_multiply(as_shown(*reply, gflops), summary, env.global.json, env.out);
  return tolerance_exit(env, opt.tolerance,
                        reply->has_verification() ? &reply->verification() : nullptr, std::nullopt);
}

}  // namespace matserve::client::cli
