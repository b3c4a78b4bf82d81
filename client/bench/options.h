// matserve-bench's command line: the target, the mix of shapes x modes x variants x compute modes x
// concurrency levels (each combination is one run, in that nesting order), when a run stops, and
// where the reports go. Parsing is separate from running so tests can check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench/stability.h"
#include "client/bench/workload.h"
#include "client/cpp/client.h"
#include "client/cpp/connection_security.h"

namespace matserve::client::bench {

struct Shape {
  std::int64_t m = 0, n = 0, k = 0;  // C (m x n) = A (m x k) * B (k x n)
  std::string name() const;          // "256x256x256"
};

// kPing: a grpc.health.v1 check per request, no matrix work: the transport's round-trip floor
// (gRPC answers it on its own callback threads).
// kEcho: a ListResident call per request, no matrix work: a handler of the matrix service on the
// same synchronous server threads as Multiply's, so the floor of a call in Multiply's thread model.
// kShm: operands and result in a POSIX shared-memory region of each worker (same node only).
// kCudaIpc: operands and result in GPU memory of the bench process, shared by CUDA IPC.
// kStriped: operands and result inline in the call, moved as ranges over --stripes connections
// (the client's striped transfer, whatever their size); kInline never stripes.
enum class Mode { kInline, kResident, kPing, kEcho, kShm, kCudaIpc, kStriped };
const char* ModeName(Mode mode);
// Modes with no matrix work (ping, echo): run once, whatever the shapes, variants and precisions.
bool IsFloor(Mode mode);

struct BenchOptions {
  std::string target = "127.0.0.1:50051";
  std::vector<Shape> shapes = {{256, 256, 256}};
  std::vector<Mode> modes = {Mode::kInline};
  std::vector<std::string> variants = {"auto"};
  // --compute (the former --precisions): each names the data and ComputeMode sent, fp64 fp32 tf32
  // fp16 bf16 fp8 (runner.cc); the reports call it `precision`.
  std::vector<std::string> compute = {"fp32"};
  std::vector<int> concurrency = {1};
  // --batch N: products per request. N > 1 sends each request as one MultiplyBatched of N
  // products of the shape (inline and resident modes only); 1 sends plain Multiply requests.
  std::int64_t batch = 1;
  std::optional<std::int64_t> requests;  // total timed requests per run
  // --rate R: open loop. R requests/s are offered over all workers, at times drawn in advance
  // (--arrivals poisson: exponential gaps, the default; constant: evenly spaced), and each
  // request's latency counts from its scheduled time, so a server (or a worker pool) that falls
  // behind shows in the percentiles instead of slowing the offered load. The concurrency is then
  // the most requests in flight. Unset: closed loop (a worker sends its next request when its
  // last one returns).
  std::optional<double> rate;
  bool poisson_arrivals = true;
  std::optional<double> duration_s;  // timed seconds per run (default 5 when neither given)
  int warmup = 2;                    // untimed requests per worker before each run
  bool client_per_worker = false;    // --client per-worker: one Client (channel) per worker
  // Who releases resident results, always outside the timed call: a pool of release threads
  // beside the workers (background); each worker itself, after each timed call and before its
  // next one (inline); or each worker, holding its results and releasing them in one call once
  // it holds deferred_release_handles or _bytes of them, and at the end (deferred:
  // the timed calls then follow each other back to back, as a ping's or an echo's do); or named
  // in the next call's release_handles, which releases them once it has succeeded (next-call: one
  // RPC per call, and the last call's results released at the end).
  enum class Release { kBackground, kInline, kDeferred, kNextCall };
  Release release = Release::kBackground;
  // --release deferred: a worker releases what it holds once it holds this many results, or
  // results of at least this many bytes.
  std::size_t deferred_release_handles = 256;
  std::int64_t deferred_release_bytes = std::int64_t{256} << 20;
  std::int64_t deadline_ms = 120000;
  int cuda_device = 0;  // --cuda-device: where the cuda-ipc transport allocates
  // The striped mode's connections per client and bytes per range (--stripes,
  // --stripe-chunk-bytes).
  int stripes = ClientOptions{}.stripes;
  std::int64_t stripe_chunk_bytes = ClientOptions{}.stripe_chunk_bytes;
  // --channel-arg NAME=INT (repeatable): integer gRPC channel arguments of every client.
  std::vector<std::pair<std::string, int>> channel_args;
  // --token-file, --tls-ca, --tls-cert, --tls-key, --tls-server-name: as matserve-cli's.
  SecurityFiles security;
  // What every client of the run starts from: the token and TLS credentials read from
  // `security` (main fills it in; the runner adds deadline, channel arguments, message limit).
  // Its striped transfer is off: the inline mode sends every call as one message; the striped
  // mode's clients turn it on (--stripes).
  ClientOptions client = [] {
    ClientOptions c;
    c.stripes = 0;
    return c;
  }();
  std::uint64_t seed = 1;
  bool progress = true;  // live line on stderr (only when stderr is a TTY)
  std::string json_path, csv_path, markdown_path;
  // --histogram-out, --timeseries-out: CSV files of every run (histogram.h, timeseries.h).
  std::string histogram_path, timeseries_path;
  // --workload: the operations each run drives and their mix (multiply only by default). A
  // transpose transposes A (m x k of the shape).
  Workload workload;
  // --window-ms and the rest of stability.h's options: windowed runs that stop once stable.
  StabilityOptions stability;
  // --a-npy, --b-npy: operands read from these files instead of random ones (operands.h).
  std::string a_npy, b_npy;
  bool shapes_given = false, compute_given = false;  // --shapes / --compute were on the line
  bool help = false;
  // Former spellings that were given (e.g. --precisions), one line each for stderr.
  std::vector<std::string> warnings;
};

// "1,8,64" or "1:64:x2" (geometric) or "1:8:+1" (arithmetic), or a mix of those, comma-separated.
absl::StatusOr<std::vector<int>> parse_concurrency(const std::string& text);
// "256x256x256,1024" (a single number n means n x n x n).
absl::StatusOr<std::vector<Shape>> parse_shapes(const std::string& text);

// argv without the program name. INVALID_ARGUMENT naming the bad option.
absl::StatusOr<BenchOptions> parse_options(const std::vector<std::string>& args);

// The options of options_measure.cc (workload, operand files, windows, exports): true when `name`
// is one of them (then applied to `o`), false when it is not.
absl::StatusOr<bool> parse_measure_option(const std::string& name, const std::string& value,
                                          BenchOptions& o);
// Their checks against the rest of the line, once everything is parsed.
absl::Status check_measure_options(const BenchOptions& o);

// The --help text.
std::string usage();

}  // namespace matserve::client::bench
