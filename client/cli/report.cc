// Formatting of replies: fixed-width key column, microseconds with one decimal, errors in
// scientific notation; JSON through json_writer with the same keys.
#include "client/cli/report.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/json_writer.h"
#include "client/cpp/matrix.h"

namespace matserve::client::cli {
namespace {

constexpr int kKeyWidth = 22;

void line(std::ostream& out, std::string_view key, std::string_view value) {
  out << key;
  for (int i = static_cast<int>(key.size()); i < kKeyWidth; ++i) out << ' ';
  out << value << '\n';
}

// Rows as columns, each as wide as its widest cell, two spaces apart (the first row is the header).
void print_table(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
    }
    out << line << '\n';
  }
}

std::string fixed(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

std::string bytes(std::int64_t b) {
  const double gib = static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0);
  return absl::StrCat(b, " (", fixed(gib, 2), " GiB)");
}

// The timing block, right-aligned so the decimal points line up. A GEMM's adds the dynamic
// batching wait (part of queue_us) and, after the block, how many requests its launch computed.
void timing_lines(std::ostream& out, const v1::Timing& t, double rpc_us, bool gemm) {
  std::vector<std::pair<std::string_view, double>> rows = {
      {"queue_us", t.queue_us()},   {"h2d_us", t.host_to_device_us()}, {"launch_us", t.launch_us()},
      {"kernel_us", t.kernel_us()}, {"d2h_us", t.device_to_host_us()}, {"total_us", t.total_us()},
      {"client_rpc_us", rpc_us}};
  if (gemm) rows.insert(rows.begin() + 1, {"batch_wait_us", t.batch_wait_us()});
  std::size_t width = 0;
  for (const auto& [key, v] : rows) width = std::max(width, fixed(v).size());
  for (const auto& [key, v] : rows) {
    std::string s = fixed(v);
    line(out, key, std::string(width - s.size(), ' ') + s);
  }
  if (gemm) line(out, "merged_requests", absl::StrCat(t.merged_requests()));
}

std::string timing_json(const v1::Timing& t, double rpc_us, bool gemm) {
  JsonObject o;
  o.add("queue", t.queue_us())
      .add("h2d", t.host_to_device_us())
      .add("launch", t.launch_us())
      .add("kernel", t.kernel_us())
      .add("d2h", t.device_to_host_us())
      .add("total", t.total_us())
      .add("client_rpc", rpc_us);
  if (gemm) o.add("batch_wait", t.batch_wait_us());
  return o.str();
}

void check_lines(std::ostream& out, std::string_view who, double max_abs, double rel_l2,
                 std::optional<std::int64_t> nonfinite) {
  line(out, absl::StrCat(std::string(who), "_max_abs_error"), sci(max_abs));
  line(out, absl::StrCat(std::string(who), "_rel_l2_error"), sci(rel_l2));
  if (nonfinite) line(out, absl::StrCat(std::string(who), "_nonfinite"), absl::StrCat(*nonfinite));
}

std::string server_check_json(const v1::Verification& v) {
  return JsonObject()
      .add("max_abs_error", v.max_abs_error())
      .add("rel_l2_error", v.rel_l2_error())
      .str();
}

std::string client_check_json(const kernels::ErrorStats& s) {
  return JsonObject()
      .add("max_abs_error", s.max_abs_error)
      .add("rel_l2_error", s.rel_l2_error)
      .add("nonfinite", s.nonfinite)
      .str();
}

std::string layout_name(v1::Layout l) {
  return l == v1::COL_MAJOR ? "col" : "row";
}

std::string resident_json(const v1::ResidentInfo& r) {
  return JsonObject()
      .add("handle", r.handle())
      .add("rows", r.rows())
      .add("cols", r.cols())
      .add("dtype", DTypeName(r.dtype()))
      .add("layout", layout_name(r.layout()))
      .add("bytes", r.bytes())
      .add("device", r.device())
      .add("idle_expires_in_ms", r.idle_expires_in_ms())
      .str();
}

