// Error printing, client construction, input loading and the tolerance check shared by commands.
#include "client/cli/command_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli/commands.h"
#include "client/cpp/connection_security.h"
#include "client/cpp/matrix.h"
#include "grpcpp/security/credentials.h"

namespace matserve::client::cli {

int usage_error(std::ostream& err, const absl::Status& s, Command command) {
  err << "error: " << s.message() << '\n';
  err << "run 'matserve-cli " << (command == Command::kNone ? "" : CommandName(command))
      << (command == Command::kNone ? "" : " ") << "--help' for usage\n";
  return kExitUsage;
}

int input_error(std::ostream& err, const absl::Status& s) {
  err << "error: " << s.message() << '\n';
  return kExitUsage;
}

int rpc_error(std::ostream& err, const absl::Status& s) {
  err << "error: " << status_code_name(s.code()) << ": " << s.message() << '\n';
  return kExitRpc;
}

absl::StatusOr<std::unique_ptr<Client>> make_client(
    const GlobalOptions& g, std::optional<std::chrono::milliseconds> deadline) {
  ClientOptions options;
  options.max_message_bytes = g.max_message_bytes;
  options.stripes = g.stripes;
  options.stripe_threshold_bytes = g.stripe_threshold_bytes;
  options.stripe_chunk_bytes = g.stripe_chunk_bytes;
  options.deadline = deadline.value_or(std::chrono::milliseconds(g.deadline_ms));
  if (absl::Status s = apply_security_files(g.security, options); !s.ok()) return s;
  return Client::connect(g.target, options);
}

absl::StatusOr<NpyArray> load_input(const std::string& path, std::optional<kernels::DType> dtype) {
  NpyReadOptions options;
  options.bf16 = dtype == kernels::DType::kBF16;
  absl::StatusOr<NpyArray> array = read_npy(path, options);
  if (!array.ok()) return array.status();
  if (dtype && array->dtype != *dtype) {
    array->bytes = convert_elements(array->bytes, array->dtype, *dtype);
    array->dtype = *dtype;
  }
  return array;
}

int write_out(const Env& env, const std::string& path, matserve::v1::Matrix&& matrix) {
  absl::StatusOr<NpyArray> npy = npy_from_matrix(std::move(matrix));
  if (!npy.ok()) return rpc_error(env.err, absl::DataLossError(npy.status().message()));
  if (absl::Status s = write_npy(path, *npy); !s.ok()) return input_error(env.err, s);
  return kExitOk;
}

int tolerance_exit(const Env& env, std::optional<double> tolerance,
                   const matserve::v1::Verification* server,
                   const std::optional<kernels::ErrorStats>& client) {
  const std::optional<double> server_rel =
      server != nullptr ? std::optional<double>(server->rel_l2_error()) : std::nullopt;
  if (absl::Status s = check_tolerance(tolerance, server_rel, client); !s.ok()) {
    env.err << "error: verification failed: " << s.message() << '\n';
    return kExitVerify;
  }
  return kExitOk;
}

absl::Status check_tolerance(std::optional<double> tolerance, std::optional<double> server,
                             const std::optional<kernels::ErrorStats>& client) {
  if (!tolerance) return absl::OkStatus();
  if (server && !(*server <= *tolerance)) {
    return absl::OutOfRangeError(
        absl::StrCat("server rel_l2_error ", *server, " exceeds tolerance ", *tolerance));
  }
  if (client && client->nonfinite > 0) {
    return absl::OutOfRangeError(
        absl::StrCat(client->nonfinite, " non-finite elements in the result"));
  }
  if (client && !(client->rel_l2_error <= *tolerance)) {
    return absl::OutOfRangeError(absl::StrCat("client rel_l2_error ", client->rel_l2_error,
                                              " exceeds tolerance ", *tolerance));
  }
  return absl::OkStatus();
}

double micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

matserve::v1::Timing median_timing(const std::vector<matserve::v1::Timing>& timings) {
  const auto median_of = [&timings](double (matserve::v1::Timing::*field)() const) {
    std::vector<double> v;
    v.reserve(timings.size());
    for (const matserve::v1::Timing& t : timings) v.push_back((t.*field)());
    return median(std::move(v));
  };
  matserve::v1::Timing out;
  out.set_queue_us(median_of(&matserve::v1::Timing::queue_us));
  out.set_host_to_device_us(median_of(&matserve::v1::Timing::host_to_device_us));
  out.set_launch_us(median_of(&matserve::v1::Timing::launch_us));
  out.set_kernel_us(median_of(&matserve::v1::Timing::kernel_us));
  out.set_device_to_host_us(median_of(&matserve::v1::Timing::device_to_host_us));
  out.set_total_us(median_of(&matserve::v1::Timing::total_us));
  out.set_batch_wait_us(median_of(&matserve::v1::Timing::batch_wait_us));
  std::vector<double> merged;
  merged.reserve(timings.size());
  for (const matserve::v1::Timing& t : timings) merged.push_back(t.merged_requests());
  out.set_merged_requests(static_cast<std::int32_t>(std::lround(median(std::move(merged)))));
  return out;
}

}  // namespace matserve::client::cli
