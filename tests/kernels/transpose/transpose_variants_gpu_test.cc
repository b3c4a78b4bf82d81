// Every CUDA transpose variant in the registry (cublas_geam included where it applies) against a
// host transpose, bit for bit: every dtype, both layouts, scale 1 and scaled, odd shapes (1 x 1,
// vectors, 33 x 65, primes, thin, 4095 x 4097, 8192^2), out-of-place outputs poisoned with NaN,
// in-place variants on resident buffers (the staged rectangular sweep at several stage counts,
// its scratch NaN-poisoned). Skips (visibly) without a GPU.
//
// MATSERVE_TEST_VARIANTS=a,b limits the variants; MATSERVE_TEST_QUICK=1 drops shapes above 2^22
// elements (for compute-sanitizer runs).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_transpose.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"
#include "kernels/transpose/transpose_kernels.h"
#include "tests/support/random_matrix.h"
#include "tests/support/variant_filter.h"

namespace matserve::kernels {
namespace {

struct Shape {
  std::int64_t rows, cols;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.rows << "x" << s.cols;
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return std::to_string(info.param.rows) + "x" + std::to_string(info.param.cols);
}

// Square, thin and odd shapes, and shapes that reach every branch of the in-place rectangular
// kernel: gcd > 1 (96 x 160, 10000 x 100, 100 x 10000), rows too long for shared memory
// (3 x 70001), vectors (1 x 65537), aligned multiples; and for the tile modes of vector_tile.cuh:
// partial edge tiles with 16-byte aligned rows in every dtype (1000 x 40, 40 x 1000, 300 x 1028:
// aligned for fp32/fp64, 1000 x 40 for fp16 too) and unaligned rows (33 x 65, 129 x 4097,
// 4095 x 4097).
std::vector<Shape> all_shapes() {
  return {{1, 1},       {1, 1000},    {1000, 1},   {33, 65},    {65, 33},     {7, 3},
          {64, 64},     {96, 160},    {160, 96},   {129, 4097}, {10000, 100}, {100, 10000},
          {1000, 40},   {40, 1000},   {300, 1028}, {1, 65537},  {3, 70001},   {70001, 3},
          {2048, 1024}, {4095, 4097}, {8192, 8192}};
}

class TransposeVariantsGpu : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
    const Shape& s = GetParam();
    if (s.rows * s.cols > (std::int64_t{1} << 22) &&
        std::getenv("MATSERVE_TEST_QUICK") != nullptr) {
      GTEST_SKIP() << "MATSERVE_TEST_QUICK set: large shape skipped";
    }
    auto r = StreamResources::create();
    ASSERT_TRUE(r.ok()) << r.status();
    resources_ = std::make_unique<StreamResources>(*std::move(r));
  }