void resident_lines(std::ostream& out, const v1::ResidentInfo& r, std::string_view prefix) {
  const std::string p(prefix);
  line(out, p + "handle", r.handle());
  line(out, p + "shape",
       absl::StrCat(r.rows(), " x ", r.cols(), " ", std::string(DTypeName(r.dtype())), " (",
                    layout_name(r.layout()), "-major)"));
  line(out, p + "bytes", absl::StrCat(r.bytes()));
  line(out, p + "device", r.device());
  line(out, p + "expires_in_ms", absl::StrCat(r.idle_expires_in_ms()));
}

// The fields after the rate that multiply and transpose share: runs, checks, --out, result.
template <typename Reply>
void add_run_tail(JsonObject& o, const Reply& reply, const RunSummary& s) {
  o.add("runs", s.runs).add("warmup", s.warmup);
  if (reply.has_verification())
    o.raw("server_verification", server_check_json(reply.verification()));
  if (s.client_check) o.raw("client_check", client_check_json(*s.client_check));
  if (!s.out_path.empty()) o.add("out", s.out_path);
  if (reply.has_result()) o.raw("result", resident_json(reply.result()));
}

std::string variant_text(const std::string& ran, const std::string& requested) {
  return ran == requested ? ran : absl::StrCat(ran, " (asked: ", requested, ")");
}

void runs_line(std::ostream& out, const RunSummary& s) {
  if (s.runs > 1 || s.warmup > 0) {
    line(out, "runs",
         absl::StrCat(s.runs, " measured after ", s.warmup, " warm-up (medians below)"));
  }
}

template <typename Reply>
void check_and_result_lines(std::ostream& out, const Reply& reply, const RunSummary& s) {
  if (reply.has_verification()) {
    check_lines(out, "server", reply.verification().max_abs_error(),
                reply.verification().rel_l2_error(), std::nullopt);
  }
  if (s.client_check) {
    check_lines(out, "client", s.client_check->max_abs_error, s.client_check->rel_l2_error,
                s.client_check->nonfinite);
  }
  if (!s.out_path.empty()) line(out, "out", s.out_path);
  if (reply.has_result()) resident_lines(out, reply.result(), "result_");
}

}  // namespace

void print_upload(const v1::ResidentInfo& info, double rpc_us, bool json, std::ostream& out) {
  if (json) {
    out << JsonObject()
               .add("command", "upload")
               .raw("resident", resident_json(info))
               .add("client_rpc_us", rpc_us)
               .str()
        << '\n';
    return;
  }
  resident_lines(out, info, "");
  line(out, "client_rpc_us", fixed(rpc_us));
}

void print_download(const std::string& handle, const v1::Matrix& m, const std::string& out_path,
                    double rpc_us, bool json, std::ostream& out) {
  if (json) {
    JsonObject o;
    o.add("command", "download")
        .add("handle", handle)
        .add("rows", m.rows())
        .add("cols", m.cols())
        .add("dtype", DTypeName(m.dtype()))
        .add("layout", layout_name(m.layout()))
        .add("bytes", static_cast<std::int64_t>(m.data().size()))
        .add("client_rpc_us", rpc_us);
    if (!out_path.empty()) o.add("out", out_path);
    out << o.str() << '\n';
    return;
  }
  line(out, "handle", handle);
  line(out, "shape",
       absl::StrCat(m.rows(), " x ", m.cols(), " ", std::string(DTypeName(m.dtype())), " (",
                    layout_name(m.layout()), "-major)"));
  line(out, "bytes", absl::StrCat(m.data().size()));
  line(out, "client_rpc_us", fixed(rpc_us));
  if (!out_path.empty()) line(out, "out", out_path);
}

void print_release(const std::string& handle, const v1::ReleaseReply& reply, bool json,
                   std::ostream& out) {
  if (json) {
    out << JsonObject()
               .add("command", "release")
               .add("handle", handle)
               .add("bytes_freed", reply.bytes_freed())
               .str()
        << '\n';
    return;
  }
  line(out, "handle", handle);
  line(out, "bytes_freed", absl::StrCat(reply.bytes_freed()));
}

