// Help texts. Kept next to each other so the options of every command are documented in one place
// (docs/client.md repeats them with examples).
#include "client/cli/help.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace matserve::client::cli {

std::string general_help() {
  return R"(matserve-cli: command-line client of the matserve GPU matrix service.

usage: matserve-cli [global options] <command> [options]

commands:
  info        server version, backend, devices and limits
  kernels     the kernel variants the server offers (--op gemm|transpose)
  multiply    C = alpha * op(A) * op(B) + beta * C on the server
  transpose   B = scale * A^T on the server
  upload      keep a matrix in the server's device memory; prints its handle
  download    fetch a resident matrix (--handle H --out X.npy)
  release     free a resident matrix (--handle H)
  resident    list the resident matrices
  health      ask the server's gRPC health service (exit 0 when SERVING; no token needed)
  help CMD    the options of CMD (same as: matserve-cli CMD --help)

global options (before or after the command):
  --target HOST:PORT     server address, any gRPC target (default localhost:50051);
                         several replicas: host:port,host:port or dns:///name:port (every
                         address): calls on a handle go to its replica, others round-robin
  --json                 print one JSON object instead of the aligned text block
  --deadline-ms N        deadline of each call (default 120000)
  --max-message-mb N     largest message sent or received (default 1024)
  --stripes N            connections a large call's operands and result move over as ranges
                         (default 16; 0: every call in one message)
  --stripe-threshold-bytes N   inline operands of at least N bytes go striped (default 8 MiB)
  --stripe-chunk-bytes N       bytes per range (default 2 MiB)
  --token-file F         bearer token: F's first line not blank or '#' (default: $MATSERVE_TOKEN)
  --tls-ca F             TLS, trusting the PEM roots in F
  --tls-cert F --tls-key F   client certificate and key (mutual TLS)
  --tls-server-name N    name in the server's certificate, when the target's host differs
  --help, -h             this text

exit codes: 0 ok, 1 usage or input-file error, 2 RPC error (stderr: "error: <CODE>: <message>"),
            3 verification above --tolerance, 4 health: the server answered but is not SERVING
)";
}

namespace {

std::string kernel_tail(const std::string& kernel_list) {
  if (kernel_list.empty()) {
    return "\nkernels: the server is not reachable; see `matserve-cli kernels`\n";
  }
  return absl::StrCat("\nkernels on the server (--variant NAME):\n", kernel_list);
}

}  // namespace

std::string command_help(Command command, const std::string& kernel_list) {
  switch (command) {
    case Command::kInfo:
      return R"(usage: matserve-cli [--target HOST:PORT] info [--json]

Prints the server's version, git sha, backend (cuda or cpu), each device (name, compute
capability, SMs, memory) and its limits (message bytes, dimension, matrix bytes).
)";
    case Command::kHealth:
      return R"(usage: matserve-cli [--target HOST:PORT] health [--service NAME] [--json]

Asks grpc.health.v1.Health/Check and prints the status. Exit 0 when SERVING, 4 when the server
answered anything else (NOT_SERVING while it drains or after a device error), 2 when it did not
answer. For container health checks: the health service needs no bearer token.
  --service NAME         "" (default) = the whole server; matserve.v1.MatrixService = the service
)";
    case Command::kKernels:
      return R"(usage: matserve-cli [--target HOST:PORT] kernels [--op gemm|transpose] [--json]

