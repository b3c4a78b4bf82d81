// matserve-cli's argument parser: accepted spellings, defaults, and the bad inputs it must refuse
// with a message naming the argument.
#include "client/cli/args.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matserve::client::cli {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ParsedArgs> parse(std::vector<std::string> args) {
  return parse_args(args);
}

std::string error(std::vector<std::string> args) {
  absl::StatusOr<ParsedArgs> p = parse_args(args);
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(CliArgs, ParsesAFullMultiply) {
  absl::StatusOr<ParsedArgs> p = parse(
      {"--target",        "gpu1:7000", "multiply",      "--random", "128x64x32",      "--seed=9",
       "--dtype",         "bf16",      "--transpose-a", "--alpha",  "-2.5",           "--beta=0.5",
       "--variant",       "tc_wmma",   "--compute",     "fp32",     "--output-dtype", "fp32",
       "--output-layout", "col",       "--verify",      "--check",  "--tolerance",    "1e-3",
       "--out",           "c.npy",     "--json"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->command, Command::kMultiply);
  EXPECT_EQ(p->global.target, "gpu1:7000");
  EXPECT_TRUE(p->global.json);
  const MultiplyOptions& m = p->multiply;
  ASSERT_TRUE(m.random.has_value());
  EXPECT_EQ((*m.random)[0], 128);
  EXPECT_EQ((*m.random)[2], 32);
  EXPECT_EQ(m.seed, 9u);
  EXPECT_EQ(m.dtype, kernels::DType::kBF16);
  EXPECT_TRUE(m.transpose_a);
  EXPECT_FALSE(m.transpose_b);
  EXPECT_EQ(m.alpha, -2.5);
  EXPECT_EQ(m.beta, 0.5);
  EXPECT_EQ(m.variant, "tc_wmma");
  EXPECT_EQ(m.compute, matserve::v1::COMPUTE_FP32);
  EXPECT_EQ(m.output_dtype, kernels::DType::kF32);
  EXPECT_EQ(m.output_layout, kernels::Layout::kColMajor);
  EXPECT_FALSE(parse({"multiply", "--random", "1x1x1"})->multiply.output_layout.has_value());
  EXPECT_TRUE(m.verify);
  EXPECT_TRUE(m.check);
  EXPECT_EQ(m.tolerance, 1e-3);
  EXPECT_EQ(m.out, "c.npy");
  EXPECT_TRUE(p->warnings.empty());
}

// --verify is the server's check (request.verify), --check the client's; --server-verify is the
// deprecated name of --verify: it still parses, with a warning.
TEST(CliArgs, VerifyIsTheServersCheckAndCheckTheClients) {
  for (const char* command : {"multiply", "transpose"}) {
    const std::string random = std::string(command) == "multiply" ? "2x2x2" : "2x2";
    absl::StatusOr<ParsedArgs> v = parse({command, "--random", random, "--verify"});
    ASSERT_TRUE(v.ok()) << v.status();
    const bool is_multiply = v->command == Command::kMultiply;
    EXPECT_TRUE(is_multiply ? v->multiply.verify : v->transpose.verify) << command;
    EXPECT_FALSE(is_multiply ? v->multiply.check : v->transpose.check) << command;
    absl::StatusOr<ParsedArgs> c = parse({command, "--random", random, "--check"});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(is_multiply ? c->multiply.verify : c->transpose.verify) << command;
    EXPECT_TRUE(is_multiply ? c->multiply.check : c->transpose.check) << command;
    absl::StatusOr<ParsedArgs> old = parse({command, "--random", random, "--server-verify"});
    ASSERT_TRUE(old.ok()) << old.status();
    EXPECT_TRUE(is_multiply ? old->multiply.verify : old->transpose.verify) << command;
    ASSERT_EQ(old->warnings.size(), 1u) << command;
    EXPECT_THAT(old->warnings[0], HasSubstr("--server-verify is deprecated"));
    EXPECT_TRUE(v->warnings.empty() && c->warnings.empty()) << command;
  }
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--tolerance", "1"}),
              HasSubstr("--tolerance needs --verify or --check"));
}

TEST(CliArgs, Defaults) {
  absl::StatusOr<ParsedArgs> p = parse({"multiply", "--a", "a.npy", "--b", "b.npy"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->global.target, "localhost:50051");
  EXPECT_EQ(p->global.max_message_bytes, std::int64_t{1} << 30);
  EXPECT_FALSE(p->global.json);
  EXPECT_EQ(p->multiply.variant, "auto");
  EXPECT_FALSE(p->multiply.alpha.has_value());
  EXPECT_FALSE(p->multiply.dtype.has_value());
  EXPECT_EQ(p->multiply.compute, matserve::v1::COMPUTE_DEFAULT);
}

TEST(CliArgs, KernelsFilterAndTranspose) {
  absl::StatusOr<ParsedArgs> k = parse({"kernels", "--op", "transpose"});
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->kernels.op, matserve::v1::TRANSPOSE);
  absl::StatusOr<ParsedArgs> t =
      parse({"transpose", "--random", "3x5", "--scale", "2", "--layout", "col"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t->transpose.random)[1], 5);
  EXPECT_EQ(t->transpose.scale, 2.0);
  EXPECT_EQ(t->transpose.layout, kernels::Layout::kColMajor);
}

TEST(CliArgs, HelpForms) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"help", "multiply"}, {"multiply", "--help"}, {"multiply", "-h"}}) {
    absl::StatusOr<ParsedArgs> p = parse(args);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->help);
    EXPECT_EQ(p->command, Command::kMultiply);
  }
  absl::StatusOr<ParsedArgs> general = parse({"--help"});
  ASSERT_TRUE(general.ok());
  EXPECT_TRUE(general->help);
  EXPECT_EQ(general->command, Command::kNone);
  // --help skips the checks that a real run needs (no inputs given here).
  EXPECT_TRUE(parse({"transpose", "--help"}).ok());
}

