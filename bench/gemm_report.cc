// JSON, Markdown and autotune outputs of gemm_bench; see gemm_report.h.
#include "bench/gemm_report.h"

#include <cstdio>
#include <map>
#include <set>

#include "kernels/types.h"

namespace matserve::bench {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string num(double v, const char* fmt = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Distinct values in first-seen order.
template <typename F>
std::vector<std::string> ordered(const std::vector<GemmResult>& rs, F key) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const GemmResult& r : rs) {
    if (seen.insert(key(r)).second) out.push_back(key(r));
  }
  return out;
}

}  // namespace

std::string to_json(const GemmBenchRun& run) {
  std::string o = "{\n";
  o += "  \"device\": " + quote(run.device) + ",\n";
  o += "  \"date\": " + quote(run.date) + ",\n";
  o += "  \"command\": " + quote(run.command) + ",\n";
  o += "  \"trans\": " + quote(run.trans) + ",\n";
  o += "  \"copy_gbps\": " + num(run.copy_gbps) + ",\n";
  o += "  \"results\": [\n";
  for (std::size_t i = 0; i < run.results.size(); ++i) {
    const GemmResult& r = run.results[i];
    o += "    {\"precision\": " + quote(r.precision) + ", \"family\": " + quote(r.shape.family) +
         ", \"shape\": " + quote(r.shape.label()) + ", \"m\": " + std::to_string(r.shape.m) +
         ", \"n\": " + std::to_string(r.shape.n) + ", \"k\": " + std::to_string(r.shape.k) +
         ", \"variant\": " + quote(r.variant) + ", \"chosen\": " + quote(r.chosen) +
         ", \"status\": " + quote(r.status) + ", \"median_ms\": " + num(r.median_ms) +
         ", \"min_ms\": " + num(r.min_ms) + ", \"reps\": " + std::to_string(r.reps) +
         ", \"gflops\": " + num(r.gflops) + ", \"ratio_to_cublas\": " + num(r.ratio_to_cublas) +
         ", \"rel_err_vs_cublas\": " + num(r.rel_err_vs_cublas) + "}";
    o += i + 1 < run.results.size() ? ",\n" : "\n";
  }
  o += "  ]\n}\n";
  return o;
}

std::string to_markdown(const GemmBenchRun& run) {
  std::string o = "# gemm_bench: " + run.device + ", " + run.date + "\n\n";
  o += "Command: `" + run.command + "`\n\n";
  o += "Operand orders " + run.trans +
       "; cells: GFLOP/s (share of cuBLAS in the same run, same "
       "precision; fp32 cuBLAS is pedantic: no tensor cores). Median of timed runs after warm-up. "
       "Device-to-device copy: " +
       num(run.copy_gbps, "%.0f") + " GB/s.\n";
  const auto precisions = ordered(run.results, [](const GemmResult& r) { return r.precision; });
  const auto families = ordered(run.results, [](const GemmResult& r) { return r.shape.family; });
  for (const std::string& prec : precisions) {
    for (const std::string& fam : families) {
      std::vector<GemmResult> rs;
      for (const GemmResult& r : run.results) {
        if (r.precision == prec && r.shape.family == fam) rs.push_back(r);
      }
      if (rs.empty()) continue;
      const auto shapes = ordered(rs, [](const GemmResult& r) { return r.shape.label(); });
      const auto variants = ordered(rs, [](const GemmResult& r) { return r.variant; });
      std::map<std::pair<std::string, std::string>, const GemmResult*> cell;
      for (const GemmResult& r : rs) cell[{r.variant, r.shape.label()}] = &r;
      o += "\n## " + prec + ", " + fam + "\n\n| variant |";
      for (const auto& s : shapes) o += " " + s + " |";
      o += "\n|---|";
      for (std::size_t i = 0; i < shapes.size(); ++i) o += "---:|";
      o += "\n";
      for (const auto& v : variants) {
        o += "| " + v + " |";
        for (const auto& s : shapes) {
          auto it = cell.find({v, s});
          if (it == cell.end()) {
            o += " |";
            continue;
          }
          const GemmResult& r = *it->second;
          if (r.status != "ok") {
            o += " " + r.status.substr(0, r.status.find(':')) + " |";
            continue;
          }
          o += " " + num(r.gflops, "%.0f");
          if (r.ratio_to_cublas > 0) o += " (" + num(100.0 * r.ratio_to_cublas, "%.0f") + "%)";
          if (!r.chosen.empty()) o += " " + r.chosen;
          o += " |";
        }
        o += "\n";
      }
    }
  }
  return o;
}

kernels::AutotuneTable to_autotune(const GemmBenchRun& run, double max_rel_err_fp32,
                                   double max_rel_err_fp64) {
  kernels::AutotuneTable t;
  for (const GemmResult& r : run.results) {
    if (r.variant == "auto" || r.status != "ok" || r.gflops <= 0) continue;
    auto prec = kernels::parse_precision_name(r.precision);
    if (!prec.ok()) continue;
    const double tol = *prec == kernels::Precision::kF64 ? max_rel_err_fp64 : max_rel_err_fp32;
    if (r.variant != "cublas" && !(r.rel_err_vs_cublas >= 0 && r.rel_err_vs_cublas < tol)) continue;
    t.add({run.device, *prec, kernels::gemm_shape_class(r.shape.m, r.shape.n, r.shape.k), r.variant,
           r.gflops});
  }
  return t;
}

}  // namespace matserve::bench