Lists the server's kernel variants: name, family, operation, precisions, backend, constraints and
a one-line description of the technique.
  --op gemm|transpose    only the kernels of this operation
)";
    case Command::kMultiply:
      return absl::StrCat(
          R"(usage: matserve-cli multiply (--a A.npy --b B.npy [--c C.npy] | --random MxNxK) [opts]

C = alpha * op(A) * op(B) + beta * C, computed by the server. op(A) is m x k, op(B) is k x n.
inputs:
  --a A.npy --b B.npy    operands as .npy files ('<f8' '<f4' '<f2'; bf16: '<u2' + --dtype bf16);
                         Fortran-order files are sent column-major
  --c C.npy              input C (read when --beta is not 0)
  --random MxNxK         generate A, B (and C when --beta is not 0): uniform in [-1, 1)
  --seed S               seed of --random (default 1; A uses S, B S+1, C S+2)
  --dtype fp64|fp32|fp16|bf16
                         dtype sent: random data's type (default fp32), or converts the files
  --layout row|col       storage of the --random matrices (default row)
operation:
  --transpose-a          op(A) = A^T
  --transpose-b          op(B) = B^T
  --alpha X --beta Y     scalars (server defaults: 1 and 0)
  --variant NAME|auto    kernel variant (default auto: the server picks)
  --compute default|fp64|fp32|tf32|fp16|bf16|fp8
                         how the products are computed (default: natural for the dtype; fp8:
                         e4m3 tensor cores, the data quantized on the device)
  --output-dtype fp64|fp32|fp16|bf16   dtype of C (default: the inputs')
  --output-layout row|col              layout of C (default: that of --c, else row)
  --split default|never|always         spread the product over the server's GPUs: above its
                         --split_gemm_min_flops (default), never, or whenever another GPU is free
checks and output:
  --verify               the server checks C against its float64 reference (`verify` in the
                         request) and reports the error (--server-verify: the former name)
  --check                check C here against a float64 reference computed by this client
                         (OpenBLAS) from the bytes sent
  --tolerance X          exit 3 when a reported relative L2 error exceeds X
  --out C.npy            write C
  --warmup W --repeat N  W unmeasured calls, then N measured: report each stage's median
  --json                 one JSON object (keys: docs/client.md)
batched (one MultiplyBatched call):
  --batch N              N products of --random operands in one call (A, B and C stacked N deep;
                         product i from seeds S+3i, S+3i+1, S+3i+2): the timing and gflops are
                         the whole batch's; --verify checks every product (no --check, --out,
                         --keep-result or --shm)
resident matrices (handles from `matserve-cli upload`):
  --a-handle H, --b-handle H, --c-handle H   operands already on the server instead of data
  --keep-result          leave C on the server; prints its handle (then `download`)
same node:
  --shm                  A, B, C and the result through a shared-memory region made for the
                         call instead of gRPC messages (the server must share /dev/shm)
)",
          kernel_tail(kernel_list));
    case Command::kTranspose:
      return absl::StrCat(R"(usage: matserve-cli transpose (--a A.npy | --random RxC) [options]

B = scale * A^T, computed by the server; B has A's dtype and layout.
  --a A.npy              input as a .npy file (bf16 as '<u2' with --dtype bf16)
  --random RxC           generate A: uniform in [-1, 1)
  --seed S               seed of --random (default 1)
  --dtype fp64|fp32|fp16|bf16   dtype sent (default fp32 for --random; converts a file)
  --layout row|col       storage of the --random matrix (default row)
  --scale X              factor (server default 1)
  --variant NAME|auto    kernel variant (default auto)
  --verify               the server checks B against its float64 reference and reports the error
  --check                check B here against a float64 reference computed by this client
  --tolerance X          exit 3 when a reported relative L2 error exceeds X
  --out B.npy            write B
  --warmup W --repeat N  W unmeasured calls, then N measured: report each stage's median
  --json                 one JSON object (keys: docs/client.md)
  --a-handle H           a resident matrix instead of --a/--random
  --keep-result          leave B on the server; prints its handle
  --in-place             transpose the resident --a-handle in place (the handle then names A^T)
  --shm                  A and B through a shared-memory region made for the call (same node)
)",
                          kernel_tail(kernel_list));
    case Command::kUpload:
      return R"(usage: matserve-cli upload (--a A.npy | --random RxC) [options]

Copies a matrix into the server's device memory and prints its handle (name it in multiply with
--a-handle/--b-handle/--c-handle, in transpose with --a-handle). Idle matrices expire (see info).
  --a A.npy              the matrix as a .npy file (bf16 as '<u2' with --dtype bf16)
  --random RxC           generate it: uniform in [-1, 1)
  --seed S               seed of --random (default 1)
  --dtype fp64|fp32|fp16|bf16   dtype sent (default fp32 for --random; converts a file)
  --layout row|col       storage of the --random matrix (default row)
  --chunk-mb N           stream in N MiB chunks (UploadStream); without it one message is sent
                         when the matrix fits in --max-message-mb, else it streams in 4 MiB chunks
  --colocate-with H      put it on the device holding handle H (operands of one request must share
                         a device on a multi-GPU server); default: the least-loaded device
)";
    case Command::kDownload:
      return R"(usage: matserve-cli download --handle H [--out X.npy] [--chunk-mb N]

Fetches a resident matrix; prints its shape and writes it to --out.
  --chunk-mb N           stream it in N MiB chunks (DownloadStream), for matrices larger than one
                         message; without it one message (Download)
)";
    case Command::kRelease:
      return R"(usage: matserve-cli release --handle H

Frees a resident matrix and prints the bytes freed.
)";
    case Command::kResident:
      return R"(usage: matserve-cli resident [--json]

Lists the resident matrices: handle, shape, dtype, layout, bytes, device, idle time left.
)";
    default: break;
  }
  return general_help();
}

std::string kernel_list_for_help(const matserve::v1::ListKernelsReply& reply,
                                 matserve::v1::Operation op) {
  std::size_t name_width = 0, prec_width = 0;
  for (const auto& k : reply.kernels()) {
    if (k.operation() != op) continue;
    name_width = std::max(name_width, k.name().size());
    prec_width = std::max(prec_width, absl::StrJoin(k.precisions(), ",").size());
  }
  std::string out;
  for (const auto& k : reply.kernels()) {
    if (k.operation() != op) continue;
    const std::string prec = absl::StrJoin(k.precisions(), ",");
    absl::StrAppend(&out, "  ", k.name(), std::string(name_width - k.name().size() + 2, ' '), prec,
                    std::string(prec_width - prec.size() + 2, ' '), k.description(), "\n");
  }
  if (out.empty()) out = "  (none)\n";
  return out;
}

}  // namespace matserve::client::cli
