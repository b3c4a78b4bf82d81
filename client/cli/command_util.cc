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
  if (!g.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTextFile("--token-file", g.token_file);
    if (!token.ok()) return token.status();
    options.bearer_token = FirstToken(*token);
    if (options.bearer_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file: ", g.token_file,
                       " holds no token (its first line that is not blank or a '#' comment)"));
    }
  } else if (const char* env = std::getenv("MATSERVE_TOKEN"); env != nullptr) {
    options.bearer_token = FirstToken(env);
  }
  if (!g.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    for (auto [flag, path, pem] : {std::tuple{"--tls-ca", &g.tls_ca, &ssl.pem_root_certs},
                                   std::tuple{"--tls-cert", &g.tls_cert, &ssl.pem_cert_chain},
                                   std::tuple{"--tls-key", &g.tls_key, &ssl.pem_private_key}}) {
      if (path->empty()) continue;
      absl::StatusOr<std::string> text = ReadTextFile(flag, *path);
      if (!text.ok()) return text.status();
      *pem = *std::move(text);
    }
    options.credentials = grpc::SslCredentials(ssl);
    options.tls_server_name = g.tls_server_name;
  }
  return Client::Connect(g.target, options);
}

absl::StatusOr<std::string> ReadTextFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string FirstToken(const std::string& text) {
  for (absl::string_view line : absl::StrSplit(text, absl::ByAnyChar("\r\n"))) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') return std::string(line);
  }
  return "";
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