TEST(CliArgs, RejectsUnknownCommand) {
  EXPECT_THAT(error({"multiplyy"}), HasSubstr("unknown command 'multiplyy'"));
  EXPECT_THAT(error({"help", "frob"}), HasSubstr("help: unknown command 'frob'"));
  EXPECT_THAT(error({}), HasSubstr("no command given"));
}

TEST(CliArgs, RejectsBadRandomSpecs) {
  for (const char* spec : {"4x5", "4x5x6x7", "4xx6", "4x-5x6", "0x5x6", "ax5x6", "4x5x6.0", ""}) {
    EXPECT_THAT(error({"multiply", "--random", spec}), HasSubstr("--random")) << spec;
  }
  EXPECT_THAT(error({"multiply", "--random", "4x5"}), HasSubstr("'4x5' is not of the form MxNxK"));
  EXPECT_THAT(error({"transpose", "--random", "4x0"}), HasSubstr("'0' is not a positive integer"));
  EXPECT_THAT(error({"transpose", "--random", "99999999999x2"}), HasSubstr("too large"));
}

TEST(CliArgs, RejectsUnknownDtypesAndModes) {
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--dtype", "fp8"}),
              HasSubstr("--dtype: unknown dtype 'fp8'"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--output-dtype", "int8"}),
              HasSubstr("--output-dtype: unknown dtype 'int8'"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--compute", "fp4"}),
              HasSubstr("--compute: unknown compute mode 'fp4'"));
  EXPECT_THAT(error({"transpose", "--random", "2x2", "--layout", "diag"}),
              HasSubstr("--layout: unknown layout 'diag'"));
  EXPECT_THAT(error({"kernels", "--op", "conv"}), HasSubstr("--op: unknown operation 'conv'"));
}

TEST(CliArgs, SplitAsksTheServerToSpreadOneProduct) {
  EXPECT_EQ(parse({"multiply", "--random", "2x2x2"})->multiply.split, v1::SPLIT_DEFAULT);
  EXPECT_EQ(parse({"multiply", "--random", "2x2x2", "--split", "always"})->multiply.split,
            v1::SPLIT_ALWAYS);
  EXPECT_EQ(parse({"multiply", "--random", "2x2x2", "--split", "never"})->multiply.split,
            v1::SPLIT_NEVER);
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--split", "sometimes"}),
              HasSubstr("--split: 'sometimes' is not default, never or always"));
}

