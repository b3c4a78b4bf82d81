// What matserve-cli prints: for each command an aligned "key  value" block for people, or one JSON
// object (--json) for scripts. Keys and their order are stable; docs/client.md lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "kernels/cpu/reference.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client::cli {

namespace v1 = ::matserve::v1;

void print_info(const v1::GetServerInfoReply& reply, const std::string& target, bool json,
                std::ostream& out);

// `health`: the service asked about and its status name (SERVING, NOT_SERVING, ...).
void print_health(const std::string& service, const std::string& status, bool json,
                  std::ostream& out);

void print_kernels(const v1::ListKernelsReply& reply, std::optional<v1::Operation> only, bool json,
                   std::ostream& out);

// What the reply does not repeat about the request, plus client-side results.
struct RunSummary {
  std::string target;
  std::string variant_requested;
  // GEMM: m, n, k (k < 0: unknown, both operands resident); transpose: m x n = A's rows x cols.
  std::int64_t m = 0, n = 0, k = 0;
  std::string dtype;  // data sent
  std::string output_dtype;
  std::string layout;       // transpose: of the input and output; GEMM: of the output
  std::string compute;      // GEMM only
  double rpc_us = 0;        // client-measured round trip of the call (median with --repeat)
  std::int64_t warmup = 0;  // unmeasured calls before the measured ones
  std::int64_t runs = 1;    // measured calls; timings, rate and rpc_us are their medians
  std::int64_t batch = 1;   // products per call (multiply --batch: one MultiplyBatched call)
  std::optional<kernels::ErrorStats> client_check;
  std::string out_path;
};

void print_multiply(const v1::MultiplyReply& reply, const RunSummary& summary, bool json,
                    std::ostream& out);
void print_transpose(const v1::TransposeReply& reply, const RunSummary& summary, bool json,
                     std::ostream& out);

// Resident matrices: `upload`, `download` (the matrix's header; data only goes to --out),
// `release` and `resident`.
void print_upload(const v1::ResidentInfo& info, double rpc_us, bool json, std::ostream& out);
void print_download(const std::string& handle, const v1::Matrix& matrix,
                    const std::string& out_path, double rpc_us, bool json, std::ostream& out);
void print_release(const std::string& handle, const v1::ReleaseReply& reply, bool json,
                   std::ostream& out);
void print_resident_list(const v1::ListResidentReply& reply, bool json, std::ostream& out);

}  // namespace matserve::client::cli
