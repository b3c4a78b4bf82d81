// LaunchGraphs on the GPU: every CUDA GEMM and transpose variant captured as a graph and replayed
// gives, bit for bit, what its direct launch gives; a replay reads the buffers' contents at run
// time (new operands in the same buffers give the new product); launch code that cannot run under
// capture or fails is left to run directly; the cache stays within its bound. Skips (visibly)
// without a GPU. MATSERVE_TEST_VARIANTS=a,b limits the variants.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/reference.h"
#include "kernels/cuda/launch_graphs.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "tests/support/gemm_bound.h"
#include "tests/support/gpu_gemm_setup.h"
#include "tests/support/precision_cases.h"
#include "tests/support/random_matrix.h"
#include "tests/support/variant_filter.h"

namespace matserve::kernels {
namespace {

using testing::data_type;

std::vector<std::byte> download(const DeviceBuffer& d) {
  std::vector<std::byte> out(d.size());
  EXPECT_EQ(cudaMemcpy(out.data(), d.data(), d.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void upload(const DeviceBuffer& d, const std::vector<std::byte>& host) {
  ASSERT_EQ(cudaMemcpy(d.data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the variants run on a non-blocking stream
}

class LaunchGraphsGpu : public testing::WithGpuStream<> {
 protected:
  cudaStream_t stream() const { return resources_->stream(); }

  // Direct launch, then a captured graph, then a replay of that graph on new A: the first two
  // agree bit for bit and both match the float64 reference, as does the replay for its inputs.
  void check_gemm(const GemmVariant& v, Precision prec, std::int64_t m, std::int64_t n,
                  std::int64_t k, bool ta, bool tb, double beta, std::uint64_t seed) {
    const DType t = data_type(prec);
    GemmProblem p = testing::dense_problem(m, n, k, ta, tb, t, t, prec, /*alpha=*/0.5, beta);
    if (!check_gemm_variant(v, p).ok()) return;
    const std::string what = std::string(v.name) + " " + std::string(precision_name(prec)) + " " +
                             std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                             (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                             " beta=" + std::to_string(beta);
    const auto a = testing::random_matrix(m * k, t, seed);
    const auto a2 = testing::random_matrix(m * k, t, seed + 10);
    const auto b = testing::random_matrix(k * n, t, seed + 1);
    auto c = testing::random_matrix(m * n, t, seed + 2);
    if (beta == 0.0) testing::poison(c.data(), c.size());  // never read: NaN where unwritten
    auto da = testing::to_device(a);
    auto db = testing::to_device(b);
    auto dc = testing::to_device(c);
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
    p.a = da->data();
    p.b = db->data();
    p.c = dc->data();
    const auto expect_reference = [&](const std::vector<std::byte>& host_a,
                                      const std::vector<std::byte>& out, const char* run) {
      GemmProblem h = p;
      h.a = host_a.data();
      h.b = b.data();
      const testing::GemmCheck e = testing::check_gemm(
          h, out.data(), n, reference_gemm(h, c.data()), testing::gemm_magnitude(h, c.data()));
      EXPECT_TRUE(e.ok()) << what << " " << run << ": " << e.summary();
    };

    ASSERT_TRUE(v.launch(p, resources_->context()).ok()) << what;
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess) << what;
    const std::vector<std::byte> direct = download(*dc);
    expect_reference(a, direct, "direct");

    upload(*dc, c);
    LaunchGraphs graphs(8);
    LaunchKey key;
    key.add(v.name).add(p);
    const auto enqueue = [&] { return v.launch(p, resources_->context()); };
    absl::StatusOr<LaunchGraphs::Prepared> g = graphs.prepare(key, stream(), enqueue);
    ASSERT_TRUE(g.ok()) << what << ": " << g.status();
    ASSERT_NE(g->exec, nullptr) << what << ": the launch code could not be captured";
    EXPECT_TRUE(g->captured_now) << what;
    ASSERT_TRUE(LaunchGraphs::launch(g->exec, stream()).ok()) << what;
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess) << what;
    const std::vector<std::byte> replayed = download(*dc);
    EXPECT_EQ(std::memcmp(replayed.data(), direct.data(), direct.size()), 0)
        << what << ": the graph computed something else than the direct launch";

    upload(*da, a2);
    upload(*dc, c);
    absl::StatusOr<LaunchGraphs::Prepared> again = graphs.prepare(key, stream(), enqueue);
    ASSERT_TRUE(again.ok()) << what;
    EXPECT_EQ(again->exec, g->exec) << what;
    EXPECT_FALSE(again->captured_now) << what;
    ASSERT_TRUE(LaunchGraphs::launch(again->exec, stream()).ok()) << what;
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess) << what;
    expect_reference(a2, download(*dc), "replay on new A");
    EXPECT_EQ(graphs.stats().captures, 1) << what;
    EXPECT_EQ(graphs.stats().replays, 1) << what;
    ++checked_;
  }

  int checked_ = 0;
};

TEST_F(LaunchGraphsGpu, EveryGemmVariantReplaysWhatItLaunchesDirectly) {
  std::uint64_t seed = 4242;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.backend != Backend::kCuda || !testing::variant_selected(v.name)) continue;
    for (Precision prec : kEveryPrecision) {
      // fp8 has its own scaled-reference test (tensor_core_fp8_gpu_test).
      if (prec == Precision::kF8 || !v.supports(prec)) continue;
      if (!v.capturable) continue;
      const int before = checked_;
      // An odd shape, then one aligned to every tile for the variants that need it; every
      // operand order, with and without C.
      for (auto [m, n, k] : {std::array<std::int64_t, 3>{67, 45, 29}, {256, 512, 128}}) {
        for (int t = 0; t < 4; ++t) {
          for (double beta : {2.0, 0.0}) check_gemm(v, prec, m, n, k, t & 1, t & 2, beta, seed++);
        }
      }
      EXPECT_GT(checked_, before) << v.name << " " << precision_name(prec) << ": no shape ran";
    }
  }
  if (checked_ == 0) GTEST_SKIP() << "no CUDA GEMM variant selected";
}

TEST_F(LaunchGraphsGpu, EveryTransposeVariantReplaysWhatItLaunchesDirectly) {
  int checked = 0;
  std::uint64_t seed = 77;
  for (const TransposeVariant& v : transpose_variants()) {
    if (v.backend != Backend::kCuda || !testing::variant_selected(v.name)) continue;
    for (auto [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{97, 61}, {256, 256}, {128, 384}}) {
      const auto in = testing::random_matrix(rows * cols, DType::kF32, seed++);
      const auto in2 = testing::random_matrix(rows * cols, DType::kF32, seed++);
      auto din = allocate_device(in.size());
      auto dout = allocate_device(in.size());
      ASSERT_TRUE(din.ok() && dout.ok());
      TransposeProblem p =
          canonicalize_transpose(rows, cols, Layout::kRowMajor, DType::kF32, din->data(),
                                 v.in_place ? din->data() : dout->data(), 1.0);
      if (!check_transpose_variant(v, p).ok()) continue;
      const std::string what =
          std::string(v.name) + " " + std::to_string(rows) + "x" + std::to_string(cols);
      const DeviceBuffer& result = v.in_place ? *din : *dout;
      const auto run_direct = [&](const std::vector<std::byte>& input) {
        upload(*din, input);
        EXPECT_TRUE(v.launch(p, resources_->context()).ok()) << what;
        EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess) << what;
        return download(result);
      };
      const std::vector<std::byte> direct = run_direct(in);
      const std::vector<std::byte> direct2 = run_direct(in2);

      LaunchGraphs graphs(8);
      LaunchKey key;
      key.add(v.name).add(p);
      const auto enqueue = [&] { return v.launch(p, resources_->context()); };
      const auto run_graph = [&](const std::vector<std::byte>& input) {
        upload(*din, input);
        absl::StatusOr<LaunchGraphs::Prepared> g = graphs.prepare(key, stream(), enqueue);
        EXPECT_TRUE(g.ok() && g->exec != nullptr) << what << ": not captured";
        if (g.ok() && g->exec != nullptr) {
          EXPECT_TRUE(LaunchGraphs::launch(g->exec, stream()).ok()) << what;
        }
        EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess) << what;
        return download(result);
      };
      EXPECT_EQ(run_graph(in), direct) << what << ": captured graph differs from direct launch";
      EXPECT_EQ(run_graph(in2), direct2) << what << ": replay on new input differs";
      EXPECT_EQ(graphs.stats().captures, 1) << what;
      // The transposes are exact: the direct result is in^T element for element.
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          ASSERT_EQ(
              std::memcmp(direct.data() + 4 * (j * rows + i), in.data() + 4 * (i * cols + j), 4), 0)
              << what << " at " << i << "," << j;
        }
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no CUDA transpose variant selected";
}

TEST_F(LaunchGraphsGpu, UncapturableLaunchCodeIsLeftToRunDirectlyAndTheStreamStillWorks) {
  LaunchGraphs graphs(8);
  LaunchKey key;
  key.add(std::string_view("sync inside"));
  const auto enqueue = [&]() -> absl::Status {
    // Synchronizing a capturing stream is illegal: the capture is invalidated.
    return cuda_status(cudaStreamSynchronize(stream()), "sync");
  };
  absl::StatusOr<LaunchGraphs::Prepared> g = graphs.prepare(key, stream(), enqueue);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->exec, nullptr);
  EXPECT_EQ(graphs.stats().uncapturable, 1);
  // Remembered: the next call does not try again.
  g = graphs.prepare(key, stream(), enqueue);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->exec, nullptr);
  EXPECT_EQ(graphs.stats().uncapturable, 1);
  // The stream is out of capture and usable; no error is left pending.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(stream(), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  auto d = allocate_device(64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(cudaMemsetAsync(d->data(), 0, 64, stream()), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
}