  // Runs every selected variant on one (dtype, layout, scale) and compares with the host.
  void check_all(DType dtype, Layout layout, double scale, std::uint64_t seed) {
    const Shape& s = GetParam();
    const std::int64_t count = s.rows * s.cols;
    const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
    const std::vector<std::byte> in = testing::random_matrix(count, dtype, seed);
    std::vector<std::byte> expected(bytes);
    TransposeProblem host =
        canonicalize_transpose(s.rows, s.cols, layout, dtype, in.data(), expected.data(), scale);
    testing::poison(expected.data(), bytes);
    ASSERT_TRUE(cpu_blocked_transpose(host, ExecContext{}).ok());

    auto d_in = allocate_device(bytes);
    auto d_out = allocate_device(bytes);
    ASSERT_TRUE(d_in.ok() && d_out.ok());
    std::vector<std::byte> poison(bytes);
    testing::poison(poison.data(), bytes);
    const std::string base = std::string(dtype_name(dtype)) +
                             (layout == Layout::kRowMajor ? " row-major" : " col-major") +
                             " scale=" + std::to_string(scale);

    for (const TransposeVariant& v : transpose_variants()) {
      if (v.backend != Backend::kCuda || !testing::variant_selected(v.name)) continue;
      const std::string what = std::string(v.name) + " " + base;
      // In-place variants get the input in the output buffer; others a NaN-poisoned output.
      ASSERT_EQ(cudaMemcpy(d_out->data(), v.in_place ? in.data() : poison.data(), bytes,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_in->data(), in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      // A pageable cudaMemcpy may return before its DMA lands, and the variant runs on a
      // non-blocking stream that does not wait for the legacy stream: wait here.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      TransposeProblem p =
          canonicalize_transpose(s.rows, s.cols, layout, dtype,
                                 v.in_place ? d_out->data() : d_in->data(), d_out->data(), scale);
      if (absl::Status st = check_transpose_variant(v, p); !st.ok()) {
        EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << what << ": " << st;
        // Our own kernels refuse only what they declare: the square one, non-square shapes.
        if (v.name != "cublas_geam") {
          EXPECT_TRUE(v.name == "transpose_inplace_square" && p.rows != p.cols)
              << what << ": " << st;
        }
        continue;
      }
      ++launched_;
      absl::Status st = v.launch(p, resources_->context());
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      expect_matches(p, d_out->data(), expected, what);
    }

    // The staged in-place rectangular sweep at every stage count it can take (scratch lent by
    // the test, poisoned first: nothing may be read from it before it is written).
    if (s.rows != s.cols && s.rows > 1 && s.cols > 1) {
      for (int k : {1, 2, 3, 8, 16}) {
        const TransposeProblem p = canonicalize_transpose(s.rows, s.cols, layout, dtype,
                                                          d_out->data(), d_out->data(), scale);
        const std::size_t need = transpose_inplace_rect_staged_scratch(p, k);
        if (need == 0) continue;               // too few columns for k bands
        auto scratch = allocate_device(need);  // exactly what it asks for: memcheck sees overruns
        ASSERT_TRUE(scratch.ok());
        const std::string what = "inplace_rect staged k=" + std::to_string(k) + " " + base;
        ASSERT_EQ(cudaMemcpy(d_out->data(), in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemset(scratch->data(), 0xff, need), cudaSuccess);  // NaN in every type
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(
            launch_transpose_inplace_rect_staged(p, scratch->data(), need, k, resources_->stream()),
            cudaSuccess)
            << what;
        expect_matches(p, d_out->data(), expected, what);
      }
    }

    // The benchmark's sweep configurations of the tuned kernels (fp32 and fp16, scale 1).
    if (scale != 1.0 || (dtype != DType::kF32 && dtype != DType::kF16)) return;
    for (auto [k, order] : {std::pair{1, kOrderRow},
                            {1, kOrderDiagonal},
                            {2, kOrderRow},
                            {2, kOrderDiagonal},
                            {2, kOrderMirror},
                            {2, kOrderCol},
                            {1, kOrderCol}}) {
      const std::string what = "vectorized config k=" + std::to_string(k) +
                               " order=" + std::to_string(order) + " " + base;
      ASSERT_EQ(cudaMemcpy(d_out->data(), poison.data(), bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const TransposeProblem p =
          canonicalize_transpose(s.rows, s.cols, layout, dtype, d_in->data(), d_out->data(), scale);
      const VectorizedConfig cfg{.tiles_per_block = k, .order = order};
      ASSERT_EQ(launch_transpose_vectorized_tuned(p, cfg, resources_->stream()), cudaSuccess)
          << what;
      expect_matches(p, d_out->data(), expected, what);
    }
    // Cache hints and the persistent grid (every hinted instantiation).
    for (auto [lh, sh, pers] : {std::tuple{1, 0, false},
                                {0, 1, false},
                                {1, 1, false},
                                {2, 1, false},
                                {1, 2, true},
                                {0, 0, true}}) {
      VectorizedConfig cfg;
      cfg.load_hint = lh;
      cfg.store_hint = sh;
      cfg.persistent = pers;
      const std::string what = "vectorized hints ld=" + std::to_string(lh) +
                               " st=" + std::to_string(sh) + (pers ? " persistent " : " ") + base;
      ASSERT_EQ(cudaMemcpy(d_out->data(), poison.data(), bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const TransposeProblem p =
          canonicalize_transpose(s.rows, s.cols, layout, dtype, d_in->data(), d_out->data(), scale);
      ASSERT_EQ(launch_transpose_vectorized_tuned(p, cfg, resources_->stream()), cudaSuccess)
          << what;
      expect_matches(p, d_out->data(), expected, what);
    }
    {
      const std::string what = "inplace_rect batch=4MiB " + base;
      ASSERT_EQ(cudaMemcpy(d_out->data(), in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const TransposeProblem p = canonicalize_transpose(s.rows, s.cols, layout, dtype,
                                                        d_out->data(), d_out->data(), scale);
      const ExecContext ctx = resources_->context();
      ASSERT_EQ(launch_transpose_inplace_rect_config(p, ctx.workspace, ctx.workspace_bytes,
                                                     std::size_t{4} << 20, resources_->stream()),
                cudaSuccess)
          << what;
      expect_matches(p, d_out->data(), expected, what);
    }
  }

  // Waits for the stream and compares the device output with the host transpose bit for bit.
  void expect_matches(const TransposeProblem& p, const void* d_out,
                      const std::vector<std::byte>& expected, const std::string& what) {
    const std::size_t bytes = expected.size();
    const std::int64_t count = p.rows * p.cols;
    std::vector<std::byte> got(bytes);
    {
      ASSERT_EQ(cudaStreamSynchronize(resources_->stream()), cudaSuccess) << what;
      ASSERT_EQ(cudaGetLastError(), cudaSuccess) << what;
      ASSERT_EQ(cudaMemcpy(got.data(), d_out, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      if (std::memcmp(got.data(), expected.data(), bytes) != 0) {
        const std::size_t e = dtype_size(p.dtype);
        std::int64_t first = 0;
        while (std::memcmp(got.data() + first * e, expected.data() + first * e, e) == 0) ++first;
        std::int64_t wrong = 0;
        for (std::int64_t k = 0; k < count; ++k) {
          wrong += std::memcmp(got.data() + k * e, expected.data() + k * e, e) != 0;
        }
        ADD_FAILURE() << what << ": " << wrong << " of " << count
                      << " elements differ; first at out(" << first / p.rows << ", "
                      << first % p.rows << ")";
      }
    }
  }

  std::unique_ptr<StreamResources> resources_;
  int launched_ = 0;
};

TEST_P(TransposeVariantsGpu, BitExactAgainstHostTranspose) {
  const Shape& s = GetParam();
  std::uint64_t seed = 77;
  for (DType dtype : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16}) {
    for (Layout layout : {Layout::kRowMajor, Layout::kColMajor}) {
      check_all(dtype, layout, 1.0, seed++);
      check_all(dtype, layout, -0.5, seed++);
      // A scale that rounds: the GPU must round exactly like the host (fp32 for 16-bit types).
      if (s.rows * s.cols <= (1 << 20)) check_all(dtype, layout, 1.7, seed++);
      if (HasFatalFailure()) return;
    }
  }
  if (launched_ == 0) GTEST_SKIP() << "no CUDA transpose variant selected";
}

INSTANTIATE_TEST_SUITE_P(Shapes, TransposeVariantsGpu, ::testing::ValuesIn(all_shapes()),
                         shape_name);

// Padded leading dimensions (ld_in > cols, ld_out > rows), which the registry's canonical
// problems never have: the 16-byte tile modes need 16-byte aligned rows and rows, cols multiples
// of V; other padded shapes take the element path. Each case: bit copy and a scale, every
// element of the transposed block exact, and the padding of the output left untouched.
TEST(TransposePaddedLeadingDimension, TunedKernelsWriteExactlyTheBlock) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  auto r = StreamResources::create();
  ASSERT_TRUE(r.ok()) << r.status();
  struct Case {
    std::int64_t rows, cols, pad_in, pad_out;
  };
  // pad 8 elements keeps rows 16-byte aligned for every dtype; pad 1 or 3 does not.
  const Case cases[] = {{64, 136, 8, 8}, {136, 64, 8, 8},  {200, 40, 8, 8}, {37, 45, 8, 8},
                        {37, 45, 1, 3},  {130, 130, 8, 8}, {96, 96, 3, 3},  {129, 129, 8, 8}};
  for (DType dtype : {DType::kF64, DType::kF32, DType::kF16}) {
    const std::size_t e = dtype_size(dtype);
    for (const Case& c : cases) {
      for (double scale : {1.0, -0.5}) {
        const std::int64_t ld_in = c.cols + c.pad_in, ld_out = c.rows + c.pad_out;
        const std::size_t in_bytes = static_cast<std::size_t>(c.rows * ld_in) * e;
        const std::size_t out_bytes = static_cast<std::size_t>(c.cols * ld_out) * e;
        const std::vector<std::byte> in = testing::random_matrix(c.rows * ld_in, dtype, 11);
        std::vector<std::byte> init(out_bytes);
        testing::poison(init.data(), out_bytes);
        // Host reference: the registry's CPU transpose on a packed copy, scattered into the
        // padded output (padding keeps the poison).
        std::vector<std::byte> packed(static_cast<std::size_t>(c.rows * c.cols) * e);
        for (std::int64_t i = 0; i < c.rows; ++i) {
          std::memcpy(packed.data() + i * c.cols * e, in.data() + i * ld_in * e, c.cols * e);
        }
        std::vector<std::byte> packed_out(packed.size());
        TransposeProblem host = canonicalize_transpose(c.rows, c.cols, Layout::kRowMajor, dtype,
                                                       packed.data(), packed_out.data(), scale);
        ASSERT_TRUE(cpu_blocked_transpose(host, ExecContext{}).ok());
        std::vector<std::byte> expected = init;
        for (std::int64_t j = 0; j < c.cols; ++j) {
          std::memcpy(expected.data() + j * ld_out * e, packed_out.data() + j * c.rows * e,
                      c.rows * e);
        }
        auto d_in = allocate_device(in_bytes);
        auto d_out = allocate_device(std::max(out_bytes, in_bytes));
        ASSERT_TRUE(d_in.ok() && d_out.ok());
        ASSERT_EQ(cudaMemcpy(d_in->data(), in.data(), in_bytes, cudaMemcpyHostToDevice),
                  cudaSuccess);
        TransposeProblem p = host;
        p.in = d_in->data();
        p.ld_in = ld_in;
        p.out = d_out->data();
        p.ld_out = ld_out;
        const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(c.rows) +
                                 "x" + std::to_string(c.cols) + " ld " + std::to_string(ld_in) +
                                 "/" + std::to_string(ld_out) + " scale " + std::to_string(scale);
        auto check = [&](const std::string& which, auto&& launch) {
          ASSERT_EQ(cudaMemcpy(d_out->data(), init.data(), out_bytes, cudaMemcpyHostToDevice),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(launch(), cudaSuccess) << which << " " << what;
          ASSERT_EQ(cudaStreamSynchronize(r->stream()), cudaSuccess) << which << " " << what;
          std::vector<std::byte> got(out_bytes);
          ASSERT_EQ(cudaMemcpy(got.data(), d_out->data(), out_bytes, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          EXPECT_EQ(std::memcmp(got.data(), expected.data(), out_bytes), 0) << which << " " << what;
        };
        check("vectorized", [&] { return launch_transpose_vectorized(p, r->stream()); });
        check("vectorized k=2 mirror", [&] {
          return launch_transpose_vectorized_tuned(
              p, VectorizedConfig{.tiles_per_block = 2, .order = kOrderMirror}, r->stream());
        });
        if (c.rows == c.cols && c.pad_in == c.pad_out) {  // in place, same padded buffer
          TransposeProblem q = p;
          q.in = q.out;
          check("inplace_square", [&] {
            // The input, padded, in the output buffer; the padding keeps its poison.
            std::vector<std::byte> start = init;
            for (std::int64_t i = 0; i < c.rows; ++i) {
              std::memcpy(start.data() + i * ld_out * e, in.data() + i * ld_in * e, c.cols * e);
            }
            if (cudaError_t err =
                    cudaMemcpy(d_out->data(), start.data(), out_bytes, cudaMemcpyHostToDevice);
                err != cudaSuccess) {
              return err;
            }
            if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) return err;
            return launch_transpose_inplace_square(q, r->stream());
          });
        }
        if (HasFatalFailure()) return;
      }
    }
  }
}

// cublas_geam passes the output as its B operand with beta = 0: a NaN already in the output must
// not reach the result (cuBLAS documents that B is not read when beta == 0; this checks it).
TEST(CublasGeamTranspose, NanPoisonedOutputDoesNotLeak) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test not run";
  const TransposeVariant* v = find_transpose_variant("cublas_geam");
  ASSERT_NE(v, nullptr);
  auto r = StreamResources::create();
  ASSERT_TRUE(r.ok()) << r.status();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::int64_t rows = 77, cols = 131, count = rows * cols;
    const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
    const std::vector<std::byte> in = testing::random_matrix(count, dtype, 5);
    std::vector<std::byte> nan(bytes);
    testing::poison(nan.data(), bytes);
    auto d_in = allocate_device(bytes);
    auto d_out = allocate_device(bytes);
    ASSERT_TRUE(d_in.ok() && d_out.ok());
    ASSERT_EQ(cudaMemcpy(d_in->data(), in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_out->data(), nan.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const TransposeProblem p = canonicalize_transpose(rows, cols, Layout::kRowMajor, dtype,
                                                      d_in->data(), d_out->data(), 2.0);
    ASSERT_TRUE(v->launch(p, r->context()).ok());
    ASSERT_EQ(cudaStreamSynchronize(r->stream()), cudaSuccess);
    std::vector<std::byte> got(bytes);
    ASSERT_EQ(cudaMemcpy(got.data(), d_out->data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (std::int64_t k = 0; k < count; ++k) {
      const double x = dtype == DType::kF32 ? reinterpret_cast<const float*>(got.data())[k]
                                            : reinterpret_cast<const double*>(got.data())[k];
      ASSERT_TRUE(std::isfinite(x)) << dtype_name(dtype) << ": NaN leaked at " << k;
    }
  }
}

}  // namespace
}  // namespace matserve::kernels
