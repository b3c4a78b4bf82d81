// The hand parser behind args.h: global options anywhere, one subcommand, per-command options,
// then a check that the inputs given make a whole request (files or --random, not both).
#include "client/cli/args.h"

#include <functional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {
namespace {

namespace v1 = ::matserve::v1;

absl::Status usage(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

Command lookup_command(std::string_view name) {
  if (name == "help") return Command::kHelp;
  if (name == "info") return Command::kInfo;
  if (name == "kernels") return Command::kKernels;
  if (name == "multiply") return Command::kMultiply;
  if (name == "transpose") return Command::kTranspose;
  if (name == "upload") return Command::kUpload;
  if (name == "download") return Command::kDownload;
  if (name == "release") return Command::kRelease;
  if (name == "resident") return Command::kResident;
  if (name == "health") return Command::kHealth;
  return Command::kNone;
}

// Walks the arguments; options take their value inline (--x=1) or from the next argument.
class Cursor {
 public:
  explicit Cursor(const std::vector<std::string>& args) : args_(args) {}
  bool done() const { return i_ >= args_.size(); }
  const std::string& Next() { return args_[i_++]; }

  absl::StatusOr<std::string> value(std::string_view name, const std::optional<std::string>& inl) {
    if (inl) return *inl;
    if (done()) return usage(absl::StrCat("option --", std::string(name), " needs a value"));
    return Next();
  }

 private:
  const std::vector<std::string>& args_;
  std::size_t i_ = 0;
};

absl::StatusOr<double> parse_double(std::string_view name, const std::string& text) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v)) {
    return usage(absl::StrCat("--", std::string(name), ": '", text, "' is not a number"));
  }
  return v;
}

absl::StatusOr<std::int64_t> parse_positive(std::string_view name, const std::string& text) {
  std::int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v <= 0) {
    return usage(absl::StrCat("--", std::string(name), ": '", text, "' is not a positive integer"));
  }
  return v;
}

absl::StatusOr<std::int64_t> parse_non_negative(std::string_view name, const std::string& text) {
  std::int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0) {
    return usage(
        absl::StrCat("--", std::string(name), ": '", text, "' is not a non-negative integer"));
  }
  return v;
}

absl::StatusOr<std::uint64_t> parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    return usage(absl::StrCat("--seed: '", text, "' is not a non-negative integer"));
  }
  return v;
}

// Wraps a StatusOr-returning parser of a value: prefixes the option name on error.
template <typename T>
absl::Status assign(std::string_view name, absl::StatusOr<T> parsed, T& out) {
  if (!parsed.ok()) {
    const std::string msg(parsed.status().message());
    if (msg.rfind("--", 0) == 0) return parsed.status();
    return usage(absl::StrCat("--", std::string(name), ": ", msg));
  }
  out = *std::move(parsed);
  return absl::OkStatus();
}

template <typename T>
absl::Status assign_opt(std::string_view name, absl::StatusOr<T> parsed, std::optional<T>& out) {
  T value{};
  if (absl::Status s = assign(name, std::move(parsed), value); !s.ok()) return s;
  out = std::move(value);
  return absl::OkStatus();
}

// One option of the current command. `flag` options take no value.
using Handler = std::function<absl::Status(const std::string& value)>;
struct OptionSpec {
  std::string_view name;
  bool flag;
  Handler handle;
};

// --verify (the server's check), --check (one computed here) and the deprecated --server-verify
// (= --verify, with a warning), which multiply and transpose share.
std::vector<OptionSpec> check_specs(bool& verify, bool& check, std::vector<std::string>& warnings) {
  return {
      {"verify", true,
       [&verify](const std::string&) {
         verify = true;
         return absl::OkStatus();
       }},
      {"check", true,
       [&check](const std::string&) {
         check = true;
         return absl::OkStatus();
       }},
      {"server-verify", true,
       [&verify, &warnings](const std::string&) {
         verify = true;
         warnings.push_back(
             "--server-verify is deprecated: --verify asks the server's check (--check computes "
             "one here)");
         return absl::OkStatus();
       }},
  };
}

std::vector<OptionSpec> with_checks(std::vector<OptionSpec> specs, bool& verify, bool& check,
                                    std::vector<std::string>& warnings) {
  for (OptionSpec& spec : check_specs(verify, check, warnings)) specs.push_back(std::move(spec));
  return specs;
}