void print_resident_list(const v1::ListResidentReply& reply, bool json, std::ostream& out) {
  if (json) {
    JsonArray list;
    for (const v1::ResidentInfo& r : reply.matrices()) list.raw(resident_json(r));
    out << JsonObject()
               .add("command", "resident")
               .raw("matrices", list.str())
               .add("total_bytes", reply.total_bytes())
               .str()
        << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"HANDLE", "ROWS", "COLS", "DTYPE", "LAYOUT", "BYTES", "DEVICE", "EXPIRES_MS"}};
  for (const v1::ResidentInfo& r : reply.matrices()) {
    rows.push_back({r.handle(), absl::StrCat(r.rows()), absl::StrCat(r.cols()),
                    std::string(DTypeName(r.dtype())), layout_name(r.layout()),
                    absl::StrCat(r.bytes()), r.device(), absl::StrCat(r.idle_expires_in_ms())});
  }
  print_table(rows, out);
  out << "total_bytes " << reply.total_bytes() << '\n';
}

void print_health(const std::string& service, const std::string& status, bool json,
                  std::ostream& out) {
  if (json) {
    out << JsonObject().add("command", "health").add("service", service).add("status", status).str()
        << '\n';
    return;
  }
  line(out, "service", service.empty() ? "(server)" : service);
  line(out, "status", status);
}

void print_info(const v1::GetServerInfoReply& reply, const std::string& target, bool json,
                std::ostream& out) {
  const v1::ServerLimits& l = reply.limits();
  if (json) {
    JsonArray devices;
    for (const v1::DeviceInfo& d : reply.devices()) {
      devices.raw(JsonObject()
                      .add("index", d.index())
                      .add("name", d.name())
                      .add("compute_capability", d.compute_capability())
                      .add("memory_total_bytes", d.memory_total_bytes())
                      .add("memory_free_bytes", d.memory_free_bytes())
                      .add("multiprocessors", d.multiprocessors())
                      .str());
    }
    out << JsonObject()
               .add("command", "info")
               .add("target", target)
               .add("version", reply.version())
               .add("git_sha", reply.git_sha())
               .add("backend", reply.backend())
               .add("replica_id", reply.replica_id())
               .raw("devices", devices.str())
               .raw("limits", JsonObject()
                                  .add("max_message_bytes", l.max_message_bytes())
                                  .add("max_dimension", l.max_dimension())
                                  .add("max_matrix_bytes", l.max_matrix_bytes())
                                  .add("memory_budget_bytes", l.memory_budget_bytes())
                                  .add("resident_ttl_ms", l.resident_ttl_ms())
                                  .str())
               .str()
        << '\n';
    return;
  }
  line(out, "target", target);
  line(out, "version", reply.version());
  line(out, "git_sha", reply.git_sha());
  line(out, "backend", reply.backend());
  line(out, "replica_id", reply.replica_id());
  line(out, "devices", absl::StrCat(reply.devices_size()));
  for (const v1::DeviceInfo& d : reply.devices()) {
    std::string desc = d.name();
    if (!d.compute_capability().empty()) absl::StrAppend(&desc, ", cc ", d.compute_capability());
    if (d.multiprocessors() > 0) absl::StrAppend(&desc, ", ", d.multiprocessors(), " SMs");
    if (d.memory_total_bytes() > 0) {
      absl::StrAppend(&desc, ", ", fixed(d.memory_total_bytes() / 1073741824.0, 1), " GiB total, ",
                      fixed(d.memory_free_bytes() / 1073741824.0, 1), " GiB free");
    }
    line(out, absl::StrCat("device ", d.index()), desc);
  }
  line(out, "max_message_bytes", bytes(l.max_message_bytes()));
  line(out, "max_dimension", absl::StrCat(l.max_dimension()));
  line(out, "max_matrix_bytes", bytes(l.max_matrix_bytes()));
  line(out, "memory_budget_bytes", bytes(l.memory_budget_bytes()));
  line(out, "resident_ttl_ms", absl::StrCat(l.resident_ttl_ms()));
}

