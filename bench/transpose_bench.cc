// Transpose benchmark: every CUDA transpose variant in the registry (cublas_geam included) on the
// thesis's shape families (square up to 16384^2, wide, tall, extremely thin), against a
// device-to-device cudaMemcpy of the same bytes measured in the same run. CUDA events around
// each launch, warm-up first, median of many runs, buffers rotated so that no run is served by L2.
// Writes JSON and a Markdown table; progress goes to stderr.
//
// usage: transpose_bench [--json FILE] [--md FILE] [--quick] [--tune] [--profile]
// (--tune: a short list of shapes with every tuning configuration, for choosing defaults;
// --profile: a few untimed launches of the main kernels, for ncu)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "kernels/transpose/transpose_kernels.h"
#include "tests/support/random_matrix.h"

namespace matserve::kernels {
namespace {

struct Case {
  std::string family;
  std::int64_t rows, cols;
  DType dtype;
  bool sweep = false;       // also time transpose_vectorized's other configurations
  bool sweep_rect = false;  // also time transpose_inplace_rect's other strip batches
};

struct Result {
  Case c;
  std::string variant;
  bool ran = false;
  std::string note;
  double median_ms = 0, min_ms = 0, gbps = 0, copy_gbps = 0, ratio = 0;
  int reps = 0;
};

bool g_tune = false;  // --tune: the tuning list (more configurations, fewer shapes)

struct VecSweep {
  std::string name;
  VectorizedConfig cfg;
};

// transpose_vectorized's configurations other than its default (the registry row).
std::vector<VecSweep> vectorized_sweep(bool tune) {
  auto cfg = [](int k, int order, int lh, int sh, bool pers) {
    VectorizedConfig c;
    c.tiles_per_block = k;
    c.order = order;
    c.load_hint = lh;
    c.store_hint = sh;
    c.persistent = pers;
    return c;
  };
  std::vector<VecSweep> all = {
      {"k=1 row", cfg(1, kOrderRow, 0, 0, false)},
      {"k=2 row", cfg(2, kOrderRow, 0, 0, false)},
      {"k=2 diagonal", cfg(2, kOrderDiagonal, 0, 0, false)},
      {"k=2 column", cfg(2, kOrderCol, 0, 0, false)},
      {"mirror", cfg(2, kOrderMirror, 0, 0, false)},  // the default before 2026-11-21
      {"mirror ld.nc", cfg(2, kOrderMirror, 1, 0, false)},
      {"mirror st.cs", cfg(2, kOrderMirror, 0, 1, false)},
      {"mirror ld.nc st.cs", cfg(2, kOrderMirror, 1, 1, false)},
      {"mirror ld.cs st.cs", cfg(2, kOrderMirror, 2, 1, false)},
      {"mirror ld.nc st.cg", cfg(2, kOrderMirror, 1, 2, false)},
      {"mirror persistent", cfg(2, kOrderMirror, 0, 0, true)},
      {"mirror ld.nc st.cs persistent", cfg(2, kOrderMirror, 1, 1, true)},
      {"k=2 row ld.nc st.cs", cfg(2, kOrderRow, 1, 1, false)},
      {"k=2 column ld.nc st.cs", cfg(2, kOrderCol, 1, 1, false)},
      {"k=1 column ld.nc st.cs", cfg(1, kOrderCol, 1, 1, false)},
      {"k=1 column (no hints)", cfg(1, kOrderCol, 0, 0, false)},
      {"k=1 row ld.nc st.cs", cfg(1, kOrderRow, 1, 1, false)},
      {"k=1 diagonal ld.nc st.cs", cfg(1, kOrderDiagonal, 1, 1, false)},
      {"k=1 column st.cs", cfg(1, kOrderCol, 0, 1, false)},
      {"k=1 column ld.nc", cfg(1, kOrderCol, 1, 0, false)},
      {"k=1 column ld.cs st.cs", cfg(1, kOrderCol, 2, 1, false)},
      {"k=1 column ld.nc st.cg", cfg(1, kOrderCol, 1, 2, false)},
      {"k=1 column ld.nc st.cs persistent", cfg(1, kOrderCol, 1, 1, true)},
  };
  // Outside --tune: the previous default, the hints one at a time, and the order.
  const char* short_list[] = {"mirror", "mirror ld.nc st.cs", "k=1 column (no hints)",
                              "k=2 column ld.nc st.cs", "k=1 row ld.nc st.cs"};
  std::vector<VecSweep> out;
  for (const VecSweep& v : all) {
    const VectorizedConfig& d = kVectorizedDefault;
    const VectorizedConfig& c = v.cfg;
    if (c.tiles_per_block == d.tiles_per_block && c.order == d.order &&
        c.load_hint == d.load_hint && c.store_hint == d.store_hint &&
        c.persistent == d.persistent) {
      continue;  // = the registry row
    }
    if (!tune &&
        std::find(std::begin(short_list), std::end(short_list), v.name) == std::end(short_list)) {
      continue;
    }
    out.push_back(v);
  }
  return out;
}

std::vector<Case> cases(bool quick) {
  if (g_tune) {
    return {{"square", 8192, 8192, DType::kF32, true},
            {"square", 16384, 16384, DType::kF32, true},
            {"square", 8192, 8192, DType::kF16, true},
            {"square", 8192, 8192, DType::kF64, true},
            {"wide", 2048, 8192, DType::kF32, true, true},
            {"tall", 16384, 1024, DType::kF32, false, true},
            {"square", 4095, 4097, DType::kF32, true, true},
            {"square", 8191, 8193, DType::kF32, true},
            {"thin", 100000, 100, DType::kF32, false, true}};
  }
  std::vector<Case> out;
  for (std::int64_t n : {1024, 2048, 4096, 8192, 16384}) {
    if (quick && n > 8192) continue;
    out.push_back({"square", n, n, DType::kF32, n >= 4096});
  }
  out.push_back({"square", 8192, 8192, DType::kF64, true});
  out.push_back({"square", 8192, 8192, DType::kF16, true});
  out.push_back({"square", 8192, 8192, DType::kBF16});
  out.push_back({"square", 4095, 4097, DType::kF32, false, true});
  out.push_back({"wide", 1024, 16384, DType::kF32});
  out.push_back({"wide", 2048, 8192, DType::kF32, true, true});
  out.push_back({"tall", 16384, 1024, DType::kF32, true, true});
  out.push_back({"tall", 8192, 2048, DType::kF32});
  out.push_back({"wide", 4096, 12288, DType::kF32});
  out.push_back({"tall", 12288, 4096, DType::kF16});
  out.push_back({"thin", 10000, 100, DType::kF32});
  out.push_back({"thin", 100, 10000, DType::kF32});
  out.push_back({"thin", 100000, 100, DType::kF32});
  out.push_back({"thin", 100, 100000, DType::kF32});
  return out;
}

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `run(k)` (k = run index) with events: warm-up, then runs until ~0.25 s or 200 runs (at
// least 15). `timed(k)` says which runs count (in-place rectangular runs alternate direction).
template <typename Run, typename Timed>
std::optional<std::vector<double>> time_runs(cudaStream_t s, Run&& run, Timed&& timed) {
  auto e0 = create_event();
  auto e1 = create_event();
  if (!e0.ok() || !e1.ok()) return std::nullopt;
  for (int k = 0; k < 4; ++k) {
    if (!run(k)) return std::nullopt;
  }
  if (!check(cudaStreamSynchronize(s), "warm-up")) return std::nullopt;
  std::vector<double> ms;
  double total = 0;
  for (int k = 0; k < 400; ++k) {
    const bool t = timed(k);
    if (t) cudaEventRecord(e0->get(), s);
    if (!run(k)) return std::nullopt;
    if (!t) continue;
    cudaEventRecord(e1->get(), s);
    if (!check(cudaEventSynchronize(e1->get()), "event")) return std::nullopt;
    float x = 0;
    cudaEventElapsedTime(&x, e0->get(), e1->get());
    ms.push_back(x);
    total += x;
    if ((ms.size() >= 15 && total > 250.0) || ms.size() >= 200) break;
  }
  return ms;
}

std::string shape_str(const Case& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols);
}

void bench_case(const Case& c, const StreamResources& res, std::vector<Result>& results) {
  const std::int64_t count = c.rows * c.cols;
  const std::size_t elem = dtype_size(c.dtype);
  const std::size_t bytes = static_cast<std::size_t>(count) * elem;
  // Rotate among enough buffer sets that consecutive runs touch >= 256 MiB (L2 is 50 MiB).
  const int sets =
      static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / (2 * bytes) + 1, 1, 16));
  std::vector<DeviceBuffer> ins, outs;
  // Random non-zero data: a 1 Mi-element block, repeated over the buffer.
  const std::int64_t block = std::min<std::int64_t>(count, 1 << 20);
  const std::vector<std::byte> host = testing::random_matrix(block, c.dtype, 42);
  for (int k = 0; k < sets; ++k) {
    auto in = allocate_device(bytes);
    auto out = allocate_device(bytes);
    if (!in.ok() || !out.ok()) {
      std::fprintf(stderr, "allocation failed for %s\n", shape_str(c).c_str());
      return;
    }
    for (std::size_t off = 0; off < bytes; off += host.size()) {
      const std::size_t n = std::min(host.size(), bytes - off);
      check(
          cudaMemcpy(static_cast<char*>(in->data()) + off, host.data(), n, cudaMemcpyHostToDevice),
          "fill");
    }
    check(cudaMemcpy(out->data(), in->data(), bytes, cudaMemcpyDeviceToDevice), "fill out");
    check(cudaDeviceSynchronize(), "fill sync");  // pageable copies may still be in flight
    ins.push_back(*std::move(in));
    outs.push_back(*std::move(out));
  }
  const cudaStream_t s = res.stream();
  const double moved = 2.0 * static_cast<double>(bytes);  // bytes read + bytes written

