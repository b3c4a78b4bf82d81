// Pieces, slots and the order of a GEMM computed out of core: see out_of_core_plan.h.
#include "server/runtime/out_of_core_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/runtime/memory_pool.h"

namespace matserve::server {
namespace {

// Slots start on 256-byte boundaries, as cudaMalloc'd memory does, so a tile's problem is as
// aligned as a whole one and every variant that takes the whole takes the tile.
constexpr std::size_t kAlignment = 256;
constexpr std::int64_t kMinTile = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

std::size_t pool_bytes(std::size_t bytes) {
  return bytes == 0 ? 0 : MemoryPool::size_class(bytes);
}

// Pieces and slot sizes at one tile size (no slots counted yet).
OutOfCorePlan shape_at(const kernels::GemmProblem& p, std::int64_t tile) {
  OutOfCorePlan plan;
  for (const auto& [row0, rows] : cut_by_tile(0, p.m, tile)) {
    plan.a_pieces.push_back({.row0 = row0, .rows = rows});
  }
  for (const auto& [col0, cols] : cut_by_tile(0, p.n, tile)) {
    plan.b_blocks.push_back({.col0 = col0, .cols = cols});
  }
  const CBlock& first_rows = plan.a_pieces.front();  // the largest of each
  const CBlock& first_cols = plan.b_blocks.front();
  plan.a_slot_bytes = aligned(a_rows(p, 0, first_rows.rows).packed_bytes());
  plan.b_slot_bytes = aligned(b_cols(p, 0, first_cols.cols).packed_bytes());
  plan.c_slot_bytes =
      aligned(c_block(p, {.row0 = 0, .rows = first_rows.rows, .col0 = 0, .cols = first_cols.cols})
                  .packed_bytes());
  plan.b_slots = std::min<int>(2, static_cast<int>(plan.b_blocks.size()));
  plan.c_slots = std::min<int>(2, static_cast<int>(plan.a_pieces.size() * plan.b_blocks.size()));
  return plan;
}

// The most A' slots (at most `pieces`) that fit `budget` beside the B' and C slots; 0 if none.
int a_slots_within(const OutOfCorePlan& plan, std::size_t budget) {
  const std::size_t fixed = pool_bytes(static_cast<std::size_t>(plan.b_slots) * plan.b_slot_bytes) +
                            pool_bytes(static_cast<std::size_t>(plan.c_slots) * plan.c_slot_bytes);
  if (fixed >= budget) return 0;
  for (auto slots = static_cast<int>(plan.a_pieces.size()); slots > 0; --slots) {
    if (fixed + pool_bytes(static_cast<std::size_t>(slots) * plan.a_slot_bytes) <= budget) {
      return slots;
    }
  }
  return 0;
}

// The steps: panels of a_slots pieces; within a panel, each B' block (forward in even panels,
// backward in odd ones) times each piece.
void order_steps(OutOfCorePlan& plan) {
  const auto pieces = static_cast<int>(plan.a_pieces.size());
  const auto blocks = static_cast<int>(plan.b_blocks.size());
  std::vector<int> b_in_slot(static_cast<std::size_t>(plan.b_slots), -1);
  int last_b_slot = 0;
  int tile = 0;
  for (int panel = 0, first = 0; first < pieces; ++panel, first += plan.a_slots) {
    const int last = std::min(pieces, first + plan.a_slots);
    for (int s = 0; s < blocks; ++s) {
      const int j = panel % 2 == 0 ? s : blocks - 1 - s;
      // The block's slot: where it already is, else the slot the block in use does not hold.
      int b_slot = -1;
      for (int q = 0; q < plan.b_slots; ++q) {
        if (b_in_slot[static_cast<std::size_t>(q)] == j) b_slot = q;
      }
      const bool load_b = b_slot < 0;
      if (load_b) {
        b_slot = plan.b_slots == 1 ? 0 : 1 - last_b_slot;
        b_in_slot[static_cast<std::size_t>(b_slot)] = j;
      }
      last_b_slot = b_slot;
      for (int r = first; r < last; ++r) {
        const CBlock& a = plan.a_pieces[static_cast<std::size_t>(r)];
        const CBlock& b = plan.b_blocks[static_cast<std::size_t>(j)];
        plan.steps.push_back(
            {.block = {.row0 = a.row0, .rows = a.rows, .col0 = b.col0, .cols = b.cols},
             .a_piece = r,
             .b_block = j,
             .a_slot = r - first,
             .b_slot = b_slot,
             .c_slot = tile % plan.c_slots,
             .load_a = s == 0,
             .load_b = load_b && r == first});
        ++tile;
      }
    }
  }
}

}  // namespace

absl::StatusOr<OutOfCorePlan> plan_out_of_core(const kernels::GemmProblem& p,
                                               std::int64_t device_bytes, std::int64_t tile) {
  if (p.m < 1 || p.n < 1) return absl::InvalidArgumentError("out-of-core GEMM: empty C");
  const std::size_t budget = device_bytes > 0 ? static_cast<std::size_t>(device_bytes) : 0;
  tile = std::max<std::int64_t>(tile, 1);
  const std::int64_t floor = std::min(kMinTile, tile);
  // First the largest tile with a panel of two pieces (one when m is one piece), then the
  // largest with one piece: fewer, larger tiles run closer to the device's peak, but with one
  // piece a panel, B' is read once a piece.
  for (const bool two_pieces : {true, false}) {
    for (std::int64_t t = tile;; t = std::max(floor, t / 2)) {
      OutOfCorePlan plan = shape_at(p, t);
      const int want = std::min<int>(two_pieces ? 2 : 1, static_cast<int>(plan.a_pieces.size()));
      const int slots = a_slots_within(plan, budget);
      if (slots >= want) {
        plan.a_slots = slots;
        order_steps(plan);
        return plan;
      }
      if (t == floor) break;
    }
  }
  const OutOfCorePlan smallest = shape_at(p, floor);
  return absl::ResourceExhaustedError(
      absl::StrCat("the product does not fit the device even in tiles: with ", floor,
                   " rows and columns a tile, one piece of A' takes ", smallest.a_slot_bytes,
                   " bytes, two blocks of B' ", 2 * smallest.b_slot_bytes, " and two tiles of C ",
                   2 * smallest.c_slot_bytes, " (k = ", p.k, "); the device has ", budget,
                   " bytes free of its budget (--memory_budget_bytes)"));
}

}  // namespace matserve::server
