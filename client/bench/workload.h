// The operations a run drives and how they are mixed: `--workload multiply=0.8,transpose=0.2`
// gives each operation a weight, and every timed request picks one with a seeded draw, so the
// same seed gives the same sequence per worker. Pure functions, tested without a server.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace matserve::client::bench {

enum class Op { kMultiply, kTranspose };
const char* OpName(Op op);  // "multiply", "transpose"

struct OpWeight {
  Op op = Op::kMultiply;
  double weight = 1;  // relative; the weights of a workload need not sum to 1
};

struct Workload {
  std::vector<OpWeight> ops = {{Op::kMultiply, 1}};

  bool has(Op op) const;
  // "multiply" for one operation, else "multiply=0.8,transpose=0.2" (weights as given).
  std::string name() const;
  // The operation for a uniform draw `u` in [0, 1): each op gets a share of [0, 1) in proportion
  // to its weight, in the order given.
  Op choose(double u) const;
};

// "multiply", "transpose", "multiply=0.8,transpose=0.2" (an operation without "=W" weighs 1).
// INVALID_ARGUMENT naming the bad item: unknown operation, weight not > 0, an operation twice.
absl::StatusOr<Workload> parse_workload(const std::string& text);

}  // namespace matserve::client::bench