  auto copy_ms = time_runs(
      s,
      [&](int k) {
        return check(cudaMemcpyAsync(outs[k % sets].data(), ins[k % sets].data(), bytes,
                                     cudaMemcpyDeviceToDevice, s),
                     "copy");
      },
      [](int) { return true; });
  if (!copy_ms) return;
  const double copy_med = median(*copy_ms);
  const double copy_gbps = moved / (copy_med * 1e6);
  std::fprintf(stderr, "%-6s %-12s %-4s copy           %8.4f ms %7.1f GB/s\n", c.family.c_str(),
               shape_str(c).c_str(), std::string(dtype_name(c.dtype)).c_str(), copy_med, copy_gbps);
  {
    Result r;
    r.c = c;
    r.variant = "cudaMemcpy D2D";
    r.ran = true;
    r.median_ms = copy_med;
    r.min_ms = *std::min_element(copy_ms->begin(), copy_ms->end());
    r.gbps = copy_gbps;
    r.copy_gbps = copy_gbps;
    r.ratio = 1.0;
    r.reps = static_cast<int>(copy_ms->size());
    results.push_back(r);
  }

  // The registry's CUDA variants, then (in sweep cases) the tuned kernels' other configurations.
  struct Entry {
    std::string name;
    const TransposeVariant* v;  // null: a configuration launched through `fn`
    bool in_place = false;
    std::function<cudaError_t(const TransposeProblem&, cudaStream_t)> fn;
  };
  std::vector<Entry> entries;
  for (const TransposeVariant& v : transpose_variants()) {
    if (v.backend == Backend::kCuda) entries.push_back({std::string(v.name), &v, v.in_place, {}});
  }
  if (c.sweep) {
    for (const VecSweep& vs : vectorized_sweep(g_tune)) {
      const VectorizedConfig cfg = vs.cfg;
      entries.push_back({"sweep: vectorized " + vs.name, nullptr, false,
                         [cfg](const TransposeProblem& p, cudaStream_t st) {
                           return launch_transpose_vectorized_tuned(p, cfg, st);
                         }});
    }
  }
  // In-place rectangular with scratch from the benchmark (what a server can lend a resident
  // matrix): with about half the matrix (it chooses the stage count), and at each stage count.
  std::optional<DeviceBuffer> rect_scratch;
  // (k = 1 needs a little more than the matrix: panel rows padded to 16 bytes, 256-byte slots.)
  const std::size_t rect_bytes = bytes + bytes / 16 + (std::size_t{1} << 20);
  if (c.rows != c.cols && c.rows > 1 && c.cols > 1) {
    auto sb = allocate_device(rect_bytes);
    if (sb.ok()) rect_scratch = *std::move(sb);
  }
  void* scratch_ptr = rect_scratch ? rect_scratch->data() : nullptr;
  if (rect_scratch) {
    // What the server lends a resident matrix too large for the workspace: the scratch of the
    // staged sweep at its preferred stage count (transpose_inplace_rect_recommended_scratch),
    // through the same entry point as the registry (launch_transpose_inplace_rect).
    const TransposeProblem p0 =
        canonicalize_transpose(c.rows, c.cols, Layout::kRowMajor, c.dtype, nullptr, nullptr, 1.0);
    const std::size_t lend = transpose_inplace_rect_recommended_scratch(p0);
    if (lend > 0 && lend <= rect_bytes) {
      const int k = transpose_inplace_rect_staged_choose(p0, lend);
      char label[128];
      std::snprintf(label, sizeof label, "inplace_rect + lent scratch %.1f MiB (staged k=%d)",
                    static_cast<double>(lend) / (1 << 20), k);
      entries.push_back(
          {label, nullptr, true, [scratch_ptr, lend](const TransposeProblem& p, cudaStream_t st) {
             return launch_transpose_inplace_rect(p, scratch_ptr, lend, st);
           }});
    }
  }
  if (c.sweep_rect && rect_scratch) {
    for (int k : {1, 2, 4, 8, 16}) {
      entries.push_back({"sweep: inplace_rect staged k=" + std::to_string(k), nullptr, true,
                         [scratch_ptr, rect_bytes, k](const TransposeProblem& p, cudaStream_t st) {
                           return launch_transpose_inplace_rect_staged(p, scratch_ptr, rect_bytes,
                                                                       k, st);
                         }});
    }
    for (std::size_t mib : {4, 8, 32}) {
      entries.push_back({"sweep: inplace_rect decomposition batch=" + std::to_string(mib) + "MiB",
                         nullptr, true, [&res, mib](const TransposeProblem& p, cudaStream_t st) {
                           const ExecContext cx = res.context();
                           return launch_transpose_inplace_rect_config(
                               p, cx.workspace, cx.workspace_bytes, mib << 20, st);
                         }});
    }
  }
  for (const Entry& en : entries) {
    Result r;
    r.c = c;
    r.variant = en.name;
    r.copy_gbps = copy_gbps;
    const bool square = c.rows == c.cols;
    const bool in_place = en.in_place;
    // Problem for run k: out-of-place in -> out; in place on outs[], alternating direction for
    // rectangular shapes (the even runs, rows x cols -> cols x rows, are the timed ones).
    auto problem = [&](int k) {
      const int set = in_place && !square ? (k / 2) % sets : k % sets;
      if (!in_place) {
        return canonicalize_transpose(c.rows, c.cols, Layout::kRowMajor, c.dtype, ins[set].data(),
                                      outs[set].data(), 1.0);
      }
      const bool back = !square && (k % 2 == 1);
      return canonicalize_transpose(back ? c.cols : c.rows, back ? c.rows : c.cols,
                                    Layout::kRowMajor, c.dtype, outs[set].data(), outs[set].data(),
                                    1.0);
    };
    if (en.v != nullptr) {
      if (absl::Status st = check_transpose_variant(*en.v, problem(0)); !st.ok()) {
        r.note = "n/a: " + std::string(st.message());
        results.push_back(r);
        continue;
      }
    }
    const ExecContext ctx = res.context();
    auto ms = time_runs(
        s,
        [&](int k) {
          absl::Status st;
          if (en.v != nullptr) {
            st = en.v->launch(problem(k), ctx);
          } else {
            st = cuda_status(en.fn(problem(k), s), "sweep");
          }
          if (!st.ok())
            std::fprintf(stderr, "%s: %s\n", en.name.c_str(), std::string(st.message()).c_str());
          return st.ok();
        },
        [&](int k) { return !(in_place && !square) || k % 2 == 0; });
    if (!ms || !check(cudaGetLastError(), "variant")) {
      r.note = "failed";
      results.push_back(r);
      continue;
    }
    r.ran = true;
    if (en.v != nullptr && en.name == "transpose_inplace_rect" && !square) {
      // Which path the registry took with the stream's workspace.
      const ExecContext cx = res.context();
      const int k = transpose_inplace_rect_staged_choose(problem(0), cx.workspace_bytes);
      char path[96];
      std::snprintf(path, sizeof path, "%s (%.0f MiB workspace)",
                    k > 0 ? ("staged k=" + std::to_string(k)).c_str() : "decomposition fallback",
                    static_cast<double>(cx.workspace_bytes) / (1 << 20));
      r.note = path;
    }
    r.median_ms = median(*ms);
    r.min_ms = *std::min_element(ms->begin(), ms->end());
    r.gbps = moved / (r.median_ms * 1e6);
    r.ratio = r.gbps / copy_gbps;
    r.reps = static_cast<int>(ms->size());
    std::fprintf(stderr, "%-6s %-12s %-4s %-44s %8.4f ms %7.1f GB/s %6.1f%% of copy\n",
                 c.family.c_str(), shape_str(c).c_str(), std::string(dtype_name(c.dtype)).c_str(),
                 r.variant.c_str(), r.median_ms, r.gbps, 100.0 * r.ratio);
    results.push_back(r);
  }
}

