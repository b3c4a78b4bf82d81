// Hopper (sm_90a) PTX as named device functions, one per instruction the wgmma kernels issue:
// mbarriers and the stage/phase state of a ring of them, TMA loads and bulk-group stores, fences,
// named barriers, register reallocation, shared-memory descriptors, and wgmma (fence, commit, wait
// and the m64nN instructions). Use from *_sm90a.cu files only, whose bodies CMake compiles for
// sm_90a (kernels/CMakeLists.txt), and from code under `#if defined(__CUDA_ARCH_FEAT_SM90_ALL)`.
#pragma once

#include <cuda.h>

#include <cstdint>

// wgmma.mma_async with both operands in shared memory (descriptors da, db) into 64 or 128 fp32
// accumulators d[]: the operand lists are generated here once, and the named functions at the end
// of this file are the only users. INSTR is the instruction's full name, e.g.
// "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16". The _TRANS forms pass the two
// transpose immediates that 16-bit types take (1 = MN-major); scale_d == 0 ignores the old
// accumulators.
#define MATSERVE_WGMMA_ACC8(d, i)                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define MATSERVE_WGMMA_ACC64(d)                                                           \
  MATSERVE_WGMMA_ACC8(d, 0), MATSERVE_WGMMA_ACC8(d, 8), MATSERVE_WGMMA_ACC8(d, 16),       \
      MATSERVE_WGMMA_ACC8(d, 24), MATSERVE_WGMMA_ACC8(d, 32), MATSERVE_WGMMA_ACC8(d, 40), \
      MATSERVE_WGMMA_ACC8(d, 48), MATSERVE_WGMMA_ACC8(d, 56)
#define MATSERVE_WGMMA_ACC128(d)                                                          \
  MATSERVE_WGMMA_ACC64(d), MATSERVE_WGMMA_ACC8(d, 64), MATSERVE_WGMMA_ACC8(d, 72),        \
      MATSERVE_WGMMA_ACC8(d, 80), MATSERVE_WGMMA_ACC8(d, 88), MATSERVE_WGMMA_ACC8(d, 96), \
      MATSERVE_WGMMA_ACC8(d, 104), MATSERVE_WGMMA_ACC8(d, 112), MATSERVE_WGMMA_ACC8(d, 120)
#define MATSERVE_WGMMA_REGS64                                                                  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define MATSERVE_WGMMA_REGS128                                                                   \
  MATSERVE_WGMMA_REGS64                                                                          \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "   \
  "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "   \
  "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define MATSERVE_WGMMA64_TRANS(INSTR, d, da, db, scale_d, kTransA, kTransB)                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS64 \
               "}, %64, %65, p, 1, 1, %66, %67;\n}\n"                                        \
               : MATSERVE_WGMMA_ACC64(d)                                                     \
               : "l"(da), "l"(db), "n"(kTransA), "n"(kTransB), "r"(scale_d))
#define MATSERVE_WGMMA128_TRANS(INSTR, d, da, db, scale_d, kTransA, kTransB)                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %132, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS128 \
               "}, %128, %129, p, 1, 1, %130, %131;\n}\n"                                      \
               : MATSERVE_WGMMA_ACC128(d)                                                      \
               : "l"(da), "l"(db), "n"(kTransA), "n"(kTransB), "r"(scale_d))
// tf32 and fp8 (types read K-major only) take no transpose immediates.
#define MATSERVE_WGMMA64(INSTR, d, da, db, scale_d)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS64 \
               "}, %64, %65, p, 1, 1;\n}\n"                                                  \
               : MATSERVE_WGMMA_ACC64(d)                                                     \
               : "l"(da), "l"(db), "r"(scale_d))
#define MATSERVE_WGMMA128(INSTR, d, da, db, scale_d)                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS128 \
               "}, %128, %129, p, 1, 1;\n}\n"                                                  \
               : MATSERVE_WGMMA_ACC128(d)                                                      \
               : "l"(da), "l"(db), "r"(scale_d))

namespace matserve::kernels::hopper {

__device__ __forceinline__ void mbar_init(std::uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

// Spins until the barrier's phase with parity `phase` has completed.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, int phase) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(phase)
        : "memory");
  } while (done == 0);
}

__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives and tells the barrier to expect `bytes` more from asynchronous (TMA) copies.
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Makes the barriers' initialisation visible to the other threads and to the async (TMA) proxy.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Where a ring of kStages shared-memory buffers stands: the buffer (stage) a loop touches next and
// the parity of that buffer's barrier phase, which flips each time the ring wraps. The producer
// and the consumers each keep one and advance() it once per buffer.
template <int kStages>
class PipelineState {
 public:
  __device__ __forceinline__ int stage() const { return stage_; }
  __device__ __forceinline__ int phase() const { return phase_; }
  __device__ __forceinline__ void advance() {
    if (++stage_ == kStages) {
      stage_ = 0;
      phase_ ^= 1;
    }
  }

 private:
  int stage_ = 0;
  int phase_ = 0;
};

