// matserve-bench's --workload: parsing a mix (weights, defaults, precise errors), its name, and
// the per-request choice (each operation's share of [0, 1) in proportion to its weight, so a
// seeded draw gives the mix's proportions).
#include "client/bench/workload.h"

#include <gtest/gtest.h>

#include <random>

#include "client/bench/options.h"

namespace matserve::client::bench {
namespace {

TEST(Workload, ParsesAMixAndNamesIt) {
  absl::StatusOr<Workload> w = parse_workload("multiply=0.8,transpose=0.2");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->has(Op::kMultiply));
  EXPECT_TRUE(w->has(Op::kTranspose));
  EXPECT_EQ(w->name(), "multiply=0.8,transpose=0.2");
  absl::StatusOr<Workload> t = parse_workload("transpose");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has(Op::kMultiply));
  EXPECT_EQ(t->name(), "transpose");
  EXPECT_EQ(Workload{}.name(), "multiply");
}

TEST(Workload, RejectsWhatItCannotRun) {
  EXPECT_EQ(parse_workload("add").status().message(),
            "--workload: 'add' is not multiply or transpose");
  EXPECT_EQ(parse_workload("multiply=0").status().message(),
            "--workload: the weight of multiply must be a number > 0, got '0'");
  EXPECT_EQ(parse_workload("transpose,transpose=2").status().message(),
            "--workload: transpose given twice");
  EXPECT_FALSE(parse_workload("").ok());
}

TEST(Workload, ChoiceSplitsTheUnitIntervalByWeight) {
  const Workload w = *parse_workload("multiply=3,transpose=1");
  EXPECT_EQ(w.choose(0), Op::kMultiply);
  EXPECT_EQ(w.choose(0.7499), Op::kMultiply);
  EXPECT_EQ(w.choose(0.75), Op::kTranspose);
  EXPECT_EQ(w.choose(0.9999999), Op::kTranspose);
  std::mt19937_64 rng(1);
  int transposes = 0;
  for (int i = 0; i < 10000; ++i) {
    transposes += w.choose(std::uniform_real_distribution<double>(0, 1)(rng)) == Op::kTranspose;
  }
  EXPECT_NEAR(transposes, 2500, 200);  // 2500 expected, standard deviation 43
}

TEST(Workload, OptionsRefuseTransposesWhereTheyCannotTravel) {
  EXPECT_TRUE(
      parse_options({"--workload", "multiply=1,transpose=1", "--modes", "inline,resident"}).ok());
  EXPECT_EQ(parse_options({"--workload", "transpose", "--transport", "shm"}).status().message(),
            "--workload: transposes need the inline or resident mode, not shm");
  EXPECT_FALSE(parse_options({"--workload", "transpose", "--batch", "2"}).ok());
  EXPECT_EQ(parse_options({"--window-ms", "500", "--duration", "3"}).status().message(),
            "--window-ms: a windowed run stops when stable or after --max-trials windows; not "
            "with --requests or --duration");
  EXPECT_EQ(parse_options({"--a-npy", "a.npy", "--shapes", "8"}).status().message(),
            "--shapes: not with --a-npy (the files give the shape)");
  absl::StatusOr<BenchOptions> windowed =
      parse_options({"--window-ms=250", "--stability-pct", "5", "--max-trials", "6"});
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(windowed->stability.window_ms, 250);
  EXPECT_EQ(windowed->stability.pct, 5);
  EXPECT_EQ(windowed->stability.windows, 3);
  EXPECT_EQ(windowed->stability.max_trials, 6);
  EXPECT_FALSE(windowed->duration_s.has_value());  // no default duration for windowed runs
  EXPECT_EQ(parse_options({"--stability-windows", "1.5"}).status().message(),
            "--stability-windows: expected an integer in [2, 1000], got '1.5'");
}

}  // namespace
}  // namespace matserve::client::bench
