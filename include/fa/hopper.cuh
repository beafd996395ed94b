// Hopper's asynchronous machinery (sm_90a), one inline-PTX wrapper per instruction, as lesson 13
// introduces them (its README explains each) and lessons 14 and later use them:
//   mbarrier   a shared-memory barrier that completes a phase when its arrivals and the bytes it
//              expects have all come in; a waiter names the phase by its parity (0, 1, 0, ...);
//   TMA        cp.async.bulk(.tensor): a copy global -> shared done by the tensor-memory
//              accelerator, completing on an mbarrier (a tensor map describes a tiled copy);
//   named barriers, setmaxnreg, the async-proxy fence.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only)

#include <cstdint>

namespace fa {

// ---- mbarrier ------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads: once,
// after the inits, before a __syncthreads.
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` the phase must receive before it completes.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The same, for a thread that expects to wait long (a producer for a free stage, while the
// consumers compute). A try_wait suspends the thread until the phase completes or a time limit
// passes; without a hint that limit is short, and each retry takes an issue slot from the warps
// that share the scheduler (the consumers' warps). The hint raises the limit to kSuspendNs; the
// thread still resumes as soon as the phase completes.
__device__ __forceinline__ void mbar_wait_long(uint32_t bar, int parity) {
  constexpr uint32_t kSuspendNs = 1000000;
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity), "r"(kSuspendNs)
      : "memory");
}

// ---- TMA -----------------------------------------------------------------------------------------
// One box of a 3-D tensor map (fa/tensor_map.hpp) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) into shared memory,
// completing on `bar`.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}
// The reverse direction, adding: global[i] += shared[i] for `bytes` / 4 floats (a multiple of 16
// bytes, both 16-byte aligned), done by the TMA unit at L2, one operation for the whole block of
// floats instead of one atomic per float. Asynchronous: bulk_commit() closes a group of them;
// bulk_wait_read<n>() waits until at most n groups still read shared memory (the buffer may be
// written again), bulk_wait<n>() until at most n groups are still incomplete (their adds done).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }
// Orders this thread's ordinary shared-memory writes before later reads by the async proxy
// (wgmma reading a tile through a descriptor, a bulk copy reading shared memory).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The same between the async proxy and ordinary accesses to global memory (a bulk reduce-add's
// writes and the flag that publishes them).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// A flag between blocks: the load acquires (later accesses stay after it), the add releases
// (earlier accesses are visible to whoever acquires the new value), both at GPU scope.
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// ---- Registers and named barriers ----------------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void set_max_registers_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void set_max_registers_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
// Named barriers (ids 1-15; __syncthreads uses 0): wait until `count` threads arrived, or arrive only.
// The threads of one barrier meet it at different instructions (a producer's loop, a consumer's
// phases), so these are the unaligned forms (bar.sync is barrier.sync.aligned, which promises one
// instruction for all). A warp still takes part as a whole: __syncwarp() first reconverges a warp
// whose threads went separate ways (a spin on an mbarrier, a lane-0 branch).
__device__ __forceinline__ void named_sync(int id, int count) {
  __syncwarp();
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  __syncwarp();
  asm volatile("barrier.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ int sm_id() {
  int id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

}  // namespace fa
