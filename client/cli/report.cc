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

void Line(std::ostream& out, std::string_view key, std::string_view value) {
  out << key;
  for (int i = static_cast<int>(key.size()); i < kKeyWidth; ++i) out << ' ';
  out << value << '\n';
}

std::string Fixed(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string Sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

std::string Bytes(std::int64_t b) {
  const double gib = static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0);
  return absl::StrCat(b, " (", Fixed(gib, 2), " GiB)");
}

// The timing block, right-aligned so the decimal points line up. A GEMM's adds the dynamic
// batching wait (part of queue_us) and, after the block, how many requests its launch computed.
void TimingLines(std::ostream& out, const v1::Timing& t, double rpc_us, bool gemm) {
  std::vector<std::pair<std::string_view, double>> rows = {
      {"queue_us", t.queue_us()},   {"h2d_us", t.host_to_device_us()}, {"launch_us", t.launch_us()},
      {"kernel_us", t.kernel_us()}, {"d2h_us", t.device_to_host_us()}, {"total_us", t.total_us()},
      {"client_rpc_us", rpc_us}};
  if (gemm) rows.insert(rows.begin() + 1, {"batch_wait_us", t.batch_wait_us()});
  std::size_t width = 0;
  for (const auto& [key, v] : rows) width = std::max(width, Fixed(v).size());
  for (const auto& [key, v] : rows) {
    std::string s = Fixed(v);
    Line(out, key, std::string(width - s.size(), ' ') + s);
  }
  if (gemm) Line(out, "merged_requests", absl::StrCat(t.merged_requests()));
}

std::string TimingJson(const v1::Timing& t, double rpc_us, bool gemm) {
  JsonObject o;
  o.Add("queue", t.queue_us())
      .Add("h2d", t.host_to_device_us())
      .Add("launch", t.launch_us())
      .Add("kernel", t.kernel_us())
      .Add("d2h", t.device_to_host_us())
      .Add("total", t.total_us())
      .Add("client_rpc", rpc_us);
  if (gemm) o.Add("batch_wait", t.batch_wait_us());
  return o.str();
}

void CheckLines(std::ostream& out, std::string_view who, double max_abs, double rel_l2,
                std::optional<std::int64_t> nonfinite) {
  Line(out, absl::StrCat(std::string(who), "_max_abs_error"), Sci(max_abs));
  Line(out, absl::StrCat(std::string(who), "_rel_l2_error"), Sci(rel_l2));
  if (nonfinite) Line(out, absl::StrCat(std::string(who), "_nonfinite"), absl::StrCat(*nonfinite));
}

std::string ServerCheckJson(const v1::Verification& v) {
  return JsonObject()
      .Add("max_abs_error", v.max_abs_error())
      .Add("rel_l2_error", v.rel_l2_error())
      .str();
}

std::string ClientCheckJson(const kernels::ErrorStats& s) {
  return JsonObject()
      .Add("max_abs_error", s.max_abs_error)
      .Add("rel_l2_error", s.rel_l2_error)
      .Add("nonfinite", s.nonfinite)
      .str();
}

std::string LayoutName(v1::Layout l) {
  return l == v1::COL_MAJOR ? "col" : "row";
}

std::string ResidentJson(const v1::ResidentInfo& r) {
  return JsonObject()
      .Add("handle", r.handle())
      .Add("rows", r.rows())
      .Add("cols", r.cols())
      .Add("dtype", DTypeName(r.dtype()))
      .Add("layout", LayoutName(r.layout()))
      .Add("bytes", r.bytes())
      .Add("device", r.device())
      .Add("idle_expires_in_ms", r.idle_expires_in_ms())
      .str();
}

void ResidentLines(std::ostream& out, const v1::ResidentInfo& r, std::string_view prefix) {
  const std::string p(prefix);
  Line(out, p + "handle", r.handle());
  Line(out, p + "shape",
       absl::StrCat(r.rows(), " x ", r.cols(), " ", std::string(DTypeName(r.dtype())), " (",
                    LayoutName(r.layout()), "-major)"));
  Line(out, p + "bytes", absl::StrCat(r.bytes()));
  Line(out, p + "device", r.device());
  Line(out, p + "expires_in_ms", absl::StrCat(r.idle_expires_in_ms()));
}

