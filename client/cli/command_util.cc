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

int UsageError(std::ostream& err, const absl::Status& s, Command command) {
  err << "error: " << s.message() << '\n';
  err << "run 'matserve-cli " << (command == Command::kNone ? "" : CommandName(command))
      << (command == Command::kNone ? "" : " ") << "--help' for usage\n";
  return kExitUsage;
}

int InputError(std::ostream& err, const absl::Status& s) {
  err << "error: " << s.message() << '\n';
  return kExitUsage;
}

int RpcError(std::ostream& err, const absl::Status& s) {
  err << "error: " << StatusCodeName(s.code()) << ": " << s.message() << '\n';
  return kExitRpc;
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient(
    const GlobalOptions& g, std::optional<std::chrono::milliseconds> deadline) {
  ClientOptions options;
  options.max_message_bytes = g.max_message_bytes;
  options.deadline = deadline.value_or(std::chrono::milliseconds(g.deadline_ms));
  if (absl::Status s = ApplySecurityFiles(g.security, options); !s.ok()) return s;
  return Client::Connect(g.target, options);
}

absl::StatusOr<NpyArray> LoadInput(const std::string& path, std::optional<kernels::DType> dtype) {
  NpyReadOptions options;
  options.bf16 = dtype == kernels::DType::kBF16;
  absl::StatusOr<NpyArray> array = ReadNpy(path, options);
  if (!array.ok()) return array.status();
  if (dtype && array->dtype != *dtype) {
    array->bytes = ConvertElements(array->bytes, array->dtype, *dtype);
    array->dtype = *dtype;
  }
  return array;
}

int WriteOut(const Env& env, const std::string& path, matserve::v1::Matrix&& matrix) {
  absl::StatusOr<NpyArray> npy = NpyFromMatrix(std::move(matrix));
  if (!npy.ok()) return RpcError(env.err, absl::DataLossError(npy.status().message()));
  if (absl::Status s = WriteNpy(path, *npy); !s.ok()) return InputError(env.err, s);
  return kExitOk;
}

int ToleranceExit(const Env& env, std::optional<double> tolerance,
                  const matserve::v1::Verification* server,
                  const std::optional<kernels::ErrorStats>& client) {
  const std::optional<double> server_rel =
      server != nullptr ? std::optional<double>(server->rel_l2_error()) : std::nullopt;
  if (absl::Status s = CheckTolerance(tolerance, server_rel, client); !s.ok()) {
    env.err << "error: verification failed: " << s.message() << '\n';
    return kExitVerify;
  }
  return kExitOk;
}

absl::Status CheckTolerance(std::optional<double> tolerance, std::optional<double> server,
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

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

matserve::v1::Timing MedianTiming(const std::vector<matserve::v1::Timing>& timings) {
  const auto median_of = [&timings](double (matserve::v1::Timing::*field)() const) {
    std::vector<double> v;
    v.reserve(timings.size());
    for (const matserve::v1::Timing& t : timings) v.push_back((t.*field)());
    return Median(std::move(v));
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
  out.set_merged_requests(static_cast<std::int32_t>(std::lround(Median(std::move(merged)))));
  return out;
}

}  // namespace matserve::client::cli
