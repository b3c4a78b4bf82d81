// How one GEMM runs on a device when its operands or its result do not fit the device's budget
// together (they live in host memory: matrices too large for the device, or inline operands):
// C is computed tile by tile, with the operands streamed from host memory.
//
// A' is cut into pieces of rows, B' into blocks of columns, and C into the tiles they meet at;
// each tile is one GEMM over the whole of k, so no partial sum is ever rounded to the output type.
// The device holds a panel of A' pieces (as many as the budget allows, each in its own slot), two
// B' blocks and two C tiles. For each panel, the B' blocks pass by in turn (every other panel in
// reverse order, so the blocks still held at the turn are not loaded again), and for each block
// every piece of the panel is multiplied by it. The first block of a panel brings the panel's
// pieces in one a tile, into the slots the previous panel's pieces leave as their last tile ends;
// every later block brings only itself, behind a whole column of tiles. Each tile's result goes
// back to host memory while the next tile runs. Streamed from host memory, A' is read once and B'
// once a panel: with a panel of P pieces of R rows, a byte of B' brings 2 * P * R / sizeof(element)
// flops, which at 32768 rows of fp32 keeps a PCIe Gen5 link (about 50 GB/s) ahead of an H100.
//
// Backend-free: the CUDA backend runs a plan (cuda_out_of_core_gemm.cc); the arithmetic of pieces,
// slots and the order is here, where tests check it on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"
#include "server/runtime/split_plan.h"

namespace matserve::server {

// One tile of C and what it needs: the A' piece and B' block it reads, the slots they are in (and
// whether this tile brings them there), and the C slot its result is computed in.
struct OutOfCoreStep {
  CBlock block;
  int a_piece = 0;
  int b_block = 0;
  int a_slot = 0;
  int b_slot = 0;
  int c_slot = 0;
  bool load_a = false;  // the piece is copied into its slot before this tile
  bool load_b = false;

  bool operator==(const OutOfCoreStep&) const = default;
};

struct OutOfCorePlan {
  std::vector<CBlock> a_pieces;  // rows of A' (row0/rows used; they span k)
  std::vector<CBlock> b_blocks;  // columns of B' (col0/cols used)
  int a_slots = 0;               // pieces held at once: a panel
  int b_slots = 0;
  int c_slots = 0;
  // Bytes of one slot of each kind (the largest piece, block or tile, 256-byte aligned); the
  // device memory is one block of a_slots * a_slot_bytes, one of B's, one of C's.
  std::size_t a_slot_bytes = 0;
  std::size_t b_slot_bytes = 0;
  std::size_t c_slot_bytes = 0;
  std::vector<OutOfCoreStep> steps;  // in the order they run
};

// The plan for problem `p` within `device_bytes` of device memory, with tiles of at most `tile`
// rows and columns (near-equal pieces). The largest tile, halving from `tile`, at which a panel of
// two pieces fits (or one, when m is one piece); else the largest at which one piece fits, down to
// 64. RESOURCE_EXHAUSTED, naming what one piece and one block take, when even that does not fit.
absl::StatusOr<OutOfCorePlan> plan_out_of_core(const kernels::GemmProblem& p,
                                               std::int64_t device_bytes, std::int64_t tile);

}  // namespace matserve::server