std::vector<OptionSpec> multiply_specs(MultiplyOptions& m) {
  return {
      {"a", false,
       [&m](const std::string& v) {
         m.a = v;
         return absl::OkStatus();
       }},
      {"b", false,
       [&m](const std::string& v) {
         m.b = v;
         return absl::OkStatus();
       }},
      {"c", false,
       [&m](const std::string& v) {
         m.c = v;
         return absl::OkStatus();
       }},
      {"random", false,
       [&m](const std::string& v) -> absl::Status {
         absl::StatusOr<std::vector<std::int64_t>> d = parse_dims(v, 3);
         if (!d.ok()) return usage(absl::StrCat("--random: ", std::string(d.status().message())));
         m.random = std::array<std::int64_t, 3>{(*d)[0], (*d)[1], (*d)[2]};
         return absl::OkStatus();
       }},
      {"seed", false, [&m](const std::string& v) { return assign("seed", parse_seed(v), m.seed); }},
      {"repeat", false,
       [&m](const std::string& v) {
         return assign("repeat", parse_positive("repeat", v), m.repeat);
       }},
      {"warmup", false,
       [&m](const std::string& v) {
         return assign("warmup", parse_non_negative("warmup", v), m.warmup);
       }},
      {"dtype", false,
       [&m](const std::string& v) { return assign_opt("dtype", parse_dtype(v), m.dtype); }},
      {"layout", false,
       [&m](const std::string& v) { return assign("layout", parse_layout(v), m.layout); }},
      {"transpose-a", true,
       [&m](const std::string&) {
         m.transpose_a = true;
         return absl::OkStatus();
       }},
      {"transpose-b", true,
       [&m](const std::string&) {
         m.transpose_b = true;
         return absl::OkStatus();
       }},
      {"alpha", false,
       [&m](const std::string& v) {
         return assign_opt("alpha", parse_double("alpha", v), m.alpha);
       }},
      {"beta", false,
       [&m](const std::string& v) { return assign_opt("beta", parse_double("beta", v), m.beta); }},
      {"variant", false,
       [&m](const std::string& v) {
         m.variant = v;
         return absl::OkStatus();
       }},
      {"compute", false,
       [&m](const std::string& v) { return assign("compute", parse_compute_mode(v), m.compute); }},
      {"output-dtype", false,
       [&m](const std::string& v) {
         return assign_opt("output-dtype", parse_dtype(v), m.output_dtype);
       }},
      {"output-layout", false,
       [&m](const std::string& v) {
         return assign_opt("output-layout", parse_layout(v), m.output_layout);
       }},
      {"tolerance", false,
       [&m](const std::string& v) {
         return assign_opt("tolerance", parse_double("tolerance", v), m.tolerance);
       }},
      {"out", false,
       [&m](const std::string& v) {
         m.out = v;
         return absl::OkStatus();
       }},
      {"a-handle", false,
       [&m](const std::string& v) {
         m.a_handle = v;
         return absl::OkStatus();
       }},
      {"b-handle", false,
       [&m](const std::string& v) {
         m.b_handle = v;
         return absl::OkStatus();
       }},
      {"c-handle", false,
       [&m](const std::string& v) {
         m.c_handle = v;
         return absl::OkStatus();
       }},
      {"keep-result", true,
       [&m](const std::string&) {
         m.keep_result = true;
         return absl::OkStatus();
       }},
      {"shm", true,
       [&m](const std::string&) {
         m.shm = true;
         return absl::OkStatus();
       }},
      {"split", false,
       [&m](const std::string& v) {
         if (v == "default") {
           m.split = v1::SPLIT_DEFAULT;
         } else if (v == "never") {
           m.split = v1::SPLIT_NEVER;
         } else if (v == "always") {
           m.split = v1::SPLIT_ALWAYS;
         } else {
           return absl::InvalidArgumentError(
               absl::StrCat("--split: '", v, "' is not default, never or always"));
         }
         return absl::OkStatus();
       }},
      {"batch", false,
       [&m](const std::string& v) { return assign("batch", parse_positive("batch", v), m.batch); }},
  };
}

