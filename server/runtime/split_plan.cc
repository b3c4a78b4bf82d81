// Bands, tiles and strided copies of a GEMM spread over devices: see split_plan.h.
#include "server/runtime/split_plan.h"

#include <algorithm>

namespace matserve::server {
namespace {

// `length` cut into `count` consecutive parts of nearly equal size, the larger ones first.
std::vector<std::pair<std::int64_t, std::int64_t>> cut(std::int64_t start, std::int64_t length,
                                                       std::int64_t count) {
  std::vector<std::pair<std::int64_t, std::int64_t>> parts;
  const std::int64_t base = length / count;
  const std::int64_t extra = length % count;
  for (std::int64_t i = 0, at = start; i < count; ++i) {
    const std::int64_t size = base + (i < extra ? 1 : 0);
    parts.emplace_back(at, size);
    at += size;
  }
  return parts;
}

HelperBand tile_band(const CBlock& band, std::int64_t tile) {
  HelperBand h;
  h.band = band;
  for (const auto& [row0, rows] : cut_by_tile(band.row0, band.rows, tile)) {
    h.a_pieces.push_back({.row0 = row0, .rows = rows});
  }
  for (const auto& [col0, cols] : cut_by_tile(band.col0, band.cols, tile)) {
    h.b_pieces.push_back({.col0 = col0, .cols = cols});
  }
  // Column pieces outer: the first column of tiles brings the A' pieces one a tile, every later
  // column one B' piece for a whole column of tiles.
  for (int j = 0; j < static_cast<int>(h.b_pieces.size()); ++j) {
    for (int i = 0; i < static_cast<int>(h.a_pieces.size()); ++i) {
      const CBlock& a = h.a_pieces[static_cast<std::size_t>(i)];
      const CBlock& b = h.b_pieces[static_cast<std::size_t>(j)];
      h.tiles.push_back({.block = {.row0 = a.row0, .rows = a.rows, .col0 = b.col0, .cols = b.cols},
                         .a_piece = i,
                         .b_piece = j});
    }
  }
  return h;
}

std::size_t in_size(const kernels::GemmProblem& p) {
  return kernels::dtype_size(p.in_type);
}

}  // namespace

std::vector<std::pair<std::int64_t, std::int64_t>> cut_by_tile(std::int64_t start,
                                                               std::int64_t length,
                                                               std::int64_t tile) {
  return cut(start, length, std::max<std::int64_t>(1, (length + tile - 1) / tile));
}

SplitPlan plan_split(std::int64_t m, std::int64_t n, int devices, std::int64_t tile) {
  SplitPlan plan;
  plan.by_rows = m >= n;
  const std::int64_t longer = plan.by_rows ? m : n;
  const std::int64_t parts =
      std::clamp<std::int64_t>(devices, 1, std::max<std::int64_t>(longer, 1));
  const std::int64_t share = longer / parts;
  const std::int64_t home_length = longer - share * (parts - 1);
  plan.home = plan.by_rows ? CBlock{.row0 = 0, .rows = home_length, .col0 = 0, .cols = n}
                           : CBlock{.row0 = 0, .rows = m, .col0 = 0, .cols = home_length};
  tile = std::max<std::int64_t>(tile, 1);
  for (std::int64_t i = 1; i < parts; ++i) {
    const std::int64_t start = home_length + (i - 1) * share;
    const CBlock band = plan.by_rows ? CBlock{.row0 = start, .rows = share, .col0 = 0, .cols = n}
                                     : CBlock{.row0 = 0, .rows = m, .col0 = start, .cols = share};
    plan.helpers.push_back(tile_band(band, tile));
  }
  return plan;
}

StridedBytes a_rows(const kernels::GemmProblem& p, std::int64_t row0, std::int64_t rows) {
  const std::size_t es = in_size(p);
  const auto pitch = static_cast<std::size_t>(p.lda) * es;
  if (!p.a_trans) {  // A'(i, q) = a[i * lda + q]: each row of A' is a stored row
    return {.offset_bytes = static_cast<std::size_t>(row0) * pitch,
            .pitch_bytes = pitch,
            .width_bytes = static_cast<std::size_t>(p.k) * es,
            .height = static_cast<std::size_t>(rows)};
  }
  // A'(i, q) = a[q * lda + i]: the rows of A' are a run of columns of each of the k stored rows.
  return {.offset_bytes = static_cast<std::size_t>(row0) * es,
          .pitch_bytes = pitch,
          .width_bytes = static_cast<std::size_t>(rows) * es,
          .height = static_cast<std::size_t>(p.k)};
}

std::int64_t packed_lda(const kernels::GemmProblem& p, std::int64_t rows) {
  return p.a_trans ? rows : p.k;
}

StridedBytes b_cols(const kernels::GemmProblem& p, std::int64_t col0, std::int64_t cols) {
  const std::size_t es = in_size(p);
  const auto pitch = static_cast<std::size_t>(p.ldb) * es;
  if (!p.b_trans) {  // B'(q, j) = b[q * ldb + j]: a run of columns of each of the k stored rows
    return {.offset_bytes = static_cast<std::size_t>(col0) * es,
            .pitch_bytes = pitch,
            .width_bytes = static_cast<std::size_t>(cols) * es,
            .height = static_cast<std::size_t>(p.k)};
  }
  // B'(q, j) = b[j * ldb + q]: each column of B' is a stored row.
  return {.offset_bytes = static_cast<std::size_t>(col0) * pitch,
          .pitch_bytes = pitch,
          .width_bytes = static_cast<std::size_t>(p.k) * es,
          .height = static_cast<std::size_t>(cols)};
}

std::int64_t packed_ldb(const kernels::GemmProblem& p, std::int64_t cols) {
  return p.b_trans ? p.k : cols;
}

StridedBytes c_block(const kernels::GemmProblem& p, const CBlock& b) {
  const std::size_t es = kernels::dtype_size(p.out_type);
  const auto pitch = static_cast<std::size_t>(p.ldc) * es;
  return {.offset_bytes =
              static_cast<std::size_t>(b.row0) * pitch + static_cast<std::size_t>(b.col0) * es,
          .pitch_bytes = pitch,
          .width_bytes = static_cast<std::size_t>(b.cols) * es,
          .height = static_cast<std::size_t>(b.rows)};
}

kernels::GemmProblem view(const kernels::GemmProblem& p, const CBlock& b) {
  kernels::GemmProblem q = p;
  q.m = b.rows;
  q.n = b.cols;
  q.a = static_cast<const std::byte*>(p.a) + a_rows(p, b.row0, b.rows).offset_bytes;
  q.b = static_cast<const std::byte*>(p.b) + b_cols(p, b.col0, b.cols).offset_bytes;
  q.c = static_cast<std::byte*>(p.c) + c_block(p, b).offset_bytes;
  return q;
}

kernels::GemmProblem packed(const kernels::GemmProblem& p, const CBlock& b, const void* a,
                            const void* b_data, void* c) {
  kernels::GemmProblem q = p;
  q.m = b.rows;
  q.n = b.cols;
  q.a = a;
  q.lda = packed_lda(p, b.rows);
  q.b = b_data;
  q.ldb = packed_ldb(p, b.cols);
  q.c = c;
  q.ldc = b.cols;
  return q;
}

}  // namespace matserve::server