TEST(CliArgs, RejectsBadOptions) {
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--frob"}),
              HasSubstr("multiply: unknown option '--frob'"));
  // Options of another command are unknown here.
  EXPECT_THAT(error({"transpose", "--random", "2x2", "--alpha", "1"}),
              HasSubstr("transpose: unknown option '--alpha'"));
  EXPECT_THAT(error({"multiply", "--random"}), HasSubstr("option --random needs a value"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--verify=yes"}),
              HasSubstr("option --verify takes no value"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--alpha", "two"}),
              HasSubstr("--alpha: 'two' is not a number"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--seed", "-1"}), HasSubstr("--seed"));
  EXPECT_THAT(error({"--deadline-ms", "0", "info"}), HasSubstr("--deadline-ms"));
  EXPECT_THAT(error({"--max-message-mb", "4096", "info"}), HasSubstr("at most 2047"));
  EXPECT_THAT(error({"info", "extra"}), HasSubstr("info: unexpected argument 'extra'"));
  EXPECT_THAT(error({"-x", "info"}), HasSubstr("unknown option '-x'"));
}

TEST(CliArgs, RepeatAndWarmup) {
  absl::StatusOr<ParsedArgs> p =
      parse({"multiply", "--random", "2x2x2", "--repeat", "10", "--warmup", "3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->multiply.repeat, 10);
  EXPECT_EQ(p->multiply.warmup, 3);
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--repeat", "0"}),
              HasSubstr("--repeat: '0' is not a positive integer"));
  EXPECT_THAT(error({"transpose", "--random", "2x2", "--warmup", "-1"}),
              HasSubstr("--warmup: '-1' is not a non-negative integer"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--keep-result", "--repeat", "2"}),
              HasSubstr("no --repeat/--warmup"));
}

TEST(CliArgs, RejectsIncompleteOrConflictingInputs) {
  EXPECT_THAT(error({"multiply"}), HasSubstr("give --a and --b, or --random"));
  EXPECT_THAT(error({"multiply", "--a", "a.npy"}), HasSubstr("--a given without --b"));
  EXPECT_THAT(error({"multiply", "--a", "a.npy", "--b", "b.npy", "--random", "2x2x2"}),
              HasSubstr("not both"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--c", "c.npy"}), HasSubstr("--c needs"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--tolerance", "1"}),
              HasSubstr("--tolerance needs --verify"));
  EXPECT_THAT(error({"transpose"}), HasSubstr("give --a, --a-handle or --random"));
  EXPECT_THAT(error({"transpose", "--a", "x.npy", "--random", "2x2"}), HasSubstr("not several"));
}

TEST(CliArgs, BatchOfRandomProducts) {
  absl::StatusOr<ParsedArgs> p =
      parse({"multiply", "--random", "8x8x8", "--batch", "16", "--verify", "--repeat", "3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->multiply.batch, 16);
  EXPECT_EQ(parse({"multiply", "--random", "2x2x2"})->multiply.batch, 1);
  EXPECT_EQ(parse({"multiply", "--random", "2x2x2", "--batch=3"})->multiply.batch, 3);
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--batch", "0"}),
              HasSubstr("--batch: '0' is not a positive integer"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--batch", "many"}),
              HasSubstr("--batch: 'many' is not a positive integer"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--batch"}),
              HasSubstr("option --batch needs a value"));
  EXPECT_THAT(error({"multiply", "--a", "a.npy", "--b", "b.npy", "--batch", "2"}),
              HasSubstr("multiply: --batch needs --random MxNxK"));
  for (std::vector<std::string> extra :
       {std::vector<std::string>{"--check"}, {"--keep-result"}, {"--shm"}, {"--out", "c.npy"}}) {
    std::vector<std::string> args = {"multiply", "--random", "2x2x2", "--batch", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_THAT(error(args), HasSubstr("multiply: --batch is a timing run")) << extra[0];
  }
  // --batch 1 is a plain multiply: nothing refused.
  EXPECT_TRUE(parse({"multiply", "--random", "2x2x2", "--batch", "1", "--check"}).ok());
  EXPECT_THAT(error({"transpose", "--random", "2x2", "--batch", "2"}),
              HasSubstr("transpose: unknown option '--batch'"));
}

TEST(CliArgs, ResidentOptions) {
  absl::StatusOr<ParsedArgs> m = parse({"multiply", "--a-handle", "h1", "--b", "b.npy",
                                        "--c-handle", "h3", "--beta", "1", "--keep-result"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->multiply.a_handle, "h1");
  EXPECT_EQ(m->multiply.c_handle, "h3");
  EXPECT_TRUE(m->multiply.keep_result);
  absl::StatusOr<ParsedArgs> t = parse({"transpose", "--a-handle", "h", "--in-place"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->transpose.in_place);
  absl::StatusOr<ParsedArgs> u = parse({"upload", "--random", "4x5", "--chunk-mb", "2"});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->upload.chunk_bytes, 2 << 20);
  absl::StatusOr<ParsedArgs> d = parse({"download", "--handle", "h", "--out", "x.npy"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->command, Command::kDownload);
  EXPECT_EQ(d->handle.out, "x.npy");
  EXPECT_TRUE(parse({"resident"}).ok());
  EXPECT_TRUE(parse({"release", "--handle", "h"}).ok());
}

TEST(CliArgs, RejectsBadResidentCombinations) {
  EXPECT_THAT(error({"multiply", "--a", "a.npy", "--a-handle", "h", "--b", "b.npy"}),
              HasSubstr("--a or --a-handle, not both"));
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--a-handle", "h"}),
              HasSubstr("--random cannot be combined with handles"));
  EXPECT_THAT(error({"multiply", "--a-handle", "h", "--b-handle", "g", "--check"}),
              HasSubstr("with handles use --verify"));
  EXPECT_TRUE(parse({"multiply", "--a-handle", "h", "--b-handle", "g", "--verify"}).ok());
  EXPECT_THAT(error({"multiply", "--random", "2x2x2", "--keep-result", "--out", "c.npy"}),
              HasSubstr("--keep-result leaves C on the server"));
  EXPECT_THAT(error({"transpose", "--a", "a.npy", "--in-place"}),
              HasSubstr("--in-place needs --a-handle"));
  EXPECT_THAT(error({"transpose", "--a-handle", "h", "--check"}), HasSubstr("use --verify"));
  EXPECT_THAT(error({"download"}), HasSubstr("download: give --handle H"));
  EXPECT_THAT(error({"release", "--handle", "h", "--out", "x"}),
              HasSubstr("release: unknown option '--out'"));
  EXPECT_THAT(error({"upload"}), HasSubstr("upload: give --a or --random"));
  EXPECT_THAT(error({"upload", "--random", "2x2", "--chunk-mb", "0"}), HasSubstr("--chunk-mb"));
}

}  // namespace
}  // namespace matserve::client::cli
