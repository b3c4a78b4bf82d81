// Hopper (sm_90a) building blocks shared by the wgmma kernels: mbarrier waits and arrivals, TMA
// tensor loads, shared-memory matrix descriptors, and the wgmma instruction itself generated from
// one macro per accumulator size, so a new shape or type is one line rather than a copied
// 130-operand asm block. Include only from *_sm90a.cu files (their bodies are compiled for
// sm_90a; see kernels/CMakeLists.txt).
#pragma once

#include <cuda.h>

#include <cstdint>

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

// Shared-memory matrix descriptor, 128-byte swizzle. K-major: lbo unused, sbo = 1024 (8 rows of
// 128 B). MN-major: lbo = stride between 64-element MN chunks, sbo = 1024 (8 K rows).
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t lbo,
                                                   std::uint32_t sbo) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<std::uint64_t>(lbo >> 4) << 16) |
         (static_cast<std::uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

}  // namespace matserve::kernels::hopper

// wgmma.mma_async with both operands in shared memory (descriptors da, db) into 64 or 128 fp32
// accumulators d[]: the operand lists are generated here once. INSTR is the instruction's full
// name, e.g. "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16". The _TRANS forms pass the
// two transpose immediates that 16-bit types take (kTA, kTB: 1 = MN-major); scale_d == 0 ignores
// the old accumulators.
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

#define MATSERVE_WGMMA64_TRANS(INSTR, d, da, db, scale_d, kTA, kTB)                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS64 \
               "}, %64, %65, p, 1, 1, %66, %67;\n}\n"                                        \
               : MATSERVE_WGMMA_ACC64(d)                                                     \
               : "l"(da), "l"(db), "n"(kTA), "n"(kTB), "r"(scale_d))
#define MATSERVE_WGMMA128_TRANS(INSTR, d, da, db, scale_d, kTA, kTB)                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %132, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS128 \
               "}, %128, %129, p, 1, 1, %130, %131;\n}\n"                                      \
               : MATSERVE_WGMMA_ACC128(d)                                                      \
               : "l"(da), "l"(db), "n"(kTA), "n"(kTB), "r"(scale_d))
// tf32 (and other types read K-major only) take no transpose immediates.
#define MATSERVE_WGMMA128(INSTR, d, da, db, scale_d)                                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" INSTR " {" MATSERVE_WGMMA_REGS128 \
               "}, %128, %129, p, 1, 1;\n}\n"                                                  \
               : MATSERVE_WGMMA_ACC128(d)                                                      \
               : "l"(da), "l"(db), "r"(scale_d))