// The fields after the rate that multiply and transpose share: runs, checks, --out, result.
template <typename Reply>
void AddRunTail(JsonObject& o, const Reply& reply, const RunSummary& s) {
  o.Add("runs", s.runs).Add("warmup", s.warmup);
  if (reply.has_verification()) o.Raw("server_verification", ServerCheckJson(reply.verification()));
  if (s.client_check) o.Raw("client_check", ClientCheckJson(*s.client_check));
  if (!s.out_path.empty()) o.Add("out", s.out_path);
  if (reply.has_result()) o.Raw("result", ResidentJson(reply.result()));
}

std::string VariantText(const std::string& ran, const std::string& requested) {
  return ran == requested ? ran : absl::StrCat(ran, " (asked: ", requested, ")");
}

void RunsLine(std::ostream& out, const RunSummary& s) {
  if (s.runs > 1 || s.warmup > 0) {
    Line(out, "runs",
         absl::StrCat(s.runs, " measured after ", s.warmup, " warm-up (medians below)"));
  }
}

template <typename Reply>
void CheckAndResultLines(std::ostream& out, const Reply& reply, const RunSummary& s) {
  if (reply.has_verification()) {
    CheckLines(out, "server", reply.verification().max_abs_error(),
               reply.verification().rel_l2_error(), std::nullopt);
  }
  if (s.client_check) {
    CheckLines(out, "client", s.client_check->max_abs_error, s.client_check->rel_l2_error,
               s.client_check->nonfinite);
  }
  if (!s.out_path.empty()) Line(out, "out", s.out_path);
  if (reply.has_result()) ResidentLines(out, reply.result(), "result_");
}

}  // namespace

void PrintUpload(const v1::ResidentInfo& info, double rpc_us, bool json, std::ostream& out) {
  if (json) {
    out << JsonObject()
               .Add("command", "upload")
               .Raw("resident", ResidentJson(info))
               .Add("client_rpc_us", rpc_us)
               .str()
        << '\n';
    return;
  }
  ResidentLines(out, info, "");
  Line(out, "client_rpc_us", Fixed(rpc_us));
}

void PrintDownload(const std::string& handle, const v1::Matrix& m, const std::string& out_path,
                   double rpc_us, bool json, std::ostream& out) {
  if (json) {
    JsonObject o;
    o.Add("command", "download")
        .Add("handle", handle)
        .Add("rows", m.rows())
        .Add("cols", m.cols())
        .Add("dtype", DTypeName(m.dtype()))
        .Add("layout", LayoutName(m.layout()))
        .Add("bytes", static_cast<std::int64_t>(m.data().size()))
        .Add("client_rpc_us", rpc_us);
    if (!out_path.empty()) o.Add("out", out_path);
    out << o.str() << '\n';
    return;
  }
  Line(out, "handle", handle);
  Line(out, "shape",
       absl::StrCat(m.rows(), " x ", m.cols(), " ", std::string(DTypeName(m.dtype())), " (",
                    LayoutName(m.layout()), "-major)"));
  Line(out, "bytes", absl::StrCat(m.data().size()));
  Line(out, "client_rpc_us", Fixed(rpc_us));
  if (!out_path.empty()) Line(out, "out", out_path);
}

void PrintRelease(const std::string& handle, const v1::ReleaseReply& reply, bool json,
                  std::ostream& out) {
  if (json) {
    out << JsonObject()
               .Add("command", "release")
               .Add("handle", handle)
               .Add("bytes_freed", reply.bytes_freed())
               .str()
        << '\n';
    return;
  }
  Line(out, "handle", handle);
  Line(out, "bytes_freed", absl::StrCat(reply.bytes_freed()));
}

