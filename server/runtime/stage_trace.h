// Where a request's server time goes, host side: an env-gated trace (MATSERVE_TRACE_STAGES=1).
// A request stamps named marks (StageMarks) as it passes the handler and the backend; the gap
// since the previous mark is that stage's time. StageTrace, owned by the Runtime, keeps every
// sample per (request class, stage) and prints nearest-rank p50/p99 to stderr when destroyed and
// every `period` while requests arrive. Off (the default) a mark is one branch on a bool.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace matserve::server {

// One request's marks, filled on the thread that runs it (no locking).
class StageMarks {
 public:
  using Clock = std::chrono::steady_clock;

  void start(std::string label) {
    enabled_ = true;
    label_ = std::move(label);
    last_ = Clock::now();
  }
  bool enabled() const { return enabled_; }
  // Refines the request's class once it is known (its shape, after validation).
  void relabel(std::string label) {
    if (enabled_) label_ = std::move(label);
  }
  // Ends the stage called `stage` (the time since the previous mark or since start()).
  void mark(const char* stage) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    stages_.emplace_back(stage, std::chrono::duration<double, std::micro>(now - last_).count());
    last_ = now;
  }
  // A duration measured elsewhere (a device-side event interval), kept beside the host stages.
  void add(const char* stage, double us) {
    if (enabled_) stages_.emplace_back(stage, us);
  }
  const std::string& label() const { return label_; }
  const std::vector<std::pair<const char*, double>>& stages() const { return stages_; }

 private:
  bool enabled_ = false;
  std::string label_;
  Clock::time_point last_;
  std::vector<std::pair<const char*, double>> stages_;
};

class StageTrace {
 public:
  // On when MATSERVE_TRACE_STAGES is set and not "0".
  static bool enabled_by_env() {
    const char* v = std::getenv("MATSERVE_TRACE_STAGES");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }

  explicit StageTrace(bool enabled, std::chrono::seconds period = std::chrono::seconds(10))
      : enabled_(enabled), period_(period), last_print_(StageMarks::Clock::now()) {}
  StageTrace(const StageTrace&) = delete;
  StageTrace& operator=(const StageTrace&) = delete;
  ~StageTrace() { print(); }

  bool enabled() const { return enabled_; }

  void record(const StageMarks& marks) {
    if (!enabled_ || !marks.enabled()) return;
    bool due = false;
    {
      absl::MutexLock lock(&mu_);
      Samples& by_stage = samples_[marks.label()];
      for (const auto& [stage, us] : marks.stages()) by_stage[stage].push_back(us);
      const StageMarks::Clock::time_point now = StageMarks::Clock::now();
      if (now - last_print_ >= period_) {
        last_print_ = now;
        due = true;
      }
    }
    if (due) print();
  }

  // One line per (class, stage): count, p50 and p99 in microseconds, stages in first-seen order.
  std::string summary() const {
    absl::MutexLock lock(&mu_);
    std::string out;
    char line[256];
    for (const auto& [label, by_stage] : samples_) {
      for (const auto& [stage, values] : by_stage) {
        std::vector<double> v = values;
        std::sort(v.begin(), v.end());
        const auto rank = [&v](double p) {
          const auto r =
              static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
          return v[std::max<std::size_t>(r, 1) - 1];
        };
        std::snprintf(line, sizeof line,
                      "stage-trace %-32s %-22s n=%-7zu p50=%9.1f us p99=%9.1f us\n", label.c_str(),
                      stage.c_str(), v.size(), rank(50), rank(99));
        out += line;
      }
    }
    return out;
  }

 private:
  // Stage names in the order they were first seen for a class.
  struct Samples : std::vector<std::pair<std::string, std::vector<double>>> {
    std::vector<double>& operator[](const char* stage) {
      for (auto& [name, v] : *this) {
        if (name == stage) return v;
      }
      return emplace_back(stage, std::vector<double>{}).second;
    }
  };

  void print() const {
    if (!enabled_) return;
    const std::string s = summary();
    std::fputs(s.c_str(), stderr);
    std::fflush(stderr);
  }

  const bool enabled_;
  const std::chrono::seconds period_;
  mutable absl::Mutex mu_;
  std::map<std::string, Samples> samples_ ABSL_GUARDED_BY(mu_);
  StageMarks::Clock::time_point last_print_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matserve::server
