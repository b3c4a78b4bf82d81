// Shared pieces of the CLI's commands: the run's streams and options, the three error kinds and
// their exit codes, the client, input loading with dtype conversion, and the tolerance check.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/args.h"
#include "client/cpp/client.h"
#include "client/cpp/matrix.h"
#include "client/cpp/npy.h"
#include "kernels/cpu/reference.h"

namespace matserve::client::cli {

// One run's settings and streams.
struct Env {
  const GlobalOptions& global;
  std::ostream& out;
  std::ostream& err;
};

// "error: <message>" + a --help hint; exit 1.
int usage_error(std::ostream& err, const absl::Status& s, Command command);
// "error: <message>"; exit 1 (unreadable or malformed input, unwritable output).
int input_error(std::ostream& err, const absl::Status& s);
// "error: <CODE>: <message>"; exit 2.
int rpc_error(std::ostream& err, const absl::Status& s);

// A client for the run's target, with `deadline` per call (the run's --deadline-ms when unset),
// the bearer token of --token-file (or $MATSERVE_TOKEN) and TLS from --tls-ca/--tls-cert/--tls-key.
absl::StatusOr<std::unique_ptr<Client>> make_client(
    const GlobalOptions& g, std::optional<std::chrono::milliseconds> deadline = std::nullopt);

// Reads a .npy input (bf16 bits when `dtype` is bf16) and converts it to `dtype` when given.
absl::StatusOr<NpyArray> load_input(const std::string& path, std::optional<kernels::DType> dtype);

// OUT_OF_RANGE when a reported relative L2 error exceeds `tolerance` or the result holds NaN/Inf.
absl::Status check_tolerance(std::optional<double> tolerance, std::optional<double> server,
                             const std::optional<kernels::ErrorStats>& client);

// --out: writes `matrix` (moved from) as .npy; 0, or the exit code of the error it printed.
int write_out(const Env& env, const std::string& path, matserve::v1::Matrix&& matrix);

// After a multiply or transpose: kExitVerify (and the message) when the server's check (`server`,
// null when none) or the client's exceeds --tolerance, else kExitOk.
int tolerance_exit(const Env& env, std::optional<double> tolerance,
                   const matserve::v1::Verification* server,
                   const std::optional<kernels::ErrorStats>& client);

// Microseconds since `start` on the steady clock.
double micros_since(std::chrono::steady_clock::time_point start);

// median (mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);
// Each stage's median over `timings` (merged_requests: the median, rounded).
matserve::v1::Timing median_timing(const std::vector<matserve::v1::Timing>& timings);

// Makes `warmup` + `repeat` calls and returns the last reply, its timing replaced by each
// stage's median over the `repeat` measured calls; `rate` (GFLOP/s or GB/s of a reply) and the
// client round trip likewise. The first failing call's status is returned as is.
template <typename Reply, typename Call, typename Rate>
absl::StatusOr<Reply> call_repeated(Call call, Rate rate, std::int64_t warmup, std::int64_t repeat,
                                    double& median_rate, double& median_rpc_us) {
  std::vector<matserve::v1::Timing> timings;
  std::vector<double> rates, rpcs;
  absl::StatusOr<Reply> reply;
  for (std::int64_t i = 0; i < warmup + repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    reply = call();
    const double us = micros_since(start);
    if (!reply.ok()) return reply.status();
    if (i < warmup) continue;
    timings.push_back(reply->timing());
    rates.push_back(rate(*reply));
    rpcs.push_back(us);
  }
  *reply->mutable_timing() = median_timing(timings);
  median_rate = median(rates);
  median_rpc_us = median(rpcs);
  return reply;
}

// The options a Multiply and a MultiplyBatched request share (the two messages name them
// alike): op states, alpha and beta when given, variant, compute mode, output dtype, the
// server's check. The output layout is the caller's (Multiply follows a given C's).
template <typename Request>
void set_multiply_options(const MultiplyOptions& opt, Request& request) {
  request.set_transpose_a(opt.transpose_a);
  request.set_transpose_b(opt.transpose_b);
  if (opt.alpha) request.set_alpha(*opt.alpha);
  if (opt.beta) request.set_beta(*opt.beta);
  request.set_variant(opt.variant);
  request.set_compute(opt.compute);
  if (opt.output_dtype) request.set_output_dtype(to_proto(*opt.output_dtype));
  request.set_verify(opt.verify);
}

int run_multiply(const Env& env, const MultiplyOptions& opt);    // multiply_command.cc
int run_transpose(const Env& env, const TransposeOptions& opt);  // transpose_command.cc
int run_upload(const Env& env, const UploadOptions& opt);        // resident_commands.cc
int run_download(const Env& env, const HandleOptions& opt);
int run_release(const Env& env, const HandleOptions& opt);
int run_resident(const Env& env);

// multiply --batch N > 1: one MultiplyBatched call (multiply_batched_command.cc).
int run_multiply_batched(const Env& env, const MultiplyOptions& opt);

}  // namespace matserve::client::cli
