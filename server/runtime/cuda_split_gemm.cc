// The helper devices' shares of a GEMM spread over devices: see cuda_split_gemm.h.
#include "server/runtime/cuda_split_gemm.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "server/runtime/cuda_strided_copy.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

// Pieces and tiles start on 256-byte boundaries, as cudaMalloc'd memory does, so a tile's
// problem is as aligned as a whole one and every variant that takes the whole takes the tile.
constexpr std::size_t kAlignment = 256;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// Where a helper keeps each A' piece, B' piece and tile result, within its three blocks.
struct ShareLayout {
  std::vector<std::size_t> a_at, b_at, c_at;
  std::size_t a_bytes = 0, b_bytes = 0, c_bytes = 0;
};

ShareLayout layout_of(const HelperBand& band, const kernels::GemmProblem& p) {
  ShareLayout l;
  for (const CBlock& piece : band.a_pieces) {
    l.a_at.push_back(l.a_bytes);
    l.a_bytes += aligned(a_rows(p, piece.row0, piece.rows).packed_bytes());
  }
  for (const CBlock& piece : band.b_pieces) {
    l.b_at.push_back(l.b_bytes);
    l.b_bytes += aligned(b_cols(p, piece.col0, piece.cols).packed_bytes());
  }
  for (const HelperTile& t : band.tiles) {
    l.c_at.push_back(l.c_bytes);
    l.c_bytes += aligned(c_block(p, t.block).packed_bytes());
  }
  return l;
}

}  // namespace

// One helper device's admitted share: its slot (the stream its tiles run on, with its library
// handles), its memory, two copy streams and the events that order them.
class HelperShare {
 public:
  HelperShare(CudaDevice& device, HelperBand band, DeviceScheduler::Admission admission,
              ShareLayout layout)
      : device_(device),
        band_(std::move(band)),
        admission_(std::move(admission)),
        layout_(std::move(layout)),
        slot_(device.slots[static_cast<std::size_t>(admission_.slot())]) {}
  HelperShare(const HelperShare&) = delete;
  HelperShare& operator=(const HelperShare&) = delete;
  // The blocks go back to the pool when admission_ goes: nothing may still be copying into them.
  ~HelperShare() { wait(); }

  // Waits for everything enqueued on the share's streams.
  void wait() {
    if (!started_) return;
    cudaSetDevice(device_.ordinal);
    cudaStreamSynchronize(copy_in_.get());
    cudaStreamSynchronize(slot_.resources.stream());
    cudaStreamSynchronize(copy_out_.get());
  }

  // Streams, events and each tile's variant (chosen on the tile as it will run); false when the
  // chooser refuses a tile. The helper's device must be current.
  absl::StatusOr<bool> prepare(const kernels::GemmProblem& whole, const GemmChooser& choose) {
    for (kernels::Stream* s : {&copy_in_, &copy_out_}) {
      absl::StatusOr<kernels::Stream> created = kernels::create_stream();
      if (!created.ok()) return created.status();
      *s = *std::move(created);
    }
    absl::StatusOr<kernels::Event> done = kernels::create_event();
    if (!done.ok()) return done.status();
    done_ = *std::move(done);
    auto* a = static_cast<std::byte*>(admission_.block(0).data());
    auto* b = static_cast<std::byte*>(admission_.block(1).data());
    auto* c = static_cast<std::byte*>(admission_.block(2).data());
    for (std::size_t t = 0; t < band_.tiles.size(); ++t) {
      const HelperTile& tile = band_.tiles[t];
      tiles_.push_back(
          packed(whole, tile.block, a + layout_.a_at[static_cast<std::size_t>(tile.a_piece)],
                 b + layout_.b_at[static_cast<std::size_t>(tile.b_piece)], c + layout_.c_at[t]));
      absl::StatusOr<const kernels::GemmVariant*> v = choose(tiles_.back());
      if (!v.ok()) return false;
      variants_.push_back(*v);
      for (int e = 0; e < 2; ++e) {
        absl::StatusOr<kernels::Event> event = kernels::create_event();
        if (!event.ok()) return event.status();
        (e == 0 ? inputs_in_ : computed_).push_back(*std::move(event));
      }
    }
    return true;
  }

