// Parsing matserve-bench's options (see options.h); "--name value" and "--name=value" both work.
#include "client/bench/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace matserve::client::bench {

std::string Shape::name() const {
  return absl::StrCat(m, "x", n, "x", k);
}

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kInline: return "inline";
    case Mode::kResident: return "resident";
    case Mode::kPing: return "ping";
    case Mode::kEcho: return "echo";
    case Mode::kShm: return "shm";
    case Mode::kCudaIpc: return "cuda-ipc";
    case Mode::kStriped: return "striped";
  }
  return "?";
}

bool IsFloor(Mode mode) {
  return mode == Mode::kPing || mode == Mode::kEcho;
}

namespace {

absl::Status bad(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

absl::StatusOr<std::int64_t> parse_int(const std::string& name, const std::string& text,
                                       std::int64_t min_value) {
  std::int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < min_value) {
    return bad(absl::StrCat(name, ": expected an integer >= ", min_value, ", got '", text, "'"));
  }
  return v;
}

std::vector<std::string> split_list(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

// The modes a comma list names, each through `names` (name, mode); `flag` and `expected` for the
// message when one is not there.
absl::StatusOr<std::vector<Mode>> parse_mode_list(
    const std::string& flag, const std::string& text,
    std::initializer_list<std::pair<std::string_view, Mode>> names, const char* expected) {
  std::vector<Mode> modes;
  for (const std::string& item : split_list(text)) {
    const auto* it =
        std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == item; });
    if (it == names.end()) return bad(absl::StrCat(flag, ": '", item, "' is not ", expected));
    modes.push_back(it->second);
  }
  if (modes.empty()) return bad(absl::StrCat(flag, ": empty list"));
  return modes;
}

}  // namespace

absl::StatusOr<std::vector<int>> parse_concurrency(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    if (parts.size() == 1) {
      auto v = parse_int("--concurrency", parts[0], 1);
      if (!v.ok()) return v.status();
      out.push_back(static_cast<int>(*v));
      continue;
    }
    if (parts.size() != 3 || parts[2].size() < 2 || (parts[2][0] != 'x' && parts[2][0] != '+')) {
      return bad(absl::StrCat("--concurrency: '", item, "' is not N, LO:HI:xF or LO:HI:+D"));
    }
    auto lo = parse_int("--concurrency", parts[0], 1);
    auto hi = parse_int("--concurrency", parts[1], 1);
    auto step = parse_int("--concurrency", parts[2].substr(1), parts[2][0] == 'x' ? 2 : 1);
    if (!lo.ok()) return lo.status();
    if (!hi.ok()) return hi.status();
    if (!step.ok()) return step.status();
    if (*hi < *lo || *hi > 100000)
      return bad(absl::StrCat("--concurrency: bad range '", item, "'"));
    for (std::int64_t c = *lo; c <= *hi; c = parts[2][0] == 'x' ? c * *step : c + *step) {
      out.push_back(static_cast<int>(c));
    }
  }
  if (out.empty()) return bad("--concurrency: empty list");
  return out;
}

absl::StatusOr<std::vector<Shape>> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  for (const std::string& item : split_list(text)) {
    std::vector<std::string> parts = absl::StrSplit(item, 'x');
    if (parts.size() != 1 && parts.size() != 3) {
      return bad(absl::StrCat("--shapes: '", item, "' is not MxNxK or N"));
    }
    std::vector<std::int64_t> dims;
    for (const std::string& p : parts) {
      auto v = parse_int("--shapes", p, 1);
      if (!v.ok()) return v.status();
      dims.push_back(*v);
    }
    out.push_back(dims.size() == 1 ? Shape{dims[0], dims[0], dims[0]}
                                   : Shape{dims[0], dims[1], dims[2]});
  }
  if (out.empty()) return bad("--shapes: empty list");
  return out;
}

