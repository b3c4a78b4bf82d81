// matserve-bench's options for what each request does and how a run is measured and exported:
// --workload, --a-npy/--b-npy, the stability windows (--window-ms, --stability-pct,
// --stability-windows, --max-trials, --stability-percentile), --histogram-out, --timeseries-out.
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/bench/options.h"

namespace matserve::client::bench {
namespace {

// A number in [min_value, max_value] (an integer when `integer`), or INVALID_ARGUMENT naming
// the option.
absl::StatusOr<double> number(const std::string& name, const std::string& value, double min_value,
                              double max_value, bool integer) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < min_value || v > max_value ||
      (integer && v != std::floor(v))) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", integer ? "an integer" : "a number", " in [", min_value,
                     ", ", max_value, "], got '", value, "'"));
  }
  return v;
}

}  // namespace

absl::StatusOr<bool> parse_measure_option(const std::string& name, const std::string& value,
                                          BenchOptions& o) {
  StabilityOptions& s = o.stability;
  struct Numeric {
    const char* name;
    double* target_double;
    int* target_int;
    double min_value, max_value;
  };
  const Numeric numerics[] = {
      {"--window-ms", &s.window_ms, nullptr, 1, 3.6e6},
      {"--stability-pct", &s.pct, nullptr, 0.01, 1000},
      {"--stability-windows", nullptr, &s.windows, 2, 1000},
      {"--max-trials", nullptr, &s.max_trials, 1, 100000},
      {"--stability-percentile", &s.percentile, nullptr, 0, 100},
  };
  for (const Numeric& n : numerics) {
    if (name != n.name) continue;
    absl::StatusOr<double> v =
        number(name, value, n.min_value, n.max_value, n.target_int != nullptr);
    if (!v.ok()) return v.status();
    if (n.target_int != nullptr) {
      *n.target_int = static_cast<int>(*v);
    } else {
      *n.target_double = *v;
    }
    return true;
  }
  const std::pair<const char*, std::string*> paths[] = {{"--a-npy", &o.a_npy},
                                                        {"--b-npy", &o.b_npy},
                                                        {"--histogram-out", &o.histogram_path},
                                                        {"--timeseries-out", &o.timeseries_path}};
  for (const auto& [flag, path] : paths) {
    if (name != flag) continue;
    *path = value;
    return true;
  }
  if (name != "--workload") return false;
  absl::StatusOr<Workload> workload = parse_workload(value);
  if (!workload.ok()) return workload.status();
  o.workload = *std::move(workload);
  return true;
}

absl::Status check_measure_options(const BenchOptions& o) {
  const StabilityOptions& s = o.stability;
  if (s.window_ms > 0 && (o.requests || o.duration_s)) {
    return absl::InvalidArgumentError(
        "--window-ms: a windowed run stops when stable or after --max-trials windows; not with "
        "--requests or --duration");
  }
  if (s.window_ms > 0 && s.max_trials < s.windows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-trials ", s.max_trials, " is fewer than --stability-windows ", s.windows));
  }
  if (o.workload.has(Op::kTranspose)) {
    if (o.batch > 1) return absl::InvalidArgumentError("--batch: not with transposes (--workload)");
    for (Mode mode : o.modes) {
      if (mode == Mode::kShm || mode == Mode::kCudaIpc) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--workload: transposes need the inline or resident mode, not ", ModeName(mode)));
      }
    }
  }
  if (!o.a_npy.empty() || !o.b_npy.empty()) {
    if (o.shapes_given) {
      return absl::InvalidArgumentError("--shapes: not with --a-npy (the files give the shape)");
    }
    if (o.batch > 1) return absl::InvalidArgumentError("--batch: not with --a-npy / --b-npy");
  }
  return absl::OkStatus();
}

}  // namespace matserve::client::bench