  // Behind `ready` (home device): pieces in, tiles, results into the home device's C. The
  // helper's device must be current.
  absl::Status enqueue(const kernels::GemmProblem& whole, cudaEvent_t ready, bool read_c) {
    started_ = true;
    const cudaStream_t in = copy_in_.get();
    const cudaStream_t compute = slot_.resources.stream();
    const cudaStream_t out = copy_out_.get();
    if (absl::Status s = cuda_status(cudaStreamWaitEvent(in, ready, 0), "wait for operands");
        !s.ok()) {
      return s;
    }
    auto* a = static_cast<std::byte*>(admission_.block(0).data());
    auto* b = static_cast<std::byte*>(admission_.block(1).data());
    auto* c = static_cast<std::byte*>(admission_.block(2).data());
    const auto* whole_a = static_cast<const std::byte*>(whole.a);
    const auto* whole_b = static_cast<const std::byte*>(whole.b);
    auto* whole_c = static_cast<std::byte*>(whole.c);
    std::vector<bool> a_in(band_.a_pieces.size(), false);
    std::vector<bool> b_in(band_.b_pieces.size(), false);
    const kernels::ExecContext context = slot_.resources.context();
    for (std::size_t t = 0; t < band_.tiles.size(); ++t) {
      const HelperTile& tile = band_.tiles[t];
      const auto ai = static_cast<std::size_t>(tile.a_piece);
      const auto bi = static_cast<std::size_t>(tile.b_piece);
      if (!a_in[ai]) {
        const CBlock& piece = band_.a_pieces[ai];
        if (absl::Status st =
                copy_packed(a + layout_.a_at[ai], whole_a, a_rows(whole, piece.row0, piece.rows),
                            in, "copy A' rows to a helper device");
            !st.ok()) {
          return st;
        }
        a_in[ai] = true;
      }
      if (!b_in[bi]) {
        const CBlock& piece = band_.b_pieces[bi];
        if (absl::Status st =
                copy_packed(b + layout_.b_at[bi], whole_b, b_cols(whole, piece.col0, piece.cols),
                            in, "copy B' columns to a helper device");
            !st.ok()) {
          return st;
        }
        b_in[bi] = true;
      }
      const StridedBytes cs = c_block(whole, tile.block);
      if (read_c) {
        if (absl::Status st = copy_packed(c + layout_.c_at[t], whole_c, cs, in,
                                          "copy C's block to a helper device");
            !st.ok()) {
          return st;
        }
      }
      if (absl::Status st = record_then_wait(inputs_in_[t].get(), in, compute); !st.ok()) return st;
      if (absl::Status st = variants_[t]->launch(tiles_[t], context); !st.ok()) return st;
      if (absl::Status st = record_then_wait(computed_[t].get(), compute, out); !st.ok()) return st;
      if (absl::Status st = copy_unpacked(whole_c, c + layout_.c_at[t], cs, out,
                                          "copy a tile's result to the home device");
          !st.ok()) {
        return st;
      }
    }
    return cuda_status(cudaEventRecord(done_.get(), out), "record a helper's end");
  }

  cudaEvent_t done() const { return done_.get(); }
  const CudaDevice& device() const { return device_; }

 private:
  CudaDevice& device_;
  const HelperBand band_;
  DeviceScheduler::Admission admission_;  // blocks 0, 1, 2: A' pieces, B' pieces, tile results
  const ShareLayout layout_;
  StreamSlot& slot_;
  kernels::Stream copy_in_;
  kernels::Stream copy_out_;
  kernels::Event done_;
  std::vector<kernels::GemmProblem> tiles_;
  std::vector<const kernels::GemmVariant*> variants_;
  std::vector<kernels::Event> inputs_in_;  // per tile: its pieces (and C's block) are in
  std::vector<kernels::Event> computed_;   // per tile: its product is done
  bool started_ = false;
};

