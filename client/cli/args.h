// matserve-cli's command line, parsed into plain structs by a small hand parser (subcommands with
// their own options, `--name value` or `--name=value`). Errors are INVALID_ARGUMENT naming the
// offending argument; main turns them into exit code 1.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/client.h"
#include "client/cpp/connection_security.h"
#include "kernels/types.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client::cli {

enum class Command {
  kNone,
  kHelp,
  kInfo,
  kKernels,
  kMultiply,
  kTranspose,
  kUpload,
  kDownload,
  kRelease,
  kResident,
  kHealth
};

struct GlobalOptions {
  std::string target = "localhost:50051";
  bool json = false;
  std::int64_t deadline_ms = 120000;
  std::int64_t max_message_bytes = std::int64_t{1} << 30;
  // Striped transfer (ClientOptions::stripes, stripe_threshold_bytes, stripe_chunk_bytes):
  // --stripes N (0: every call inline), --stripe-threshold-bytes N, --stripe-chunk-bytes N.
  int stripes = ClientOptions{}.stripes;
  std::int64_t stripe_threshold_bytes = ClientOptions{}.stripe_threshold_bytes;
  std::int64_t stripe_chunk_bytes = ClientOptions{}.stripe_chunk_bytes;
  // --token-file (first line = bearer token, else $MATSERVE_TOKEN), --tls-ca (PEM roots; turns
  // TLS on), --tls-cert/--tls-key (client certificate: mutual TLS), --tls-server-name.
  SecurityFiles security;
};

struct KernelsOptions {
  std::optional<matserve::v1::Operation> op;  // --op gemm|transpose
};

// Inputs either from .npy files or generated (--random), optionally converted to --dtype.
struct MultiplyOptions {
  std::string a, b, c;                                // --a --b --c (.npy paths)
  std::optional<std::array<std::int64_t, 3>> random;  // --random MxNxK
  std::uint64_t seed = 1;
  std::optional<kernels::DType> dtype;  // data sent; default fp32 (random) or the files' dtype
  kernels::Layout layout = kernels::Layout::kRowMajor;  // --layout, random inputs only
  bool transpose_a = false;
  bool transpose_b = false;
  std::optional<double> alpha;
  std::optional<double> beta;
  std::string variant = "auto";
  matserve::v1::ComputeMode compute = matserve::v1::COMPUTE_DEFAULT;
  std::optional<kernels::DType> output_dtype;
  // Layout of C; default: --c's layout when given, else row. The server needs C's layout to equal
  // it, so a --c file in the other layout is converted before sending.
  std::optional<kernels::Layout> output_layout;
  bool verify = false;              // --verify: the server's float64 reference (request.verify)
  bool check = false;               // --check: a float64 reference computed here (OpenBLAS)
  std::optional<double> tolerance;  // exit 3 when a reported rel-L2 error exceeds it
  std::string out;                  // --out c.npy
  // Timing: `warmup` calls, then `repeat` measured ones; the report shows each stage's median.
  std::int64_t warmup = 0;
  std::int64_t repeat = 1;
  // Resident operands (handles from `upload`) instead of data, and keeping C on the device.
  std::string a_handle, b_handle, c_handle;
  bool keep_result = false;
  bool shm = false;  // operands and result through a shared-memory region (same node)
  // --split default|never|always: whether the server may spread the product over its GPUs.
  v1::Split split = v1::SPLIT_DEFAULT;
  // --batch N > 1: N products of --random operands in one MultiplyBatched call.
  std::int64_t batch = 1;
};

struct TransposeOptions {
  std::string a;
  std::optional<std::array<std::int64_t, 2>> random;  // --random RxC
  std::uint64_t seed = 1;
  std::optional<kernels::DType> dtype;
  kernels::Layout layout = kernels::Layout::kRowMajor;
  std::optional<double> scale;
  std::string variant = "auto";
  bool verify = false;  // as in MultiplyOptions
  bool check = false;
  std::optional<double> tolerance;
  std::string out;
  std::int64_t warmup = 0;
  std::int64_t repeat = 1;
  std::string a_handle;  // a resident input instead of --a/--random
  bool keep_result = false;
  bool in_place = false;  // transpose the resident --a-handle in place
  bool shm = false;       // A and B through a shared-memory region (same node)
};

// upload: one matrix from a file or --random into device memory.
struct UploadOptions {
  std::string a;
  std::optional<std::array<std::int64_t, 2>> random;
  std::uint64_t seed = 1;
  std::optional<kernels::DType> dtype;
  kernels::Layout layout = kernels::Layout::kRowMajor;
  std::int64_t chunk_bytes = 0;  // --chunk-mb: > 0 streams in chunks of this size
  std::string colocate_with;     // --colocate-with: a handle whose device the matrix joins
};

// health: the service name asked about ("" = the whole server).
struct HealthOptions {
  std::string service;
};

// download / release: one resident matrix by handle.
struct HandleOptions {
  std::string handle;
  std::string out;               // download only
  std::int64_t chunk_bytes = 0;  // download only: > 0 streams
};

struct ParsedArgs {
  GlobalOptions global;
  Command command = Command::kNone;
  bool help = false;                    // --help given for `command` (or no command: general help)
  Command help_topic = Command::kNone;  // `matserve-cli help multiply`
  KernelsOptions kernels;
  MultiplyOptions multiply;
  TransposeOptions transpose;
  UploadOptions upload;
  HandleOptions handle;  // download, release
  HealthOptions health;
  // Deprecated spellings that were given (e.g. --server-verify), one line each for stderr.
  std::vector<std::string> warnings;
};

// Parses argv[1..] (without the program name).
absl::StatusOr<ParsedArgs> parse_args(const std::vector<std::string>& args);

// "MxNxK" / "RxC": `count` positive integers separated by 'x'.
absl::StatusOr<std::vector<std::int64_t>> parse_dims(const std::string& spec, int count);

const char* CommandName(Command command);

}  // namespace matserve::client::cli