// As a variant that allocates stream-ordered scratch and reads a result back would: the capture
// fails at the read-back; the same code then runs directly and works.
TEST_F(LaunchGraphsGpu, LaunchCodeWithStreamOrderedScratchAndReadBackRunsDirectly) {
  LaunchGraphs graphs(8);
  LaunchKey key;
  key.add(std::string_view("scratch and read-back"));
  int host = 0;
  const auto enqueue = [&]() -> absl::Status {
    void* scratch = nullptr;
    if (absl::Status s = cuda_status(cudaMallocAsync(&scratch, 256, stream()), "malloc"); !s.ok()) {
      return s;
    }
    absl::Status st = cuda_status(cudaMemsetAsync(scratch, 7, 256, stream()), "memset");
    if (st.ok()) {
      st = cuda_status(
          cudaMemcpyAsync(&host, scratch, sizeof host, cudaMemcpyDeviceToHost, stream()), "copy");
    }
    if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream()), "sync");
    cudaFreeAsync(scratch, stream());
    return st;
  };
  absl::StatusOr<LaunchGraphs::Prepared> g = graphs.prepare(key, stream(), enqueue);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->exec, nullptr);
  EXPECT_EQ(graphs.stats().uncapturable, 1);
  host = 0;
  const absl::Status direct = enqueue();
  EXPECT_TRUE(direct.ok()) << direct;
  EXPECT_EQ(host, 0x07070707);
  EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
}