void PrintResidentList(const v1::ListResidentReply& reply, bool json, std::ostream& out) {
  if (json) {
    JsonArray list;
    for (const v1::ResidentInfo& r : reply.matrices()) list.Raw(ResidentJson(r));
    out << JsonObject()
               .Add("command", "resident")
               .Raw("matrices", list.str())
               .Add("total_bytes", reply.total_bytes())
               .str()
        << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"HANDLE", "ROWS", "COLS", "DTYPE", "LAYOUT", "BYTES", "DEVICE", "EXPIRES_MS"}};
  for (const v1::ResidentInfo& r : reply.matrices()) {
    rows.push_back({r.handle(), absl::StrCat(r.rows()), absl::StrCat(r.cols()),
                    std::string(DTypeName(r.dtype())), LayoutName(r.layout()),
                    absl::StrCat(r.bytes()), r.device(), absl::StrCat(r.idle_expires_in_ms())});
  }
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
  out << "total_bytes " << reply.total_bytes() << '\n';
}

void PrintHealth(const std::string& service, const std::string& status, bool json,
                 std::ostream& out) {
  if (json) {
    out << JsonObject().Add("command", "health").Add("service", service).Add("status", status).str()
        << '\n';
    return;
  }
  Line(out, "service", service.empty() ? "(server)" : service);
  Line(out, "status", status);
}

void PrintInfo(const v1::GetServerInfoReply& reply, const std::string& target, bool json,
               std::ostream& out) {
  const v1::ServerLimits& l = reply.limits();
  if (json) {
    JsonArray devices;
    for (const v1::DeviceInfo& d : reply.devices()) {
      devices.Raw(JsonObject()
                      .Add("index", d.index())
                      .Add("name", d.name())
                      .Add("compute_capability", d.compute_capability())
                      .Add("memory_total_bytes", d.memory_total_bytes())
                      .Add("memory_free_bytes", d.memory_free_bytes())
                      .Add("multiprocessors", d.multiprocessors())
                      .str());
    }
    out << JsonObject()
               .Add("command", "info")
               .Add("target", target)
               .Add("version", reply.version())
               .Add("git_sha", reply.git_sha())
               .Add("backend", reply.backend())
               .Raw("devices", devices.str())
               .Raw("limits", JsonObject()
                                  .Add("max_message_bytes", l.max_message_bytes())
                                  .Add("max_dimension", l.max_dimension())
                                  .Add("max_matrix_bytes", l.max_matrix_bytes())
                                  .Add("memory_budget_bytes", l.memory_budget_bytes())
                                  .Add("resident_ttl_ms", l.resident_ttl_ms())
                                  .str())
               .str()
        << '\n';
    return;
  }
  Line(out, "target", target);
  Line(out, "version", reply.version());
  Line(out, "git_sha", reply.git_sha());
  Line(out, "backend", reply.backend());
  Line(out, "devices", absl::StrCat(reply.devices_size()));
  for (const v1::DeviceInfo& d : reply.devices()) {
    std::string desc = d.name();
    if (!d.compute_capability().empty()) absl::StrAppend(&desc, ", cc ", d.compute_capability());
    if (d.multiprocessors() > 0) absl::StrAppend(&desc, ", ", d.multiprocessors(), " SMs");
    if (d.memory_total_bytes() > 0) {
      absl::StrAppend(&desc, ", ", Fixed(d.memory_total_bytes() / 1073741824.0, 1), " GiB total, ",
                      Fixed(d.memory_free_bytes() / 1073741824.0, 1), " GiB free");
    }
    Line(out, absl::StrCat("device ", d.index()), desc);
  }
  Line(out, "max_message_bytes", Bytes(l.max_message_bytes()));
  Line(out, "max_dimension", absl::StrCat(l.max_dimension()));
  Line(out, "max_matrix_bytes", Bytes(l.max_matrix_bytes()));
  Line(out, "memory_budget_bytes", Bytes(l.memory_budget_bytes()));
  Line(out, "resident_ttl_ms", absl::StrCat(l.resident_ttl_ms()));
}