GemmSplit::GemmSplit(kernels::GemmProblem whole, kernels::GemmProblem home_problem,
                     CudaDevice& home, kernels::Event ready)
    : whole_(whole), home_problem_(home_problem), home_(&home), ready_(std::move(ready)) {}

GemmSplit::GemmSplit(GemmSplit&&) noexcept = default;

GemmSplit::~GemmSplit() = default;

absl::StatusOr<std::optional<GemmSplit>> GemmSplit::prepare(const SplitPlan& plan,
                                                            const kernels::GemmProblem& problem,
                                                            CudaDevice& home,
                                                            const std::vector<CudaDevice*>& helpers,
                                                            const GemmChooser& choose) {
  if (plan.helpers.empty() || plan.helpers.size() > helpers.size()) return std::nullopt;
  absl::StatusOr<kernels::Event> ready = kernels::create_event();  // home device is current
  if (!ready.ok()) return ready.status();
  GemmSplit split(problem, view(problem, plan.home), home, *std::move(ready));
  absl::Status failed;
  for (std::size_t i = 0; i < plan.helpers.size(); ++i) {
    CudaDevice& device = *helpers[i];
    ShareLayout layout = layout_of(plan.helpers[i], problem);
    const BlockSpec blocks[] = {{layout.a_bytes}, {layout.b_bytes}, {layout.c_bytes}};
    std::optional<DeviceScheduler::Admission> admitted = device.scheduler->try_admit(blocks);
    if (!admitted.has_value()) break;
    if (failed = cuda_status(cudaSetDevice(device.ordinal), "cudaSetDevice"); !failed.ok()) break;
    auto share = std::make_unique<HelperShare>(device, plan.helpers[i], *std::move(admitted),
                                               std::move(layout));
    absl::StatusOr<bool> prepared = share->prepare(problem, choose);
    if (!prepared.ok()) failed = prepared.status();
    if (!prepared.ok() || !*prepared) break;
    split.helpers_.push_back(std::move(share));
  }
  if (absl::Status s = cuda_status(cudaSetDevice(home.ordinal), "cudaSetDevice"); failed.ok()) {
    failed = s;
  }
  if (!failed.ok()) return failed;
  if (split.helpers_.size() != plan.helpers.size()) return std::nullopt;  // all or none
  return std::optional<GemmSplit>(std::move(split));
}

absl::Status GemmSplit::start_helpers(cudaStream_t home_stream) {
  if (absl::Status s = cuda_status(cudaEventRecord(ready_.get(), home_stream), "record event");
      !s.ok()) {
    return s;
  }
  const bool read_c = whole_.beta != 0.0;
  absl::Status status;
  for (const auto& helper : helpers_) {
    status = cuda_status(cudaSetDevice(helper->device().ordinal), "cudaSetDevice");
    if (status.ok()) status = helper->enqueue(whole_, ready_.get(), read_c);
    if (!status.ok()) break;
  }
  absl::Status back = cuda_status(cudaSetDevice(home_->ordinal), "cudaSetDevice");
  return status.ok() ? back : status;
}

absl::Status GemmSplit::join_helpers(cudaStream_t home_stream) {
  for (const auto& helper : helpers_) {
    if (absl::Status s = cuda_status(cudaStreamWaitEvent(home_stream, helper->done(), 0),
                                     "wait for a helper device");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

void GemmSplit::wait() {
  for (const auto& helper : helpers_) helper->wait();
  cudaSetDevice(home_->ordinal);
}

std::string GemmSplit::labels() const {
  std::string out = home_->label;
  for (const auto& helper : helpers_) absl::StrAppend(&out, "+", helper->device().label);
  return out;
}

}  // namespace matserve::server