// The server brackets its device work with events recorded by the launch code: captured as event
// nodes, replays record them; run directly, they are plain records.
TEST_F(LaunchGraphsGpu, EventsRecordedByTheLaunchCodeTimeReplaysAndDirectRuns) {
  auto start = create_event();
  auto end = create_event();
  auto d = allocate_device(std::size_t{64} << 20);
  ASSERT_TRUE(start.ok() && end.ok() && d.ok());
  const auto enqueue = [&]() -> absl::Status {
    if (absl::Status s = LaunchGraphs::record_event(start->get(), stream()); !s.ok()) return s;
    if (absl::Status s = cuda_status(cudaMemsetAsync(d->data(), 1, d->size(), stream()), "memset");
        !s.ok()) {
      return s;
    }
    return LaunchGraphs::record_event(end->get(), stream());
  };
  const auto elapsed_ms = [&] {
    EXPECT_EQ(cudaEventSynchronize(end->get()), cudaSuccess);
    float ms = -1;
    EXPECT_EQ(cudaEventElapsedTime(&ms, start->get(), end->get()), cudaSuccess);
    return ms;
  };
  ASSERT_TRUE(enqueue().ok());
  EXPECT_GT(elapsed_ms(), 0.0f);
  LaunchGraphs graphs(4);
  LaunchKey key;
  key.add(std::string_view("timed memset"));
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<LaunchGraphs::Prepared> g = graphs.prepare(key, stream(), enqueue);
    ASSERT_TRUE(g.ok() && g->exec != nullptr);
    ASSERT_TRUE(LaunchGraphs::launch(g->exec, stream()).ok());
    EXPECT_GT(elapsed_ms(), 0.0f) << "run " << i;
  }
  EXPECT_EQ(graphs.stats().replays, 2);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(LaunchGraphsGpu, FailingLaunchCodeIsNotCachedAsAGraph) {
  LaunchGraphs graphs(8);
  LaunchKey key;
  key.add(std::string_view("fails"));
  absl::StatusOr<LaunchGraphs::Prepared> g =
      graphs.prepare(key, stream(), [] { return absl::FailedPreconditionError("no such thing"); });
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->exec, nullptr);
  EXPECT_EQ(graphs.stats().captures, 0);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(stream(), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
}