// The mbarriers of a ring of kStages buffers, 8 bytes each from `bars` in shared memory: full[s]
// completes when buffer s has been loaded (the producer's arrival plus the TMA's bytes), empty[s]
// when every consumer has finished reading it.
template <int kStages>
class MbarPipeline {
 public:
  static constexpr int kBytes = 2 * kStages * 8;

  __device__ __forceinline__ explicit MbarPipeline(std::uint32_t bars) : bars_(bars) {}

  __device__ __forceinline__ std::uint32_t full(int s) const { return bars_ + 8 * s; }
  __device__ __forceinline__ std::uint32_t empty(int s) const { return bars_ + 8 * (kStages + s); }

  // One thread, before the block's first barrier: full[s] waits for `producers` arrivals, empty[s]
  // for `consumers`.
  __device__ __forceinline__ void init(int producers, int consumers) const {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), producers);
      mbar_init(empty(s), consumers);
    }
    fence_mbarrier_init();
  }

  // Producer: waits until the consumers have released the state's buffer (its previous use),
  // then arrives on its full barrier, which then also waits for `tx_bytes` of TMA loads.
  __device__ __forceinline__ void producer_acquire(PipelineState<kStages> st, int tx_bytes) const {
    mbar_wait(empty(st.stage()), st.phase() ^ 1);
    mbar_expect_tx(full(st.stage()), tx_bytes);
  }
  // Consumer: waits until the state's buffer has landed.
  __device__ __forceinline__ void consumer_wait(PipelineState<kStages> st) const {
    mbar_wait(full(st.stage()), st.phase());
  }
  // Consumer: one arrival (per consumer) that buffer `stage` may be refilled.
  __device__ __forceinline__ void consumer_release(int stage) const { mbar_arrive(empty(stage)); }

 private:
  std::uint32_t bars_;
};

// One box of a 2-D tensor map at coordinates (c0 innermost, c1) into shared memory at dst; the
// barrier counts its bytes on arrival.
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map,
                                            std::uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// Stores one box of a 2-D tensor map from shared memory at src to coordinates (c0 innermost, c1);
// the TMA clips the box at the tensor's edge. Joins the thread's current bulk group.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, std::uint32_t src, int c0,
                                             int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
          reinterpret_cast<std::uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1)
      : "memory");
}

// Closes the thread's current bulk group (the TMA stores issued since the last commit).
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of the thread's bulk groups are still running.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Waits until at most kPending of the thread's bulk groups still read their shared-memory source
// (the writes to global memory may still be in flight): the source may then be overwritten.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Orders this thread's generic-proxy writes to shared memory before later async-proxy (TMA)
// reads of it.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads') for kThreads threads, a multiple of 32.
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// One 32-bit store to shared memory by its 32-bit address.
__device__ __forceinline__ void st_shared_u32(std::uint32_t addr, std::uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

// Warpgroup register reallocation: every thread of the warpgroup executing it lowers (dec) or
// raises (inc) its register budget to kRegs.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Shared-memory matrix descriptor, 128-byte swizzle. K-major: lbo unused, sbo = 1024 (8 rows of
// 128 B). MN-major: lbo = stride between 64-element MN chunks, sbo = 1024 (8 K rows).
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t lbo,
                                                   std::uint32_t sbo) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<std::uint64_t>(lbo >> 4) << 16) |
         (static_cast<std::uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

// Orders the warpgroup's register accesses to the accumulators before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the warpgroup's current wgmma group (the wgmma issued since the last commit).
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending of the warpgroup's wgmma groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// D (64 x N, fp32) += A (64 x K) * B (K x N), both from shared-memory descriptors; the name says
// the shape and types as PTX does. kTransA / kTransB: 1 when that operand is MN-major.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_f32_f16(float (&d)[64], std::uint64_t da,
                                                         std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA64_TRANS("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", d, da, db, scale_d,
                         kTransA, kTransB);
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_f32_bf16(float (&d)[64], std::uint64_t da,
                                                          std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA64_TRANS("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", d, da, db,
                         scale_d, kTransA, kTransB);
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_f32_f16(float (&d)[128], std::uint64_t da,
                                                         std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA128_TRANS("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", d, da, db, scale_d,
                          kTransA, kTransB);
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_f32_bf16(float (&d)[128], std::uint64_t da,
                                                          std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA128_TRANS("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", d, da, db,
                          scale_d, kTransA, kTransB);
}
// tf32 is read K-major only (no transpose immediates).
__device__ __forceinline__ void wgmma_m64n256k8_f32_tf32(float (&d)[128], std::uint64_t da,
                                                         std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA128("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", d, da, db, scale_d);
}
// fp8 e4m3 is read K-major only; one instruction covers 32 of K (32 bytes, as for 16-bit types).
__device__ __forceinline__ void wgmma_m64n128k32_f32_e4m3(float (&d)[64], std::uint64_t da,
                                                          std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA64("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", d, da, db, scale_d);
}
__device__ __forceinline__ void wgmma_m64n256k32_f32_e4m3(float (&d)[128], std::uint64_t da,
                                                          std::uint64_t db, int scale_d) {
  MATSERVE_WGMMA128("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", d, da, db, scale_d);
}

}  // namespace matserve::kernels::hopper
