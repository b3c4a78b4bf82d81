// A gate in a CUDA stream: device work enqueued behind a closed gate starts only when the host
// opens it. The server closes its stream's gate, enqueues a request's whole device work (the
// events around it, conversions, the kernels: for a library call tens of microseconds of host
// time on a virtual machine), then opens it. The events then time the device work alone, back
// to back, however long the host took to enqueue it; without the gate the first event fires as
// soon as it is enqueued and the interval counts the host's launch work as kernel time.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"

namespace matserve::kernels {

class StreamGate {
 public:
  // Allocates the gate's word of pinned, device-mapped host memory (any device may wait on it).
  static absl::StatusOr<StreamGate> create();

  // Closed from construction until open() or destruction, which opens it: a gate is never left
  // closed on an error path (the stream would wait forever).
  class Hold {
   public:
    Hold(Hold&& other) noexcept : gate_(other.gate_), value_(other.value_) {
      other.gate_ = nullptr;
    }
    Hold& operator=(Hold&&) = delete;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { open(); }
    void open();

   private:
    friend class StreamGate;
    Hold(StreamGate* gate, unsigned int value) : gate_(gate), value_(value) {}
    StreamGate* gate_;
    unsigned int value_;
  };

  // Enqueues the wait on `stream`. Not thread-safe: one gate per stream, used by the one request
  // that holds the stream.
  absl::StatusOr<Hold> close(cudaStream_t stream);

 private:
  StreamGate(PinnedBuffer word, const unsigned int* device_word)
      : word_(std::move(word)), device_word_(device_word) {}
  unsigned int* host_word() const { return static_cast<unsigned int*>(word_.data()); }

  PinnedBuffer word_;                // the host's view
  const unsigned int* device_word_;  // the same word as the device reads it
  unsigned int last_ = 0;            // the value the latest close() waits for
};

}  // namespace matserve::kernels
