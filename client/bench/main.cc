// matserve-bench: closed-loop load generator for a matserve server. Prints its plan, runs every
// combination of the mix in sequence, then a table; --json/--csv/--markdown write the same runs.
// Exit status: 0 all requests succeeded, 3 some failed (reports still written), 4 none failed but
// a windowed run did not become stable, 1 bad usage or unwritable output, 2 the server could not
// be reached.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/bench/histogram.h"
#include "client/bench/operands.h"
#include "client/bench/options.h"
#include "client/bench/report.h"
#include "client/bench/runner.h"
#include "client/cpp/client.h"
#include "client/cpp/process_settings.h"

namespace matserve::client::bench {
namespace {

std::vector<RunSpec> Plan(const BenchOptions& o) {
  std::vector<RunSpec> plan;
  // The transport floor first: it does not depend on the shape, variant or compute mode.
  for (Mode floor : {Mode::kPing, Mode::kEcho}) {
    if (std::find(o.modes.begin(), o.modes.end(), floor) == o.modes.end()) continue;
    for (int c : o.concurrency) plan.push_back({Shape{0, 0, 0}, floor, "-", "-", c});
  }
  for (const Shape& shape : o.shapes) {
    for (Mode mode : o.modes) {
      if (IsFloor(mode)) continue;
      for (const std::string& variant : o.variants) {
        for (const std::string& compute : o.compute) {
          for (int c : o.concurrency) {
            plan.push_back({shape, mode, variant, compute, c, o.batch});
          }
        }
      }
    }
  }
  return plan;
}

std::string label(const RunSpec& s, std::size_t i, std::size_t n) {
  return absl::StrCat("[", i + 1, "/", n, "] ", s.shape.name(), " ", ModeName(s.mode), " ",
                      s.variant, " ", s.precision, " c=", s.concurrency,
                      s.batch > 1 ? absl::StrCat(" batch=", s.batch) : "");
}

bool write_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  if (path.empty()) return true;
  std::ofstream file(path);
  write(file);
  file.close();
  if (!file) std::cerr << "error: cannot write " << path << "\n";
  return static_cast<bool>(file);
}

int run_bench(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = parse_options(args);
  if (!parsed.ok()) {
    std::cerr << "error: " << parsed.status().message() << "\n(see matserve-bench --help)\n";
    return 1;
  }
  for (const std::string& warning : parsed->warnings) std::cerr << "warning: " << warning << "\n";
  if (parsed->help) {
    std::cout << usage();
    return 0;
  }
  // --a-npy / --b-npy: the files fix the shape and, unless --compute says, the data type.
  std::optional<FileOperands> files;
  if (!parsed->a_npy.empty() || !parsed->b_npy.empty()) {
    absl::StatusOr<FileOperands> loaded = load_file_operands(*parsed);
    if (!loaded.ok()) {
      std::cerr << "error: " << loaded.status().message() << "\n";
      return 1;
    }
    files = *std::move(loaded);
    parsed->shapes = {files->shape};
    if (!parsed->compute_given) parsed->compute = {files->data_type};
  }
  if (absl::Status s = apply_security_files(parsed->security, parsed->client); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  const BenchOptions& o = *parsed;
  ClientOptions client_options = o.client;
  client_options.deadline = std::chrono::milliseconds(o.deadline_ms);
  client_options.connect_timeout = std::chrono::seconds(10);
  client_options.channel_args = o.channel_args;
  auto client = Client::connect(o.target, client_options);
  if (!client.ok()) {
    std::cerr << "error: " << status_code_name(client.status().code()) << ": "
              << client.status().message() << "\n";
    return 2;
  }
  auto info = (*client)->get_server_info();
  if (!info.ok()) {
    std::cerr << "error: GetServerInfo: " << status_code_name(info.status().code()) << ": "
              << info.status().message() << "\n";
    return 2;
  }
  ServerDescription server{o.target, info->backend(), info->version(), info->git_sha(), {}};
  for (const auto& d : info->devices())
    server.devices.push_back(absl::StrCat(d.index(), ": ", d.name()));

  const std::vector<RunSpec> plan = Plan(o);
  const StabilityOptions& st = o.stability;
  const std::string stop =
      st.window_ms > 0
          ? absl::StrCat("windows of ", st.window_ms, " ms until the last ", st.windows,
                         " agree within ", st.pct, "% (at most ", st.max_trials, " windows)")
          : absl::StrCat(o.requests ? absl::StrCat(*o.requests, " requests") : "",
                         o.requests && o.duration_s ? " or " : "",
                         o.duration_s ? absl::StrCat(*o.duration_s, " s") : "");
  std::cout << "matserve-bench: " << plan.size() << " runs against " << o.target << " (backend "
            << server.backend << ", " << absl::StrJoin(server.devices, ", ") << "), each "
            << o.warmup << " warm-up requests per worker then " << stop << ", "
            << (o.client_per_worker ? "one client per worker" : "one shared client")
            << (o.workload.ops.size() > 1 || !o.workload.has(Op::kMultiply)
                    ? absl::StrCat(", workload ", o.workload.name())
                    : "")
            << (files ? absl::StrCat(", operands from ", o.a_npy,
                                     o.b_npy.empty() ? "" : absl::StrCat(" and ", o.b_npy))
                      : "")
            << ":\n";
  for (std::size_t i = 0; i < plan.size(); ++i)
    std::cout << "  " << label(plan[i], i, plan.size()) << "\n";
  std::cout << std::flush;

  const bool tty = o.progress && isatty(STDERR_FILENO);
  std::vector<RunReport> reports;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    RunContext context{o, o.client_per_worker ? nullptr : client->get(), tty,
                       label(plan[i], i, plan.size()), files ? &*files : nullptr};
    reports.push_back(make_report(run_one(context, plan[i]), info->devices_size()));
    if (!tty) {
      const RunReport& r = reports.back();
      std::cerr << context.label << ": " << r.requests << " requests, " << r.errors << " errors, "
                << r.requests_per_s << " req/s"
                << (r.offered_rate ? absl::StrCat(" (offered ", *r.offered_rate, ")") : "") << ", "
                << r.matrices_per_s << " matrices/s, p50 " << r.client_us.p50 << " us\n";
    }
  }
  std::cout << "\n";
  print_table(std::cout, reports);
  print_sections(std::cout, reports);

  const std::string command_line = absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ");
  const std::string mode = o.client_per_worker ? "per-worker" : "shared";
  bool written = write_file(
      o.json_path, [&](std::ostream& f) { write_json(f, reports, server, command_line, mode); });
  written &= write_file(o.csv_path, [&](std::ostream& f) { write_csv(f, reports); });
  written &=
      write_file(o.markdown_path, [&](std::ostream& f) { print_markdown(f, reports, server); });
  written &=
      write_file(o.histogram_path, [&](std::ostream& f) { write_histogram_csv(f, reports); });
  written &=
      write_file(o.timeseries_path, [&](std::ostream& f) { write_timeseries_csv(f, reports); });
  if (!written) return 1;
  for (const auto& r : reports) {
    if (r.errors > 0) return 3;
  }
  for (const auto& r : reports) {
    if (r.stability.options.window_ms > 0 && !r.stability.stable) return 4;
  }
  return 0;
}

}  // namespace
}  // namespace matserve::client::bench

int main(int argc, char** argv) {
  matserve::client::turn_off_lock_order_checks();
  return matserve::client::bench::run_bench(argc, argv);
}