void print_kernels(const v1::ListKernelsReply& reply, std::optional<v1::Operation> only, bool json,
                   std::ostream& out) {
  std::vector<const v1::KernelInfo*> kernels;
  for (const v1::KernelInfo& k : reply.kernels()) {
    if (!only || k.operation() == *only) kernels.push_back(&k);
  }
  if (json) {
    JsonArray list;
    for (const v1::KernelInfo* k : kernels) {
      JsonArray precisions;
      for (const std::string& p : k->precisions()) precisions.add(p);
      list.raw(JsonObject()
                   .add("name", k->name())
                   .add("family", k->family())
                   .add("operation", operation_name(k->operation()))
                   .raw("precisions", precisions.str())
                   .add("backend", k->backend())
                   .add("constraints", k->constraints())
                   .add("description", k->description())
                   .str());
    }
    out << JsonObject().add("command", "kernels").raw("kernels", list.str()).str() << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "FAMILY", "OP", "PRECISIONS", "BACKEND", "CONSTRAINTS", "DESCRIPTION"}};
  for (const v1::KernelInfo* k : kernels) {
    rows.push_back({k->name(), k->family(), std::string(operation_name(k->operation())),
                    absl::StrJoin(k->precisions(), ","), k->backend(),
                    k->constraints().empty() ? "-" : k->constraints(), k->description()});
  }
  print_table(rows, out);
}

void print_multiply(const v1::MultiplyReply& reply, const RunSummary& s, bool json,
                    std::ostream& out) {
  if (json) {
    JsonObject o;
    o.add("command", "multiply")
        .add("target", s.target)
        .add("variant", reply.variant())
        .add("variant_requested", s.variant_requested)
        .add("device", reply.device())
        .add("precision", reply.precision())
        .add("m", s.m)
        .add("n", s.n)
        .raw("k", s.k < 0 ? "null" : std::to_string(s.k))
        .add("dtype", s.dtype)
        .add("output_dtype", s.output_dtype)
        .add("output_layout", s.layout)
        .add("compute", s.compute)
        .add("batch", s.batch)
        .raw("timing_us", timing_json(reply.timing(), s.rpc_us, true))
        .add("merged_requests", reply.timing().merged_requests())
        .add("gflops", reply.gflops());
    if (reply.has_fp8_scales()) {
      o.raw("fp8_scales", JsonObject()
                              .add("a_scale", reply.fp8_scales().a_scale())
                              .add("b_scale", reply.fp8_scales().b_scale())
                              .str());
    }
    add_run_tail(o, reply, s);
    out << o.str() << '\n';
    return;
  }
  line(out, "variant", variant_text(reply.variant(), s.variant_requested));
  line(out, "device", reply.device());
  line(out, "precision", reply.precision());
  line(out, "shape",
       absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k < 0 ? "?" : std::to_string(s.k)));
  if (s.batch > 1) {
    line(out, "batch",
         absl::StrCat(s.batch, " products in one MultiplyBatched call (timing, gflops: all)"));
  }
  line(out, "data",
       absl::StrCat(s.dtype, " -> ", s.output_dtype, " (", s.layout, "-major output, compute ",
                    s.compute, ")"));
  runs_line(out, s);
  timing_lines(out, reply.timing(), s.rpc_us, true);
  line(out, "gflops", fixed(reply.gflops()));
  if (reply.has_fp8_scales()) {
    line(
        out, "fp8_scales",
        absl::StrCat("A x ", reply.fp8_scales().a_scale(), ", B x ", reply.fp8_scales().b_scale()));
  }
  check_and_result_lines(out, reply, s);
}

void print_transpose(const v1::TransposeReply& reply, const RunSummary& s, bool json,
                     std::ostream& out) {
  if (json) {
    JsonObject o;
    o.add("command", "transpose")
        .add("target", s.target)
        .add("variant", reply.variant())
        .add("variant_requested", s.variant_requested)
        .add("device", reply.device())
        .add("rows", s.m)
        .add("cols", s.n)
        .add("dtype", s.dtype)
        .add("layout", s.layout)
        .raw("timing_us", timing_json(reply.timing(), s.rpc_us, false))
        .add("gb_per_s", reply.gb_per_s());
    add_run_tail(o, reply, s);
    out << o.str() << '\n';
    return;
  }
  line(out, "variant", variant_text(reply.variant(), s.variant_requested));
  line(out, "device", reply.device());
  line(out, "shape", absl::StrCat(s.m, " x ", s.n, " -> ", s.n, " x ", s.m));
  line(out, "data", absl::StrCat(s.dtype, " (", s.layout, "-major)"));
  runs_line(out, s);
  timing_lines(out, reply.timing(), s.rpc_us, false);
  line(out, "gb_per_s", fixed(reply.gb_per_s(), 2));
  check_and_result_lines(out, reply, s);
}

}  // namespace matserve::client::cli