std::vector<OptionSpec> transpose_specs(TransposeOptions& t) {
  return {
      {"a", false,
       [&t](const std::string& v) {
         t.a = v;
         return absl::OkStatus();
       }},
      {"random", false,
       [&t](const std::string& v) -> absl::Status {
         absl::StatusOr<std::vector<std::int64_t>> d = parse_dims(v, 2);
         if (!d.ok()) return usage(absl::StrCat("--random: ", std::string(d.status().message())));
         t.random = std::array<std::int64_t, 2>{(*d)[0], (*d)[1]};
         return absl::OkStatus();
       }},
      {"seed", false, [&t](const std::string& v) { return assign("seed", parse_seed(v), t.seed); }},
      {"repeat", false,
       [&t](const std::string& v) {
         return assign("repeat", parse_positive("repeat", v), t.repeat);
       }},
      {"warmup", false,
       [&t](const std::string& v) {
         return assign("warmup", parse_non_negative("warmup", v), t.warmup);
       }},
      {"dtype", false,
       [&t](const std::string& v) { return assign_opt("dtype", parse_dtype(v), t.dtype); }},
      {"layout", false,
       [&t](const std::string& v) { return assign("layout", parse_layout(v), t.layout); }},
      {"scale", false,
       [&t](const std::string& v) {
         return assign_opt("scale", parse_double("scale", v), t.scale);
       }},
      {"variant", false,
       [&t](const std::string& v) {
         t.variant = v;
         return absl::OkStatus();
       }},
      {"tolerance", false,
       [&t](const std::string& v) {
         return assign_opt("tolerance", parse_double("tolerance", v), t.tolerance);
       }},
      {"out", false,
       [&t](const std::string& v) {
         t.out = v;
         return absl::OkStatus();
       }},
      {"a-handle", false,
       [&t](const std::string& v) {
         t.a_handle = v;
         return absl::OkStatus();
       }},
      {"keep-result", true,
       [&t](const std::string&) {
         t.keep_result = true;
         return absl::OkStatus();
       }},
      {"in-place", true,
       [&t](const std::string&) {
         t.in_place = true;
         return absl::OkStatus();
       }},
      {"shm", true,
       [&t](const std::string&) {
         t.shm = true;
         return absl::OkStatus();
       }},
  };
}

absl::StatusOr<std::int64_t> parse_chunk_mb(const std::string& v) {
  absl::StatusOr<std::int64_t> mb = parse_positive("chunk-mb", v);
  if (!mb.ok()) return mb.status();
  if (*mb > 1024) return usage("--chunk-mb: at most 1024");
  return *mb << 20;
}

std::vector<OptionSpec> upload_specs(UploadOptions& u) {
  return {
      {"a", false,
       [&u](const std::string& v) {
         u.a = v;
         return absl::OkStatus();
       }},
      {"random", false,
       [&u](const std::string& v) -> absl::Status {
         absl::StatusOr<std::vector<std::int64_t>> d = parse_dims(v, 2);
         if (!d.ok()) return usage(absl::StrCat("--random: ", std::string(d.status().message())));
         u.random = std::array<std::int64_t, 2>{(*d)[0], (*d)[1]};
         return absl::OkStatus();
       }},
      {"seed", false, [&u](const std::string& v) { return assign("seed", parse_seed(v), u.seed); }},
      {"dtype", false,
       [&u](const std::string& v) { return assign_opt("dtype", parse_dtype(v), u.dtype); }},
      {"layout", false,
       [&u](const std::string& v) { return assign("layout", parse_layout(v), u.layout); }},
      {"chunk-mb", false,
       [&u](const std::string& v) { return assign("chunk-mb", parse_chunk_mb(v), u.chunk_bytes); }},
      {"colocate-with", false,
       [&u](const std::string& v) {
         u.colocate_with = v;
         return absl::OkStatus();
       }},
  };
}

std::vector<OptionSpec> handle_specs(HandleOptions& h, bool download) {
  std::vector<OptionSpec> specs = {
      {"handle", false,
       [&h](const std::string& v) {
         h.handle = v;
         return absl::OkStatus();
       }},
  };
  if (download) {
    specs.push_back({"out", false, [&h](const std::string& v) {
                       h.out = v;
                       return absl::OkStatus();
                     }});
    specs.push_back({"chunk-mb", false, [&h](const std::string& v) {
                       return assign("chunk-mb", parse_chunk_mb(v), h.chunk_bytes);
                     }});
  }
  return specs;
}

std::vector<OptionSpec> health_specs(HealthOptions& h) {
  return {{"service", false, [&h](const std::string& v) {
             h.service = v;
             return absl::OkStatus();
           }}};
}

