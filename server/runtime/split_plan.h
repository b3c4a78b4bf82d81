// How one large GEMM is spread over several devices. C is cut into bands along its longer side,
// one band a device. The device holding the operands (the home device) computes its band where
// the operands lie, with no copy. Every other device (a helper) computes its band from copies: a
// band of rows of C needs its rows of A' and the whole of B' (the smaller operand, since rows were
// cut because m >= n), a band of columns its columns of B' and the whole of A'. A helper's band is
// cut again into tiles, and the operand pieces are copied in the order the tiles use them, so its
// first product starts once two pieces have arrived and later copies hide behind the products;
// each tile's result goes back into the home device's C as soon as it is done.
//
// Backend-free: the CUDA backend runs a plan (cuda_split_gemm.cc); the arithmetic of bands, tiles
// and the strided copies is here, where tests check it on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/gemm_problem.h"

namespace matserve::server {

// When a GEMM is spread over devices (the server's flags, docs/deploy.md).
struct SplitSettings {
  bool enabled = true;       // --split_gemm: false keeps every product on one device
  double min_flops = 1e13;   // --split_gemm_min_flops: smaller products run on one device
  std::int64_t tile = 4096;  // --split_gemm_tile: a helper's tiles, rows and columns at most
};

// A block of C: rows [row0, row0 + rows), columns [col0, col0 + cols).
struct CBlock {
  std::int64_t row0 = 0;
  std::int64_t rows = 0;
  std::int64_t col0 = 0;
  std::int64_t cols = 0;

  bool operator==(const CBlock&) const = default;
};

// A helper's band, tiled. A tile reads A' piece `a_piece` (rows of the band) and B' piece
// `b_piece` (columns), both numbered in the order of first use.
struct HelperTile {
  CBlock block;
  int a_piece = 0;
  int b_piece = 0;
};

struct HelperBand {
  CBlock band;
  std::vector<CBlock> a_pieces;   // rows of A' (row0/rows used; cols span k)
  std::vector<CBlock> b_pieces;   // columns of B' (col0/cols used; rows span k)
  std::vector<HelperTile> tiles;  // in the order they run
};

struct SplitPlan {
  bool by_rows = true;  // bands of rows of C (m >= n), else of columns
  CBlock home;          // the home device's band; it starts at row 0, column 0
  std::vector<HelperBand> helpers;
};

// The plan for `devices` devices (the home one and devices - 1 helpers), with helper tiles of at
// most `tile` rows and columns (rounded so the pieces of a band have nearly equal sizes). Bands get
// equal shares of the longer side, the home band the remainder. Fewer helpers than asked when the
// longer side has fewer than `devices` rows or columns.
SplitPlan plan_split(std::int64_t m, std::int64_t n, int devices, std::int64_t tile);

// [start, start + length) cut into the fewest consecutive parts of at most `tile` (one when
// length <= tile), of nearly equal sizes, the larger ones first: (first, size) of each.
std::vector<std::pair<std::int64_t, std::int64_t>> cut_by_tile(std::int64_t start,
                                                               std::int64_t length,
                                                               std::int64_t tile);

// A strided block of bytes: `height` rows of `width_bytes`, `pitch_bytes` apart, from `data` (an
// offset from the matrix's start when planning). What cudaMemcpy2D copies.
struct StridedBytes {
  std::size_t offset_bytes = 0;  // from the operand's first byte
  std::size_t pitch_bytes = 0;
  std::size_t width_bytes = 0;
  std::size_t height = 0;

  std::size_t packed_bytes() const { return width_bytes * height; }
};

// Where rows [row0, row0 + rows) of A' lie in problem p's A, as stored; packed one after another
// they form a rows x k A' with leading dimension `packed_lda(p, rows)`.
StridedBytes a_rows(const kernels::GemmProblem& p, std::int64_t row0, std::int64_t rows);
std::int64_t packed_lda(const kernels::GemmProblem& p, std::int64_t rows);
// Where columns [col0, col0 + cols) of B' lie in p's B; packed, a k x cols B' with leading
// dimension `packed_ldb(p, cols)`.
StridedBytes b_cols(const kernels::GemmProblem& p, std::int64_t col0, std::int64_t cols);
std::int64_t packed_ldb(const kernels::GemmProblem& p, std::int64_t cols);
// Where block `b` lies in p's C; packed, rows x cols with leading dimension cols.
StridedBytes c_block(const kernels::GemmProblem& p, const CBlock& b);

// The product of block `b` of C computed in place: p's operands and C, offset, same strides.
kernels::GemmProblem view(const kernels::GemmProblem& p, const CBlock& b);
// The product of block `b` of C from packed copies: A' rows (a_rows), B' columns (b_cols) and C's
// block (c_block), each packed at the given pointers.
kernels::GemmProblem packed(const kernels::GemmProblem& p, const CBlock& b, const void* a,
                            const void* b_data, void* c);

}  // namespace matserve::server