TEST_F(LaunchGraphsGpu, CacheKeepsAtMostItsCapacityLeastRecentlyUsedOut) {
  auto d = allocate_device(1024);
  ASSERT_TRUE(d.ok());
  LaunchGraphs graphs(2);
  const auto key_of = [](int i) {
    LaunchKey k;
    k.add(i);
    return k;
  };
  const auto memset_of = [&](int i) {
    return [&, i] { return cuda_status(cudaMemsetAsync(d->data(), i, 1024, stream()), "memset"); };
  };
  for (int i : {1, 2, 1, 3}) {  // 2 is least recently used when 3 arrives
    ASSERT_TRUE(graphs.prepare(key_of(i), stream(), memset_of(i)).ok());
  }
  EXPECT_EQ(graphs.size(), 2u);
  EXPECT_EQ(graphs.stats().evictions, 1);
  EXPECT_EQ(graphs.stats().captures, 3);
  EXPECT_FALSE(graphs.prepare(key_of(1), stream(), memset_of(1))->captured_now);
  EXPECT_TRUE(graphs.prepare(key_of(2), stream(), memset_of(2))->captured_now);

  // Captured on the second sighting (the server's setting): the first runs directly.
  LaunchGraphs second(4, 2);
  absl::StatusOr<LaunchGraphs::Prepared> first = second.prepare(key_of(7), stream(), memset_of(7));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->exec, nullptr);
  EXPECT_EQ(second.stats().captures, 0);
  EXPECT_TRUE(second.prepare(key_of(7), stream(), memset_of(7))->captured_now);
  absl::StatusOr<LaunchGraphs::Prepared> third = second.prepare(key_of(7), stream(), memset_of(7));
  ASSERT_TRUE(third.ok() && third->exec != nullptr);
  EXPECT_FALSE(third->captured_now);
  EXPECT_EQ(second.stats().replays, 1);

  LaunchGraphs off(0);
  absl::StatusOr<LaunchGraphs::Prepared> g = off.prepare(key_of(1), stream(), memset_of(1));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->exec, nullptr);
  EXPECT_EQ(off.stats().captures, 0);
}

// Keys need no GPU: a batch's count, strides and pointer arrays each make a key of its own, so a
// replay never runs another batch's launch.
TEST(LaunchKey, BatchesDifferingInCountStridesOrPointerArraysHaveDifferentKeys) {
  GemmProblem base;
  base.m = base.n = base.k = 64;
  base.batch.count = 8;
  base.batch.stride_a = base.batch.stride_b = base.batch.stride_c = 64 * 64;
  std::array<void*, 3> arrays{};
  std::vector<GemmProblem> variants(6, base);
  variants[1].batch.count = 9;
  variants[2].batch.stride_a += 1;
  variants[3].batch.stride_c += 1;
  variants[4].batch.a_array = reinterpret_cast<const void* const*>(&arrays[0]);
  variants[5].batch.c_array = &arrays[2];
  for (std::size_t i = 0; i < variants.size(); ++i) {
    for (std::size_t j = i + 1; j < variants.size(); ++j) {
      EXPECT_NE(LaunchKey().add(variants[i]).bytes(), LaunchKey().add(variants[j]).bytes())
          << "variants " << i << " and " << j;
    }
  }
  EXPECT_EQ(LaunchKey().add(base).bytes(), LaunchKey().add(variants[0]).bytes());
}

// An fp8 batch of separate matrices runs product by product from the host's copy of its pointer
// arrays, so each product's pointers are in its captured launches: other pointers in the same
// arrays make another key. Other batches read the arrays on the device: the same key.
TEST(LaunchKey, Fp8BatchesOfSeparateMatricesKeyTheirProductPointers) {
  std::array<int, 6> m{};
  const std::array<const void*, 6> first = {&m[0], &m[1], &m[2], &m[3], &m[4], &m[5]};
  std::array<const void*, 6> second = first;
  second[3] = &m[0];  // product 1's B
  std::array<const void*, 6> device{};
  GemmProblem p;
  p.m = p.n = p.k = 64;
  p.batch.count = 2;
  p.batch.a_array = device.data();
  p.batch.b_array = device.data() + 2;
  p.batch.c_array = const_cast<void* const*>(device.data() + 4);
  const auto key_with = [&p](const std::array<const void*, 6>& host, Precision precision) {
    GemmProblem q = p;
    q.precision = precision;
    q.batch.host_a_array = host.data();
    q.batch.host_b_array = host.data() + 2;
    q.batch.host_c_array = const_cast<void* const*>(host.data() + 4);
    return LaunchKey().add(q).bytes();
  };
  EXPECT_NE(key_with(first, Precision::kF8), key_with(second, Precision::kF8));
  EXPECT_EQ(key_with(first, Precision::kF8), key_with(first, Precision::kF8));
  EXPECT_EQ(key_with(first, Precision::kBF16), key_with(second, Precision::kBF16));
}

}  // namespace
}  // namespace matserve::kernels