std::vector<OptionSpec> kernels_specs(KernelsOptions& k) {
  return {
      {"op", false,
       [&k](const std::string& v) -> absl::Status {
         if (v == "gemm") {
           k.op = v1::GEMM;
         } else if (v == "transpose") {
           k.op = v1::TRANSPOSE;
         } else {
           return usage(
               absl::StrCat("--op: unknown operation '", v, "' (expected gemm or transpose)"));
         }
         return absl::OkStatus();
       }},
  };
}

absl::Status set_path(const std::string& value, std::string& out) {
  if (value.empty()) return usage("an empty file name");
  out = value;
  return absl::OkStatus();
}

std::vector<OptionSpec> global_specs(GlobalOptions& g, bool& help) {
  return {
      {"target", false,
       [&g](const std::string& v) {
         g.target = v;
         return absl::OkStatus();
       }},
      {"json", true,
       [&g](const std::string&) {
         g.json = true;
         return absl::OkStatus();
       }},
      {"deadline-ms", false,
       [&g](const std::string& v) {
         return assign("deadline-ms", parse_positive("deadline-ms", v), g.deadline_ms);
       }},
      {"max-message-mb", false,
       [&g](const std::string& v) -> absl::Status {
         std::int64_t mb = 0;
         if (absl::Status s = assign("max-message-mb", parse_positive("max-message-mb", v), mb);
             !s.ok()) {
           return s;
         }
         if (mb > 2047) return usage("--max-message-mb: at most 2047 (protobuf's 2 GiB limit)");
         g.max_message_bytes = mb << 20;
         return absl::OkStatus();
       }},
      {"stripes", false,
       [&g](const std::string& v) -> absl::Status {
         std::int64_t n = 0;
         if (absl::Status s = assign("stripes", parse_non_negative("stripes", v), n); !s.ok())
           return s;
         if (n > 256) return usage("--stripes: at most 256");
         g.stripes = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"stripe-threshold-bytes", false,
       [&g](const std::string& v) {
         return assign("stripe-threshold-bytes", parse_non_negative("stripe-threshold-bytes", v),
                       g.stripe_threshold_bytes);
       }},
      {"stripe-chunk-bytes", false,
       [&g](const std::string& v) {
         return assign("stripe-chunk-bytes", parse_positive("stripe-chunk-bytes", v),
                       g.stripe_chunk_bytes);
       }},
      {"token-file", false,
       [&g](const std::string& v) { return set_path(v, g.security.token_file); }},
      {"tls-ca", false, [&g](const std::string& v) { return set_path(v, g.security.tls_ca); }},
      {"tls-cert", false, [&g](const std::string& v) { return set_path(v, g.security.tls_cert); }},
      {"tls-key", false, [&g](const std::string& v) { return set_path(v, g.security.tls_key); }},
      {"tls-server-name", false,
       [&g](const std::string& v) {
         g.security.tls_server_name = v;
         return absl::OkStatus();
       }},
      {"help", true,
       [&help](const std::string&) {
         help = true;
         return absl::OkStatus();
       }},
  };
}

const OptionSpec* Find(const std::vector<OptionSpec>& specs, std::string_view name) {
  for (const OptionSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

absl::Status check_multiply(const MultiplyOptions& m) {
  const bool files = !m.a.empty() || !m.b.empty();
  const bool handles = !m.a_handle.empty() || !m.b_handle.empty() || !m.c_handle.empty();
  if (m.random && files) return usage("multiply: give either --a/--b or --random, not both");
  if (m.random && handles) return usage("multiply: --random cannot be combined with handles");
  if (m.random && !m.c.empty()) {
    return usage("multiply: --c needs --a/--b (with --random, C is generated when --beta != 0)");
  }
  if (!m.a.empty() && !m.a_handle.empty())
    return usage("multiply: give --a or --a-handle, not both");
  if (!m.b.empty() && !m.b_handle.empty())
    return usage("multiply: give --b or --b-handle, not both");
  if (!m.c.empty() && !m.c_handle.empty())
    return usage("multiply: give --c or --c-handle, not both");
  if (!m.random) {
    const bool has_a = !m.a.empty() || !m.a_handle.empty();
    const bool has_b = !m.b.empty() || !m.b_handle.empty();
    if (!has_a && !has_b) return usage("multiply: give --a and --b, or --random MxNxK");
    if (!has_a) return usage("multiply: --b given without --a (or --a-handle)");
    if (!has_b) return usage("multiply: --a given without --b (or --b-handle)");
  }
  if (m.check && handles) {
    return usage(
        "multiply: --check needs the operands' data; with handles use --verify (the server's "
        "check)");
  }
  if (m.keep_result && m.warmup + m.repeat > 1) {
    return usage(
        "multiply: --keep-result makes one resident result per call: no --repeat/--warmup");
  }
  if (m.keep_result && (m.check || !m.out.empty())) {
    return usage(
        "multiply: --keep-result leaves C on the server: no --check or --out "
        "(use --verify, then `download`)");
  }
  if (m.shm && (handles || m.keep_result)) {
    return usage(
        "multiply: --shm moves data through shared memory: not with handles or "
        "--keep-result");
  }
  if (m.batch > 1) {
    if (!m.random)
      return usage("multiply: --batch needs --random MxNxK (N products of random data)");
    if (m.check || !m.out.empty() || m.keep_result || m.shm) {
      return usage(
          "multiply: --batch is a timing run: no --check, --out, --keep-result or --shm (use "
          "--verify: the server checks every product)");
    }
  }
  if (m.variant.empty()) return usage("multiply: --variant must not be empty (use auto)");
  if (m.tolerance && !m.verify && !m.check) {
    return usage("multiply: --tolerance needs --verify or --check");
  }
  return absl::OkStatus();
}

absl::Status check_transpose(const TransposeOptions& t) {
  const int sources = (t.random ? 1 : 0) + (t.a.empty() ? 0 : 1) + (t.a_handle.empty() ? 0 : 1);
  if (sources > 1) return usage("transpose: give one of --a, --a-handle or --random, not several");
  if (sources == 0) return usage("transpose: give --a, --a-handle or --random RxC");
  if (t.in_place && t.a_handle.empty()) return usage("transpose: --in-place needs --a-handle");
  if (t.check && !t.a_handle.empty()) {
    return usage("transpose: --check needs A's data; with --a-handle use --verify");
  }
  if ((t.keep_result || t.in_place) && t.warmup + t.repeat > 1) {
    return usage(
        "transpose: --keep-result/--in-place change server state per call: no "
        "--repeat/--warmup");
  }
  if ((t.keep_result || t.in_place) && (t.check || !t.out.empty())) {
    return usage("transpose: --keep-result/--in-place leave B on the server: no --check or --out");
  }
  if (t.shm && (!t.a_handle.empty() || t.keep_result || t.in_place)) {
    return usage(
        "transpose: --shm moves data through shared memory: not with --a-handle, "
        "--keep-result or --in-place");
  }
  if (t.variant.empty()) return usage("transpose: --variant must not be empty (use auto)");
  if (t.tolerance && !t.verify && !t.check) {
    return usage("transpose: --tolerance needs --verify or --check");
  }
  return absl::OkStatus();
}

}  // namespace

const char* CommandName(Command command) {
  switch (command) {
    case Command::kNone: return "";
    case Command::kHelp: return "help";
    case Command::kInfo: return "info";
    case Command::kKernels: return "kernels";
    case Command::kMultiply: return "multiply";
    case Command::kTranspose: return "transpose";
    case Command::kUpload: return "upload";
    case Command::kDownload: return "download";
    case Command::kRelease: return "release";
    case Command::kResident: return "resident";
    case Command::kHealth: return "health";
  }
  return "";
}

absl::StatusOr<std::vector<std::int64_t>> parse_dims(const std::string& spec, int count) {
  const std::vector<std::string> parts = absl::StrSplit(spec, 'x');
  const char* form = count == 3 ? "MxNxK" : "RxC";
  if (static_cast<int>(parts.size()) != count) {
    return usage(absl::StrCat("'", spec, "' is not of the form ", form));
  }
  std::vector<std::int64_t> dims;
  for (const std::string& p : parts) {
    std::int64_t v = 0;
    if (p.empty() || !absl::SimpleAtoi(p, &v) || v <= 0) {
      return usage(
          absl::StrCat("'", spec, "': '", p, "' is not a positive integer (form ", form, ")"));
    }
    if (v > (std::int64_t{1} << 31)) {
      return usage(absl::StrCat("'", spec, "': dimension ", v, " is too large"));
    }
    dims.push_back(v);
  }
  return dims;
}

absl::StatusOr<ParsedArgs> parse_args(const std::vector<std::string>& args) {
  ParsedArgs out;
  const std::vector<OptionSpec> global = global_specs(out.global, out.help);
  const std::vector<OptionSpec> kernels = kernels_specs(out.kernels);
  const std::vector<OptionSpec> multiply = with_checks(
      multiply_specs(out.multiply), out.multiply.verify, out.multiply.check, out.warnings);
  const std::vector<OptionSpec> transpose = with_checks(
      transpose_specs(out.transpose), out.transpose.verify, out.transpose.check, out.warnings);
  const std::vector<OptionSpec> upload = upload_specs(out.upload);
  const std::vector<OptionSpec> download = handle_specs(out.handle, true);
  const std::vector<OptionSpec> release = handle_specs(out.handle, false);
  const std::vector<OptionSpec> health = health_specs(out.health);
  Cursor cursor(args);
  while (!cursor.done()) {
    const std::string arg = cursor.Next();
    if (arg == "-h") {
      out.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      if (!arg.empty() && arg[0] == '-' && arg != "-") {
        return usage(absl::StrCat("unknown option '", arg, "' (options are spelled --name)"));
      }
      if (out.command == Command::kNone) {
        out.command = lookup_command(arg);
        if (out.command == Command::kNone) {
          return usage(absl::StrCat("unknown command '", arg,
                                    "' (expected info, kernels, multiply, transpose, upload, "
                                    "download, release, resident, health or help)"));
        }
        continue;
      }
      if (out.command == Command::kHelp && out.help_topic == Command::kNone) {
        out.help_topic = lookup_command(arg);
        if (out.help_topic == Command::kNone || out.help_topic == Command::kHelp) {
          return usage(absl::StrCat("help: unknown command '", arg, "'"));
        }
        continue;
      }
      return usage(absl::StrCat(CommandName(out.command), ": unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const std::size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    const OptionSpec* spec = Find(global, name);
    if (spec == nullptr) {
      switch (out.command) {
        case Command::kKernels: spec = Find(kernels, name); break;
        case Command::kMultiply: spec = Find(multiply, name); break;
        case Command::kTranspose: spec = Find(transpose, name); break;
        case Command::kUpload: spec = Find(upload, name); break;
        case Command::kDownload: spec = Find(download, name); break;
        case Command::kRelease: spec = Find(release, name); break;
        case Command::kHealth: spec = Find(health, name); break;
        default: break;
      }
    }
    if (spec == nullptr) {
      if (out.command == Command::kNone || out.command == Command::kHelp) {
        return usage(absl::StrCat("unknown option '--", name, "'"));
      }
      return usage(absl::StrCat(CommandName(out.command), ": unknown option '--", name, "'"));
    }
    if (spec->flag) {
      if (inline_value) return usage(absl::StrCat("option --", name, " takes no value"));
      if (absl::Status s = spec->handle(""); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<std::string> value = cursor.value(name, inline_value);
    if (!value.ok()) return value.status();
    if (absl::Status s = spec->handle(*value); !s.ok()) return s;
  }
  if (out.command == Command::kHelp) {
    out.help = true;
    out.command = out.help_topic;
    return out;
  }
  if (out.help) return out;
  const GlobalOptions& g = out.global;
  if (absl::Status s = check_security_files(g.security); !s.ok())
    return usage(std::string(s.message()));
  switch (out.command) {
    case Command::kNone: return usage("no command given (try: matserve-cli --help)");
    case Command::kMultiply:
      if (absl::Status s = check_multiply(out.multiply); !s.ok()) return s;
      break;
    case Command::kTranspose:
      if (absl::Status s = check_transpose(out.transpose); !s.ok()) return s;
      break;
    case Command::kUpload:
      if (out.upload.random && !out.upload.a.empty()) {
        return usage("upload: give either --a or --random, not both");
      }
      if (!out.upload.random && out.upload.a.empty())
        return usage("upload: give --a or --random RxC");
      break;
    case Command::kDownload:
    case Command::kRelease:
      if (out.handle.handle.empty()) {
        return usage(absl::StrCat(CommandName(out.command), ": give --handle H"));
      }
      break;
    default: break;
  }
  return out;
}

}  // namespace matserve::client::cli