// --profile: a few launches of the main kernels at 8192^2 fp32 (the default vectorized kernel
// also on fp16 and fp64 of the same bytes, the in-place square one on fp16 8192^2, and the staged
// in-place rectangular sweep at 2048 x 8192), nothing timed: a short target for Nsight Compute.
int profile(const StreamResources& res) {
  const std::int64_t n = 8192;
  const std::size_t bytes = static_cast<std::size_t>(n * n) * 4;
  auto in = allocate_device(bytes);
  auto out = allocate_device(bytes);
  auto scratch = allocate_device(bytes);
  if (!in.ok() || !out.ok() || !scratch.ok()) return 1;
  cudaMemset(in->data(), 0x3c, bytes);
  cudaMemset(out->data(), 0x3c, bytes);
  const cudaStream_t s = res.stream();
  const ExecContext ctx = res.context();
  const TransposeProblem p =
      canonicalize_transpose(n, n, Layout::kRowMajor, DType::kF32, in->data(), out->data(), 1.0);
  const TransposeProblem ip =
      canonicalize_transpose(n, n, Layout::kRowMajor, DType::kF32, out->data(), out->data(), 1.0);
  for (const char* name : {"transpose_tiled", "transpose_vectorized", "cublas_geam"}) {
    if (const TransposeVariant* v = find_transpose_variant(name)) {
      for (int k = 0; k < 2; ++k) (void)v->launch(p, ctx);
    }
  }
  for (int k = 0; k < 2; ++k) launch_transpose_inplace_square(ip, s);
  for (const VecSweep& vs : vectorized_sweep(true)) {
    if (vs.name.find("ld.nc st.cs") == std::string::npos && vs.name != "k=2 column") continue;
    launch_transpose_vectorized_tuned(p, vs.cfg, s);
  }
  // The other element sizes at the same byte count: fp16 16384 x 8192 and fp64 8192 x 4096.
  for (auto [dt, r, c] : {std::tuple{DType::kF16, n * 2, n}, {DType::kF64, n, n / 2}}) {
    const TransposeProblem q =
        canonicalize_transpose(r, c, Layout::kRowMajor, dt, in->data(), out->data(), 1.0);
    launch_transpose_vectorized(q, s);
  }
  const TransposeProblem h =  // in place, fp16 8192^2 (half the bytes)
      canonicalize_transpose(n, n, Layout::kRowMajor, DType::kF16, out->data(), out->data(), 1.0);
  launch_transpose_inplace_square(h, s);
  const TransposeProblem rp = canonicalize_transpose(2048, 8192, Layout::kRowMajor, DType::kF32,
                                                     out->data(), out->data(), 1.0);
  launch_transpose_inplace_rect_staged(rp, scratch->data(), bytes, 8, s);
  return check(cudaStreamSynchronize(s), "profile") ? 0 : 1;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

void write_json(const std::string& path, const std::vector<Result>& rs, const std::string& dev) {
  std::ofstream f(path);
  f << "{\n  \"device\": \"" << json_escape(dev) << "\",\n  \"results\": [\n";
  for (std::size_t k = 0; k < rs.size(); ++k) {
    const Result& r = rs[k];
    f << "    {\"family\": \"" << r.c.family << "\", \"rows\": " << r.c.rows
      << ", \"cols\": " << r.c.cols << ", \"dtype\": \"" << dtype_name(r.c.dtype)
      << "\", \"variant\": \"" << r.variant << "\", \"ran\": " << (r.ran ? "true" : "false")
      << ", \"median_ms\": " << r.median_ms << ", \"min_ms\": " << r.min_ms
      << ", \"gbps\": " << r.gbps << ", \"copy_gbps\": " << r.copy_gbps
      << ", \"ratio_to_copy\": " << r.ratio << ", \"reps\": " << r.reps << ", \"note\": \""
      << json_escape(r.note) << "\"}" << (k + 1 < rs.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

void write_markdown(const std::string& path, const std::vector<Result>& rs) {
  std::ofstream f(path);
  f << "| family | shape | dtype | variant | median ms | GB/s | % of copy | runs | path |\n"
    << "|---|---|---|---|---:|---:|---:|---:|---|\n";
  char line[512];
  for (const Result& r : rs) {
    if (!r.ran) {
      std::snprintf(line, sizeof line, "| %s | %s | %s | %s | - | - | n/a | - | %s |\n",
                    r.c.family.c_str(), shape_str(r.c).c_str(),
                    std::string(dtype_name(r.c.dtype)).c_str(), r.variant.c_str(),
                    r.note.substr(0, 60).c_str());
    } else {
      std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %.4f | %.0f | %.1f%% | %d | %s |\n",
                    r.c.family.c_str(), shape_str(r.c).c_str(),
                    std::string(dtype_name(r.c.dtype)).c_str(), r.variant.c_str(), r.median_ms,
                    r.gbps, 100.0 * r.ratio, r.reps, r.note.c_str());
    }
    f << line;
  }
}

int run(int argc, char** argv) {
  std::string json = "transpose_bench.json", md = "transpose_bench.md";
  bool quick = false, do_profile = false;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    if (a == "--json" && k + 1 < argc)
      json = argv[++k];
    else if (a == "--md" && k + 1 < argc)
      md = argv[++k];
    else if (a == "--quick")
      quick = true;
    else if (a == "--tune")
      g_tune = true;
    else if (a == "--profile")
      do_profile = true;
    else {
      std::fprintf(
          stderr,
          "usage: transpose_bench [--json FILE] [--md FILE] [--quick] [--tune] [--profile]\n");
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "transpose_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  auto res = StreamResources::create();
  if (!res.ok()) {
    std::fprintf(stderr, "stream resources: %s\n", std::string(res.status().message()).c_str());
    return 1;
  }
  if (do_profile) return profile(*res);
  std::vector<Result> results;
  for (const Case& c : cases(quick)) bench_case(c, *res, results);
  write_json(json, results, prop.name);
  write_markdown(md, results);
  std::fprintf(stderr, "wrote %s and %s\n", json.c_str(), md.c_str());
  return 0;
}

}  // namespace
}  // namespace matserve::kernels

int main(int argc, char** argv) {
  return matserve::kernels::run(argc, argv);
}