absl::StatusOr<BenchOptions> parse_options(const std::vector<std::string>& args) {
  BenchOptions o;
  static const std::set<std::string> kFlags = {"--help", "-h", "--no-progress"};
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (const auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (!kFlags.count(name)) {
      if (i + 1 >= args.size()) return bad(absl::StrCat(name, ": missing value"));
      value = args[++i];
    }
    if (auto measure = parse_measure_option(name, value, o); !measure.ok()) {
      return measure.status();
    } else if (*measure) {
      continue;
    }
    if (name == "--help" || name == "-h") {
      o.help = true;
    } else if (name == "--no-progress") {
      o.progress = false;
    } else if (name == "--target") {
      o.target = value;
    } else if (name == "--shapes") {
      auto v = parse_shapes(value);
      if (!v.ok()) return v.status();
      o.shapes = *v;
      o.shapes_given = true;
    } else if (name == "--modes" || name == "--transport") {
      // --transport: how operands and results travel, the same runs as --modes inline / shm /
      // cuda-ipc.
      auto modes = name == "--modes"
                       ? parse_mode_list(name, value,
                                         {{"inline", Mode::kInline},
                                          {"resident", Mode::kResident},
                                          {"ping", Mode::kPing},
                                          {"echo", Mode::kEcho},
                                          {"shm", Mode::kShm},
                                          {"cuda-ipc", Mode::kCudaIpc},
                                          {"striped", Mode::kStriped}},
                                         "inline, resident, shm, cuda-ipc, striped, ping or echo")
                       : parse_mode_list(name, value,
                                         {{"grpc", Mode::kInline},
                                          {"shm", Mode::kShm},
                                          {"cuda-ipc", Mode::kCudaIpc},
                                          {"striped", Mode::kStriped}},
                                         "grpc, shm, cuda-ipc or striped");
      if (!modes.ok()) return modes.status();
      o.modes = *std::move(modes);
    } else if (name == "--variants") {
      o.variants = split_list(value);
      if (o.variants.empty()) return bad("--variants: empty list");
    } else if (name == "--compute" || name == "--precisions") {
      if (name == "--precisions") {
        o.warnings.push_back("--precisions is deprecated: the same list is --compute");
      }
      o.compute = split_list(value);
      for (const std::string& p : o.compute) {
        if (p != "fp64" && p != "fp32" && p != "tf32" && p != "fp16" && p != "bf16" && p != "fp8") {
          return bad(absl::StrCat(name, ": '", p, "' is not fp64, fp32, tf32, fp16, bf16 or fp8"));
        }
      }
      if (o.compute.empty()) return bad(absl::StrCat(name, ": empty list"));
      o.compute_given = true;
    } else if (name == "--concurrency") {
      auto v = parse_concurrency(value);
      if (!v.ok()) return v.status();
      o.concurrency = *v;
    } else if (name == "--batch") {
      auto v = parse_int(name, value, 1);
      if (!v.ok()) return v.status();
      o.batch = *v;
    } else if (name == "--requests") {
      auto v = parse_int(name, value, 1);
      if (!v.ok()) return v.status();
      o.requests = *v;
    } else if (name == "--rate") {
      double r = 0;
      if (!absl::SimpleAtod(value, &r) || !(r > 0) || !std::isfinite(r)) {
        return bad(absl::StrCat("--rate: '", value, "' is not a positive number of requests/s"));
      }
      o.rate = r;
    } else if (name == "--arrivals") {
      if (value != "poisson" && value != "constant") {
        return bad(absl::StrCat("--arrivals: '", value, "' is not poisson or constant"));
      }
      o.poisson_arrivals = value == "poisson";
    } else if (name == "--duration") {
      double d = 0;
      if (!absl::SimpleAtod(value, &d) || !(d > 0)) {
        return bad(absl::StrCat("--duration: expected seconds > 0, got '", value, "'"));
      }
      o.duration_s = d;
    } else if (name == "--warmup") {
      auto v = parse_int(name, value, 0);
      if (!v.ok()) return v.status();
      o.warmup = static_cast<int>(*v);
    } else if (name == "--client") {
      if (value != "shared" && value != "per-worker") {
        return bad(absl::StrCat("--client: '", value, "' is not shared or per-worker"));
      }
      o.client_per_worker = value == "per-worker";
    } else if (name == "--release") {
      if (value == "background") {
        o.release = BenchOptions::Release::kBackground;
      } else if (value == "inline") {
        o.release = BenchOptions::Release::kInline;
      } else if (value == "deferred") {
        o.release = BenchOptions::Release::kDeferred;
      } else if (value == "next-call") {
        o.release = BenchOptions::Release::kNextCall;
      } else {
        return bad(absl::StrCat("--release: '", value,
                                "' is not background, inline, deferred or next-call"));
      }
    } else if (name == "--cuda-device") {
      auto v = parse_int(name, value, 0);
      if (!v.ok()) return v.status();
      o.cuda_device = static_cast<int>(*v);
    } else if (name == "--channel-arg") {
      const std::size_t eq = value.find('=');
      int number = 0;
      if (eq == std::string::npos || eq == 0 || !absl::SimpleAtoi(value.substr(eq + 1), &number)) {
        return bad(absl::StrCat("--channel-arg: '", value, "' is not NAME=INTEGER"));
      }
      o.channel_args.emplace_back(value.substr(0, eq), number);
    } else if (name == "--wait") {
      if (value != "block" && value != "poll") {
        return bad(absl::StrCat("--wait: '", value, "' is not block or poll"));
      }
      o.client.poll_replies = value == "poll";
    } else if (name == "--deadline-ms") {
      auto v = parse_int(name, value, 1);
      if (!v.ok()) return v.status();
      o.deadline_ms = *v;
    } else if (name == "--seed") {
      auto v = parse_int(name, value, 0);
      if (!v.ok()) return v.status();
      o.seed = static_cast<std::uint64_t>(*v);
    } else if (name == "--token-file") {
      o.security.token_file = value;
    } else if (name == "--tls-ca") {
      o.security.tls_ca = value;
    } else if (name == "--tls-cert") {
      o.security.tls_cert = value;
    } else if (name == "--tls-key") {
      o.security.tls_key = value;
    } else if (name == "--tls-server-name") {
      o.security.tls_server_name = value;
    } else if (name == "--json") {
      o.json_path = value;
    } else if (name == "--csv") {
      o.csv_path = value;
    } else if (name == "--stripes") {
      auto v = parse_int(name, value, 1);
      if (!v.ok()) return v.status();
      if (*v > 256) return bad("--stripes: at most 256");
      o.stripes = static_cast<int>(*v);
    } else if (name == "--stripe-chunk-bytes") {
      auto v = parse_int(name, value, 1);
      if (!v.ok()) return v.status();
      o.stripe_chunk_bytes = *v;
    } else if (name == "--markdown") {
      o.markdown_path = value;
    } else {
      return bad(absl::StrCat("unknown option '", name, "' (see --help)"));
    }
  }
  if (o.batch > 1) {
    for (Mode mode : o.modes) {
      if (mode == Mode::kShm || mode == Mode::kCudaIpc) {
        return bad(absl::StrCat("--batch: ", o.batch, " products per request need the inline or ",
                                "resident mode, not ", ModeName(mode)));
      }
    }
  }
  if (absl::Status s = check_security_files(o.security); !s.ok()) {
    return bad(std::string(s.message()));
  }
  if (absl::Status s = check_measure_options(o); !s.ok()) return s;
  if (!o.requests && !o.duration_s && o.stability.window_ms <= 0) o.duration_s = 5.0;
  return o;
}