void PrintKernels(const v1::ListKernelsReply& reply, std::optional<v1::Operation> only, bool json,
                  std::ostream& out) {
  std::vector<const v1::KernelInfo*> kernels;
  for (const v1::KernelInfo& k : reply.kernels()) {
    if (!only || k.operation() == *only) kernels.push_back(&k);
  }
  if (json) {
    JsonArray list;
    for (const v1::KernelInfo* k : kernels) {
      JsonArray precisions;
      for (const std::string& p : k->precisions()) precisions.Add(p);
      list.Raw(JsonObject()
                   .Add("name", k->name())
                   .Add("family", k->family())
                   .Add("operation", OperationName(k->operation()))
                   .Raw("precisions", precisions.str())
                   .Add("backend", k->backend())
                   .Add("constraints", k->constraints())
                   .Add("description", k->description())
                   .str());
    }
    out << JsonObject().Add("command", "kernels").Raw("kernels", list.str()).str() << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "FAMILY", "OP", "PRECISIONS", "BACKEND", "CONSTRAINTS", "DESCRIPTION"}};
  for (const v1::KernelInfo* k : kernels) {
    rows.push_back({k->name(), k->family(), std::string(OperationName(k->operation())),
                    absl::StrJoin(k->precisions(), ","), k->backend(),
                    k->constraints().empty() ? "-" : k->constraints(), k->description()});
  }
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

void PrintMultiply(const v1::MultiplyReply& reply, const RunSummary& s, bool json,
                   std::ostream& out) {
  if (json) {
    JsonObject o;
    o.Add("command", "multiply")
        .Add("target", s.target)
        .Add("variant", reply.variant())
        .Add("variant_requested", s.variant_requested)
        .Add("device", reply.device())
        .Add("precision", reply.precision())
        .Add("m", s.m)
        .Add("n", s.n)
        .Raw("k", s.k < 0 ? "null" : std::to_string(s.k))
        .Add("dtype", s.dtype)
        .Add("output_dtype", s.output_dtype)
        .Add("output_layout", s.layout)
        .Add("compute", s.compute)
        .Add("batch", s.batch)
        .Raw("timing_us", TimingJson(reply.timing(), s.rpc_us, true))
        .Add("merged_requests", reply.timing().merged_requests())
        .Add("gflops", reply.gflops());
    AddRunTail(o, reply, s);
    out << o.str() << '\n';
    return;
  }
  Line(out, "variant", VariantText(reply.variant(), s.variant_requested));
  Line(out, "device", reply.device());
  Line(out, "precision", reply.precision());
  Line(out, "shape",
       absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k < 0 ? "?" : std::to_string(s.k)));
  if (s.batch > 1) {
    Line(out, "batch",
         absl::StrCat(s.batch, " products in one MultiplyBatched call (timing, gflops: all)"));
  }
  Line(out, "data",
       absl::StrCat(s.dtype, " -> ", s.output_dtype, " (", s.layout, "-major output, compute ",
                    s.compute, ")"));
  RunsLine(out, s);
  TimingLines(out, reply.timing(), s.rpc_us, true);
  Line(out, "gflops", Fixed(reply.gflops()));
  CheckAndResultLines(out, reply, s);
}

void PrintTranspose(const v1::TransposeReply& reply, const RunSummary& s, bool json,
                    std::ostream& out) {
  if (json) {
    JsonObject o;
    o.Add("command", "transpose")
        .Add("target", s.target)
        .Add("variant", reply.variant())
        .Add("variant_requested", s.variant_requested)
        .Add("device", reply.device())
        .Add("rows", s.m)
        .Add("cols", s.n)
        .Add("dtype", s.dtype)
        .Add("layout", s.layout)
        .Raw("timing_us", TimingJson(reply.timing(), s.rpc_us, false))
        .Add("gb_per_s", reply.gb_per_s());
    AddRunTail(o, reply, s);
    out << o.str() << '\n';
    return;
  }
  Line(out, "variant", VariantText(reply.variant(), s.variant_requested));
  Line(out, "device", reply.device());
  Line(out, "shape", absl::StrCat(s.m, " x ", s.n, " -> ", s.n, " x ", s.m));
  Line(out, "data", absl::StrCat(s.dtype, " (", s.layout, "-major)"));
  RunsLine(out, s);
  TimingLines(out, reply.timing(), s.rpc_us, false);
  Line(out, "gb_per_s", Fixed(reply.gb_per_s(), 2));
  CheckAndResultLines(out, reply, s);
}

}  // namespace matserve::client::cli
