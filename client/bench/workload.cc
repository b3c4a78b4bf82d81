// Parsing a --workload mix and choosing an operation per request (see workload.h).
#include "client/bench/workload.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace matserve::client::bench {

const char* OpName(Op op) {
  return op == Op::kTranspose ? "transpose" : "multiply";
}

bool Workload::has(Op op) const {
  for (const OpWeight& w : ops) {
    if (w.op == op) return true;
  }
  return false;
}

std::string Workload::name() const {
  if (ops.size() == 1) return OpName(ops.front().op);
  return absl::StrJoin(ops, ",", [](std::string* out, const OpWeight& w) {
    absl::StrAppend(out, OpName(w.op), "=", w.weight);
  });
}

Op Workload::choose(double u) const {
  double total = 0;
  for (const OpWeight& w : ops) total += w.weight;
  double edge = 0;
  for (const OpWeight& w : ops) {
    edge += w.weight / total;
    if (u < edge) return w.op;
  }
  return ops.back().op;  // u within rounding of 1
}

absl::StatusOr<Workload> parse_workload(const std::string& text) {
  Workload workload;
  workload.ops.clear();
  const std::vector<std::string> items = absl::StrSplit(text, ',', absl::SkipEmpty());
  for (const std::string& item : items) {
    const std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    OpWeight w;
    if (parts[0] == "multiply") {
      w.op = Op::kMultiply;
    } else if (parts[0] == "transpose") {
      w.op = Op::kTranspose;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--workload: '", parts[0], "' is not multiply or transpose"));
    }
    if (parts.size() == 2 &&
        (!absl::SimpleAtod(parts[1], &w.weight) || !(w.weight > 0) || !std::isfinite(w.weight))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--workload: the weight of ", parts[0], " must be a number > 0, got '", parts[1], "'"));
    }
    if (workload.has(w.op)) {
      return absl::InvalidArgumentError(absl::StrCat("--workload: ", parts[0], " given twice"));
    }
    workload.ops.push_back(w);
  }
  if (workload.ops.empty()) return absl::InvalidArgumentError("--workload: empty list");
  return workload;
}

}  // namespace matserve::client::bench