std::string usage() {
  return R"(matserve-bench: closed- or open-loop load on a matserve server (Multiply, MultiplyBatched,
Transpose, or a mix of them).

usage: matserve-bench [options]
  --target HOST:PORT       server address (default 127.0.0.1:50051; any gRPC target; several
                           replicas: host:port,host:port or dns:///name:port, calls on a
                           handle routed to its replica: docs/client.md)
  --shapes LIST            MxNxK (C m x n = A m x k * B k x n) or N for NxNxN; default 256
  --modes LIST             inline (operands sent as bytes each call) and/or resident (uploaded
                           once per worker, multiplied by handle, result kept and released
                           outside the timed call) and/or ping (a health check per request,
                           no matrix work: the gRPC round-trip floor; run once, whatever the
                           shapes, variants and compute modes) and/or echo (as ping, but a
                           ListResident call: the matrix service's own synchronous threads, as
                           Multiply's) and/or shm (operands and result in
                           a shared-memory region per worker, registered once; the server must
                           run on this node) and/or striped (as inline, but operands and
                           result move as ranges over --stripes connections at once, whatever
                           their size; inline never stripes); default inline
  --transport LIST         grpc, shm, cuda-ipc and/or striped: the same as --modes inline / shm /
                           cuda-ipc (operands and result in this process's GPU memory, shared
                           with the server by CUDA IPC; a CUDA build, the server on this node)
                           / striped
  --stripes N              connections of each client in the striped mode (default 16)
  --stripe-chunk-bytes N   bytes per range in the striped mode (default 2097152)
  --cuda-device N          the GPU the cuda-ipc transport allocates on (default 0)
  --variants LIST          kernel variants (names from matserve-cli kernels, or auto); default auto
  --compute LIST           fp64 fp32 tf32 (fp32 data, tf32 tensor cores) fp16 bf16 fp8 (fp32
                           data quantized to e4m3 on the device); default fp32. Each sets the
                           data sent and the request's compute mode; the reports call it
                           precision. --precisions: its former name (a warning on stderr)
  --concurrency LIST       worker threads: 1,8,64 or 1:64:x2 or 1:8:+1; default 1
  --batch N                products per request (default 1). N > 1: each request is one
                           MultiplyBatched of N products of the shape (inline: A and B sent
                           stacked N deep; resident: N handles each, uploaded once, the N
                           results kept and released outside the timed call); inline and
                           resident modes only. matrices/s counts the products (req/s x N);
                           merged is the mean Timing.merged_requests, how many requests the
                           server's dynamic batching (--max_batch_size) put in each launch
  --requests N             stop each run after N timed requests (all workers together)
  --duration S             stop each run after S seconds (default 5 when --requests is not given)
  --warmup N               untimed requests per worker before each run (default 2)
  --rate R                 open loop: R requests/s offered over all workers (the concurrency is
                           then the most in flight), latency counted from each request's
                           scheduled time; default: closed loop
  --arrivals poisson|constant   the open loop's arrival times: exponential or even gaps
                           (default poisson)
  --client shared|per-worker   one Client for all workers (default) or one per worker
  --release background|inline|deferred|next-call  resident results are released by threads
                           beside the workers (default: the server keeps busy), by each worker
                           between its calls (inline: no Release RPC overlaps a timed call,
                           cleaner latency at low concurrency), by each worker in one call once
                           it holds 256 results or 256 MiB of them, and at the end (deferred:
                           timed calls back to back, as a ping's or an echo's), all outside the
                           timed call; or by the worker's next call, which names them in its
                           release_handles (next-call: one RPC per call)
  --deadline-ms N          per-call deadline (default 120000)
  --wait block|poll        how a worker waits for each reply: asleep in gRPC (block, default) or
                           polling its call's completion queue (poll: no CPU wake-up when the
                           reply lands, one busy core per worker)
  --channel-arg NAME=INT   an integer gRPC channel argument of every client (repeatable; e.g.
                           grpc.http2.max_frame_size=1048576): transport tuning
  --token-file F           bearer token: the first line of F that is not blank or a '#'
                           comment (default: $MATSERVE_TOKEN), for servers started with
                           --auth_tokens_file
  --tls-ca PEM             TLS, trusting these roots for the server's certificate;
                           --tls-cert PEM --tls-key PEM add a client certificate (mutual TLS);
  --tls-server-name NAME   the name the server's certificate carries, when not the target's
  --workload MIX           the operations: multiply (default), transpose (of A, m x k of the
                           shape), or a weighted mix such as multiply=0.8,transpose=0.2, each
                           request's operation drawn from --seed; reported per operation and in
                           total (transposes: inline and resident modes, no --batch)
  --a-npy F --b-npy F      operands read from .npy files instead of random ones; they give the
                           shape (A m x k, B k x n) and the data type (--compute defaults to it;
                           bfloat16 files need --compute bf16); --b-npy is not needed for
                           transposes only; not with --shapes or --batch
  --window-ms MS           measure in windows of MS and stop each run once the last
                           --stability-windows N (3) windows' throughput and latency percentile
                           are each within --stability-pct P (10) percent of their mean, or after
                           --max-trials T (10) windows (then the run is NOT STABLE: exit status 4
                           unless requests failed); not with --requests or --duration
  --stability-percentile Q the latency percentile windows compare (default 50)
  --seed N                 operand seed (worker w uses seed + 2w and seed + 2w + 1); also
                           seeds the --workload draws
  --json FILE --csv FILE --markdown FILE   reports (also printed as a table on stdout)
  --histogram-out FILE     CSV latency histogram per run: run,shape,mode,variant,precision,
                           concurrency,le_us,count (log buckets, 20 per decade from 1 us)
  --timeseries-out FILE    CSV per run and second: ...,second,completed,errors,rate_per_s,
                           p50_us,p99_us
  --no-progress            no live progress line (it is shown only when stderr is a TTY) and no
                           per-window lines

Every combination shapes x modes x variants x compute modes x concurrency is one run, in sequence.
Percentiles are nearest-rank over every timed request (docs/load-testing.md).
Exit status: 0 all requests succeeded, 3 some failed, 4 a windowed run did not become stable,
1 bad usage or an unwritable report, 2 the server could not be reached.
)";
}

}  // namespace matserve::client::bench
