// Your copy of this lesson, generated from solutions/14_hopper_backward/kernel.cu by fa-skeleton.
// Lesson 14: the backward pass on Hopper (sm_90a): lesson 11's algorithm on lesson 13's machinery.
//   1. preprocess_kernel: per query row, D = rowsum(dO * O) and the LSE in base 2 (+inf past
//      seqlen_q), and the fp32 dQ accumulator zeroed;
//   2. backward_kernel: a block owns kKeys = 128 keys of one (batch, kv head), K and V loaded once by
//      TMA and kept in shared memory; the query tiles that see them (of every query head of the
//      group) stream past through a TMA ring: Q, dO, and the tile's LSE and D. Warpgroup 0 produces
//      (one thread issues every copy; two warps add dQ); warpgroups 1 and 2 consume, 64 keys each.
//      Per query tile:
//        S^T = K Q^T and dP^T = V dO^T                          (wgmma, both operands in shared memory)
//        P^T = exp2(S^T scale log2(e) - LSE2),  dS^T = P^T (dP^T - D)       (registers)
//        dV += P^T dO                                            (wgmma, P^T from registers)
//        dQ = dS K                                               (wgmma from shared memory)
//        dK += dS^T Q                                            (wgmma, dS^T from registers)
//      dQ's sum runs over every key block, so it cannot stay in one block: the consumers stage their
//      shares in shared memory and a dQ writer warp adds each with one TMA bulk reduce-add into an
//      fp32 accumulator (default; or fp32 atomics from the consumers), or, deterministic, in
//      key-block order behind a semaphore per query tile and warpgroup;
//   3. postprocess_kernel: dQ = scale * accumulator, rounded to fp16/bf16.
// Contiguous (batch, heads, seqlen, head_dim) tensors; fp16 and bf16; head dims 64 and 128; causal
// (bottom-right aligned) and not; GQA and MQA.
#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "13_hopper/wgmma.hpp"  // lesson 13's layouts: the swizzle, the descriptors, the accumulator
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/hopper.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "fa/tensor_map.hpp"
#include "fa/trace.cuh"
#include "fa/wgmma.cuh"
#include "plan.hpp"
#include "trace.hpp"

namespace {

using lesson13::acc_element;
using lesson13::kmajor_desc;
using lesson13::mnmajor_desc;
using lesson13::RowCol;

using lesson14::first_query_tile;
using lesson14::kKeys;
using lesson14::kRows;
constexpr int kThreads = 384;  // 3 warpgroups
// How dQ's shares reach the fp32 accumulator: one TMA bulk reduce-add per warpgroup and tile, issued
// by a dQ writer warp (kBulk, the default), fp32 atomics from every consumer thread (kAtomic, part
// 1's way), or the bulk reduce-adds in key-block order behind a semaphore per query tile and
// warpgroup (kOrdered: deterministic; dQ then split by columns at every head dim, plan.hpp).
enum DqMode { kAtomic, kBulk, kOrdered };
// Named barriers on dS^T: both consumer warpgroups (dQ split by columns), or each its own (by keys).
enum NamedBarrier { kBarDs = 1, kBarDsWg = 2 };

// This file's TODOs you have not written yet: delete an entry when its code is written.
const fa::TodoList kTodosLeft = {
    "TODO(2) in kernel.cu: from the second round on, stage s held tile it - S::stages: wait for the",
    "TODO(3) in kernel.cu: S^T: D / 16 k16 steps of wgmma_ss<T, kRows> into st, A = this warpgroup's K rows",
    "TODO(4) in kernel.cu: st[i] = P^T: exp2(S^T sl2 - LSE2 of its query row), or 0 where `masked` and the key",
    "TODO(5) in kernel.cu: dV += P^T dO: kRows / 16 steps of wgmma_rs<T, D>, A = pa[kk], B = dO read N-major",
    "TODO(6) in kernel.cu: dQ's share: by columns, kKeys / 16 steps of wgmma_ss<T, D / 2, 1, 1> into dq, A = dS",
    "TODO(7) in kernel.cu: dK += dS^T Q as dV (A = da[kk], B = Q read N-major); commit.",
    "TODO(8) in kernel.cu: dK takes the softmax scale here, once (dQ takes it in the postprocess).",
};

// The rows of a (batch, head)'s LSE2 and D, padded to whole query tiles: pad rows have LSE2 = +inf
// (so P = 0 there) and D = 0, and the ring copies whole tiles of both.
inline int padded_rows(int seqlen_q) { return fa::ceil_div(seqlen_q, kRows) * kRows; }
// The main kernel's grid: one block per (batch, K/V head, key block).
inline int64_t key_blocks(const fa::AttnParams& p) { return int64_t(fa::ceil_div(p.seqlen_k, kKeys)) * p.heads_kv * p.batch; }

// ---- 1. Preprocess --------------------------------------------------------------------------------
// D / 8 threads per (padded) row, 8 values each: D_i = dO_i . O_i, LSE2_i = LSE_i log2(e), and the
// row's dQ accumulator zeroed.
template <class T, int D>
__global__ void preprocess_kernel(const fa::AttnParams p, float* lse2, float* delta, float* dq_accum, int padded) {
  constexpr int kLanes = D / 8;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = idx / kLanes;  // the grid covers the padded rows exactly
  const int c = int(idx % kLanes);
  const int bh = int(row / padded), i = int(row % padded);
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  float sum = 0.f;
  if (i < p.seqlen_q) {
    const T* o = static_cast<const T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row + 8 * c;
    const T* d = static_cast<const T*>(p.dout) + b * p.do_stride.batch + h * p.do_stride.head + i * p.do_stride.row + 8 * c;
    sum = fa::dot8<T>(o, d);  // lesson 11's preprocess, the same dot product
  }
  sum = fa::group_sum<kLanes>(sum);
  if (c == 0) {
    delta[row] = i < p.seqlen_q ? sum : 0.f;
    lse2[row] = i < p.seqlen_q ? p.lse[int64_t(bh) * p.seqlen_q + i] * fa::kLog2e : INFINITY;
  }
  float4* acc = reinterpret_cast<float4*>(dq_accum + row * D + 8 * c);
  acc[0] = acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// ---- 2. The main kernel ---------------------------------------------------------------------------
// Block w: the (batch, kv head) and key tile block_tile says (plan.hpp: the launch order). `sem`
// (deterministic mode): per (batch, query head, query tile) and consumer warpgroup, how many adds
// into that share are done.
//
// kTrace (trace.hpp): five threads a block record the SM's clock at every change of phase (mark
// below); the other instantiations compile the marks away.
//
// C (plan.hpp, Config): the build's ring stages, dQ staging buffers, and at head dim 64 where K and V
// are read from and how dQ is split.
template <class T, class C, int kMode, bool kTrace>
__global__ void __launch_bounds__(kThreads, 1)
    backward_kernel(const fa::AttnParams p, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv, const float* lse2,
                    const float* delta, float* dq_accum, int* sem, int padded, int chunk, int stress, const fa::TraceSink trace) {
  constexpr int D = C::head_dim;
  using S = lesson14::Smem<C>;
  using Split = lesson14::SplitOf<C, kMode == kOrdered>;
  constexpr bool kByKeys = Split::by_keys;  // dQ split between the warpgroups by keys (d 64, not ordered)
  constexpr int kDqBufs = S::dq_buffers;    // staging buffers per consumer warpgroup
  constexpr int kDqCols = Split::cols;
  constexpr int kDqBytes = kRows * kDqCols * 4;  // a warpgroup's fp32 share of a dQ tile
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = fa::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  const uint32_t k_addr = base + S::k, v_addr = base + S::v, q_addr = base + S::q, do_addr = base + S::dout;
  const uint32_t ds_addr = base + S::ds;
  const float* lse_s = reinterpret_cast<const float*>(smem_raw + (base - raw) + S::lse);
  const float* delta_s = reinterpret_cast<const float*>(smem_raw + (base - raw) + S::delta);
  // Barriers, 8 bytes each: K/V loaded, then each stage's full and empty, then the dQ staging's:
  // dq_full + 8 (kDqBufs (c - 1) + buf) for consumer warpgroup c's buffer buf, and dq_empty the same.
  const uint32_t kv_full = base + S::bars, full = kv_full + 8, empty = full + 8 * S::stages;
  const uint32_t dq_full = empty + 8 * S::stages, dq_empty = dq_full + 8 * 2 * kDqBufs;

  const int64_t work = blockIdx.x;
  const int n_kt = fa::ceil_div(p.seqlen_k, kKeys);
  // The launch order (plan.hpp): heaviest key blocks first, in chunks of groups. The deterministic
  // mode numbers the key blocks from the last: there they add into each query tile from the
  // highest key block down (below), and a block may only wait for blocks launched before it.
  const lesson14::BlockTile bt = lesson14::block_tile(work, n_kt, p.batch * p.heads_kv, chunk, kMode == kOrdered);
  const int kt = bt.kt, bk = bt.bk;  // bk = b * heads_kv + hk
  const int b = bk / p.heads_kv, hk = bk % p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int k0 = kt * kKeys, offset = p.seqlen_k - p.seqlen_q;
  const int n_qt = padded / kRows;
  const int first = first_query_tile(k0, offset, p.causal);
  const int per_head = max(0, n_qt - first);  // 0: no row sees these keys (dK = dV = 0)
  const int n_iter = per_head * group;
  // Iteration it's query tile: (batch, query head) bh, the head's query tile qt, and the tile's
  // index among every (batch, query head, query tile): the producer, the dQ writers and the
  // consumers all walk the same tiles in the same order.
  struct Visit {
    int bh, qt;
    int64_t tile;
  };
  auto visit = [&](int it) {
    const int bh = b * p.heads_q + hk * group + it / per_head, qt = first + it % per_head;
    return Visit{bh, qt, int64_t(bh) * n_qt + qt};
  };

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  namespace ph = lesson14::phase;
  [[maybe_unused]] int n_marks = 0;
  // Called by one recording thread of `role` (trace.hpp): the producer's, thread 0 of a consumer
  // warpgroup, lane 0 of a dQ writer.
  auto mark = [&](int role, int phase, int64_t key) {
    fa::trace_mark<kTrace>(trace, lesson14::kTraceRoles * int(blockIdx.x) + role, n_marks, phase, key, phase == ph::kExit);
  };
  if (threadIdx.x == 0) {
    fa::mbar_init(kv_full, 1);
    for (int s = 0; s < S::stages; ++s) {
      fa::mbar_init(full + 8 * s, 1);   // the producer's arrive, with the bytes it expects
      fa::mbar_init(empty + 8 * s, 8);  // one arrive per consumer warp, once done with the stage
    }
    for (int i = 0; i < 2 * kDqBufs; ++i) {
      fa::mbar_init(dq_full + 8 * i, 128);  // every consumer thread, after its stores and proxy fence
      fa::mbar_init(dq_empty + 8 * i, 1);   // the dQ writer, once its bulk reduce has read the buffer
    }
    fa::fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- Producer warpgroup: warp 0's first thread issues every copy; in the bulk and ordered dQ
    // modes warps 1 and 2 add the consumers' dQ shares (warp w for consumer warpgroup w). All four
    // warps give their registers away to the consumers.
    fa::set_max_registers_dec<40>();
    const int warp = tid / 32;
    if (warp == 0 && tid == 0) {
      mark(0, ph::kSetup, 0);
      fa::tile_count_begin(p, work, k0, kKeys, kRows + fa::kKeysOwned);
      fa::mbar_expect_tx(kv_full, 2 * S::kv_bytes);
      for (int c = 0; c < D / 64; ++c) {
        fa::tma_load(k_addr + c * kKeys * 128, &tk, kv_full, 64 * c, k0, bk);
        fa::tma_load(v_addr + c * kKeys * 128, &tv, kv_full, 64 * c, k0, bk);
      }
      for (int it = 0; it < n_iter; ++it) {
        const int s = it % S::stages;
        const Visit v = visit(it);
        mark(0, ph::kWaitEmpty, v.tile);
        // TODO(2): from the second round on, stage s held tile it - S::stages: wait for the
        //   consumers' release of it (empty[s], the phase of round it / S::stages - 1).
        mark(0, ph::kCopy, v.tile);
        fa::tile_count_visit(p, work);
        const int bh = v.bh, q0 = v.qt * kRows;
        const uint32_t bar = full + 8 * s;
        fa::mbar_expect_tx(bar, 2 * S::q_bytes + 2 * S::stat_bytes);
        for (int c = 0; c < D / 64; ++c) {
          fa::tma_load(q_addr + s * S::q_bytes + c * kRows * 128, &tq, bar, 64 * c, q0, bh);
          fa::tma_load(do_addr + s * S::q_bytes + c * kRows * 128, &tdo, bar, 64 * c, q0, bh);
        }
        const int64_t stat = int64_t(bh) * padded + q0;
        fa::bulk_load(base + S::lse + s * S::stat_bytes, lse2 + stat, S::stat_bytes, bar);
        fa::bulk_load(base + S::delta + s * S::stat_bytes, delta + stat, S::stat_bytes, bar);
      }
      mark(0, ph::kExit, 0);
    } else if (kMode != kAtomic && (warp == 1 || warp == 2)) {
      // ---- dQ writer of consumer warpgroup `warp`: per tile, wait until the share is staged
      // (dq_full of its buffer, tile it in buffer it % kDqBufs), add it to the accumulator with one
      // bulk reduce-add, and free the buffer (dq_empty) once the reduce has read it. The consumers
      // only store and go on: with two buffers, they wait only if the reduce of two tiles ago is unread.
      const int role = 2 + warp;  // the trace's: 3 and 4
      if (tid % 32 == 0) mark(role, ph::kSetup, 0);
      for (int it = 0; it < n_iter; ++it) {
        const Visit v = visit(it);
        const int qt = v.qt;
        const int64_t tile = v.tile;
        float* acc = dq_accum + Split::share_start(tile, warp);
        const int buf = kDqBufs * (warp - 1) + it % kDqBufs;
        const uint32_t dq_s = base + S::dq + buf * S::dq_bytes;
        if (tid % 32 == 0) mark(role, ph::kWaitShare, tile);
        fa::mbar_wait(dq_full + 8 * buf, (it / kDqBufs) & 1);
        if (tid % 32 == 0) {
          int* my_sem = sem + tile * 2 + (warp - 1);
          if constexpr (kMode == kOrdered) {
            // Deterministic: key blocks add into tile qt from the highest that sees it down, so
            // block kt's turn comes after last - kt adds (section 5). The acquire pairs with the
            // previous adder's release; the proxy fence orders it before the bulk add (the async
            // proxy). Only this warp spins: the consumers go on with the next tiles meanwhile.
            static_assert(!kByKeys, "the ordered adds need a share per warpgroup (dQ split by columns)");
            const int turn = lesson14::last_key_block(qt, n_kt, offset, p.causal) - kt;
            while (fa::load_acquire(my_sem) != turn) {
            }
            fa::fence_proxy_async_global();
          }
          // The tests' stress mode (the variant stress): hold each share up to about 8 us before
          // adding it, so that consumers running ahead find their buffer still unread.
          mark(role, ph::kReduce, tile);
          if (stress) __nanosleep(uint32_t(tile * 2654435761u) >> 19);
          fa::bulk_reduce_add_f32(acc, dq_s, kDqBytes);
          fa::bulk_commit();
          mark(role, ph::kWaitRead, tile);
          if constexpr (kMode == kOrdered) {
            fa::bulk_wait<0>();              // the adds are done ...
            fa::fence_proxy_async_global();  // ... ordered before this thread's generic accesses ...
            fa::add_release(my_sem, 1);      // ... and visible before the next block may start its own
          } else {
            fa::bulk_wait_read<0>();  // the staging buffer has been read: it may be written again
          }
          fa::mbar_arrive(dq_empty + 8 * buf);
        }
        __syncwarp();
      }
      if (tid % 32 == 0) {
        fa::bulk_wait<0>();  // no bulk copy may outlive the block's shared memory
        mark(role, ph::kExit, 0);
      }
    }
    return;
  }

  // ---- Consumers: warpgroup 1 owns keys k0 .. k0 + 63, warpgroup 2 keys k0 + 64 .. k0 + 127.
  fa::set_max_registers_inc<232>();
  const bool rec = tid == 0;  // this warpgroup's recording thread (trace.hpp)
  if (rec) mark(wg, ph::kSetup, 0);
  const int kw = 64 * (wg - 1);
  const int lane = tid % 32;
  const float sl2 = p.scale * fa::kLog2e;
  float dv[D / 2], dk[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv[i] = dk[i] = 0.f;
  // This warpgroup's 64 rows of K and V (in every column block), and (split by columns: head dim
  // 128, and the deterministic mode at 64) its half of dQ's columns: n0 .. n0 + D / 2 - 1, which
  // are K's columns in dQ = dS K. At head dim 64 warpgroup 2's half starts 64 bytes into K's
  // 128-byte swizzled rows: the descriptor's start address may sit inside a swizzle row, since the
  // hardware swizzles the address it computes (as the K-major steps of 32 bytes do).
  const uint32_t k_rows = k_addr + kw * 128, v_rows = v_addr + kw * 128;
  const int n0 = kByKeys ? 0 : (wg - 1) * (D / 2);
  const uint32_t k_cols = k_addr + (n0 / 64) * kKeys * 128 + (n0 % 64) * 2;
  // dQ's share of tile `tile` (its (batch, head, query tile) index), out of the registers. The
  // accumulator keeps each share in the order the threads hold it (fragment-major): kDqCols / 8
  // chunks of 128 threads x 4 floats (thread tid's floats 4 c .. 4 c + 3 at chunk c), where
  // DqSplit::share_start says (plan.hpp); the postprocess reads it back in that order.
  float dq[kDqCols / 2];
  auto add_dq = [&](int64_t tile, int it) {
    if constexpr (kMode == kAtomic) {
      // 16-byte atomics, a warp's 32 of them on 512 contiguous bytes.
      float* acc = dq_accum + Split::share_start(tile, wg);
#pragma unroll
      for (int c = 0; c < kDqCols / 8; ++c)
        atomicAdd(reinterpret_cast<float4*>(acc) + c * 128 + tid, make_float4(dq[4 * c], dq[4 * c + 1], dq[4 * c + 2], dq[4 * c + 3]));
    } else {
      // Staged for this warpgroup's dQ writer, in the same order (16-byte stores, consecutive
      // threads on consecutive addresses: no bank conflict), in buffer it % kDqBufs once the
      // writer's reduce has read the share of tile it - kDqBufs from it (dq_empty); then dq_full
      // hands it over.
      const int buf = kDqBufs * (wg - 1) + it % kDqBufs;
      const uint32_t dq_s = base + S::dq + buf * S::dq_bytes;
      if (it >= kDqBufs) fa::mbar_wait(dq_empty + 8 * buf, (it / kDqBufs - 1) & 1);
#pragma unroll
      for (int c = 0; c < kDqCols / 8; ++c)
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dq_s + 16 * (c * 128 + tid)), "f"(dq[4 * c]), "f"(dq[4 * c + 1]),
                     "f"(dq[4 * c + 2]), "f"(dq[4 * c + 3])
                     : "memory");
      fa::fence_proxy_async();  // the writes above, before the bulk reduce (the async proxy) reads them
      fa::mbar_arrive(dq_full + 8 * buf);
    }
  };
  fa::mbar_wait(kv_full, 0);
  // Head dim 64: this warpgroup's 64 rows of K and V as wgmma's register A operand, read once per
  // block (lesson 13's a_element: register r of k16 step kk holds row, columns 16 kk + col and the
  // next), so that S^T and dP^T read only Q and dO from shared memory (README, section 3). At 128
  // the 64 registers they take are not there (the build's C::kv_in_regs; the variant kv-in-smem
  // reads them from shared memory at 64 too).
  constexpr bool kKvInRegs = C::kv_in_regs;
  uint32_t ka[kKvInRegs ? D / 16 : 1][4], va[kKvInRegs ? D / 16 : 1][4];
  if constexpr (kKvInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const RowCol rc = lesson13::a_element(tid, r, 0);
        const uint32_t off = lesson13::tile_offset(kKeys, kw + rc.row, 16 * kk + rc.col);
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(ka[kk][r]) : "r"(k_addr + off));
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(va[kk][r]) : "r"(v_addr + off));
      }
  }

  for (int it = 0; it < n_iter; ++it) {
    const int s = it % S::stages;
    const Visit v = visit(it);
    const int q0 = v.qt * kRows;
    if (rec) mark(wg, ph::kWaitTile, v.tile);
    const uint32_t q_s = q_addr + s * S::q_bytes, do_s = do_addr + s * S::q_bytes, ds_s = ds_addr + (it & 1) * S::ds_bytes;
    fa::mbar_wait(full + 8 * s, (it / S::stages) & 1);
    if (rec) mark(wg, ph::kIssueSdP, v.tile);

    // This tile's LSE2 for the thread's query rows, into registers before the products are issued:
    // a thread's floats 4 j .. 4 j + 3 sit in query rows (columns of S^T) 8 j + 2 t and 8 j + 2 t + 1,
    // so 8 pairs, one 8-byte load each. Loaded later, inside the exponential loop, each load would
    // queue behind dP^T's operand reads, which take the whole shared-memory bandwidth.
    const float2* lse_pairs = reinterpret_cast<const float2*>(lse_s + s * kRows) + tid % 4;
    float2 lse[kRows / 8];
#pragma unroll
    for (int j = 0; j < kRows / 8; ++j) lse[j] = lse_pairs[4 * j];

    // S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 rows each, fp32.
    float st[kRows / 2], dpt[kRows / 2];
    fa::wgmma_fence();
    // TODO(3): S^T: D / 16 k16 steps of wgmma_ss<T, kRows> into st, A = this warpgroup's K rows
    //   (K-major, a tile of kKeys rows), B = Q (K-major, kRows rows); commit; then dP^T the same
    //   way from V's rows and dO into dpt; commit. At head dim 64 (kKvInRegs) A comes from the
    //   registers ka[kk] and va[kk] instead: wgmma_rs<T, kRows, 0>, the same B.
    for (int i = 0; i < kRows / 2; ++i) st[i] = dpt[i] = 0.f;
    if (rec) mark(wg, ph::kWaitS, v.tile);
    fa::wgmma_wait<1>();  // S^T is done; dP^T may still run under the exponentials
    if (rec) mark(wg, ph::kExp, v.tile);

    // P^T = exp2(S^T scale log2(e) - LSE2), 0 where the key is masked or past seqlen_k (its K row
    // is zero-filled, and exp2(0 - LSE2) is not 0).
    const bool masked = k0 + kKeys > p.seqlen_k || (p.causal && q0 + offset < k0 + kKeys - 1);
    // TODO(4): st[i] = P^T: exp2(S^T sl2 - LSE2 of its query row), or 0 where `masked` and the key
    //   is past seqlen_k or (causal) after row + offset (acc_element: row = key, col = query row; the
    //   row's LSE2 is lse[i / 4].x for even i, .y for odd); then, below the wait for dP^T, dpt[i] =
    //   dS^T = P^T (dP^T - D of its query row) (this stage's D rows: delta_s + s * kRows, in pairs as LSE2).
    (void)masked;
    (void)lse;
    if (rec) mark(wg, ph::kWaitDp, v.tile);
    fa::wgmma_wait<0>();  // dP^T is done: its operand reads no longer hold shared memory
    if (rec) mark(wg, ph::kDs, v.tile);

    // dV += P^T dO and dK += dS^T Q, P^T and dS^T from registers: the accumulator's floats
    // 8 kk .. 8 kk + 7 are the A operand of k16 step kk (lesson 13's a_element).
    uint32_t pa[kRows / 16][4], da[kRows / 16][4];
#pragma unroll
    for (int kk = 0; kk < kRows / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pa[kk][r] = fa::pack2<T>(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
        da[kk][r] = fa::pack2<T>(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
      }
    if (rec) mark(wg, ph::kIssueDvStore, v.tile);
    fa::wgmma_fence();
    // TODO(5): dV += P^T dO: kRows / 16 steps of wgmma_rs<T, D>, A = pa[kk], B = dO read N-major
    //   (the head dimension is dV's N); commit.

    // dS^T into shared memory as it is (keys x rows, a row's 64 values in one 128-byte row): read
    // back transposed, it is dQ's A operand. Stored before the dK GEMM is issued: registers an
    // in-flight wgmma reads as its A operand must not even be read until it completes. Two
    // buffers: a warpgroup writes buffer it & 1 only after the readers of its rows passed the
    // barrier of iteration it - 1, so after they finished reading it (iteration it - 2).
#pragma unroll
    for (int i = 0; i < kRows / 2; i += 2) {
      const RowCol rc = acc_element(tid, i);
      const uint32_t addr = ds_s + lesson13::tile_offset(kKeys, kw + rc.row, rc.col);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(da[i / 8][(i % 8) / 2]) : "memory");
    }
    if (rec) mark(wg, ph::kBarrier, v.tile);
    fa::fence_proxy_async();  // the writes above, before wgmma (the async proxy) reads them
    if constexpr (kByKeys) {  // this warpgroup's rows of dS^T are in (its own barrier: compile-time ids)
      if (wg == 1) fa::named_sync(kBarDsWg, 128);
      else fa::named_sync(kBarDsWg + 1, 128);
    } else {
      fa::named_sync(kBarDs, 256);  // both warpgroups' dS^T are in (dV runs meanwhile)
    }
    if (rec) mark(wg, ph::kIssueDqDk, v.tile);

    // dQ's share = dS K, issued before dK, so that it leaves the registers while dK is on the tensor
    // cores. By columns (d 128, and deterministic at 64): 64 rows x this warpgroup's D / 2 columns,
    // over all 128 keys. By keys (d 64): 64 rows x all D columns, over this warpgroup's 64 keys.
    fa::wgmma_fence();
    // TODO(6): dQ's share: by columns, kKeys / 16 steps of wgmma_ss<T, D / 2, 1, 1> into dq, A = dS
    //   read transposed from the dS^T tile (M-major: mnmajor_desc over its kKeys rows), B = K's
    //   columns n0 .. n0 + D / 2 - 1 (N-major, from k_cols); by keys, the 4 steps of this
    //   warpgroup's keys (kw / 16 + kk) with N = D; commit.
    for (int i = 0; i < kDqCols / 2; ++i) dq[i] = 0.f;

    // TODO(7): dK += dS^T Q as dV (A = da[kk], B = Q read N-major); commit.
    if (rec) mark(wg, ph::kWaitDvDq, v.tile);
    fa::wgmma_wait<1>();  // dV and dQ are done; dK may still run
    if (rec) mark(wg, ph::kDqOut, v.tile);
    add_dq(v.tile, it);
    if (rec) mark(wg, ph::kWaitDk, v.tile);
    fa::wgmma_wait<0>();  // dK is done: Q, dO and this stage's LSE2 and D are free
    if (lane == 0) fa::mbar_arrive(empty + 8 * s);
  }

  if (rec) mark(wg, ph::kEpilogue, 0);
  // dK = scale * dK and dV, rows < seqlen_k, through their strides.
  T* dkb = static_cast<T*>(p.dk) + b * p.dk_stride.batch + hk * p.dk_stride.head;
  T* dvb = static_cast<T*>(p.dv) + b * p.dv_stride.batch + hk * p.dv_stride.head;
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const RowCol rc = acc_element(tid, i);
    const int key = k0 + kw + rc.row;
    if (key >= p.seqlen_k) continue;
    // TODO(8): dK takes the softmax scale here, once (dQ takes it in the postprocess).
    *reinterpret_cast<uint32_t*>(dkb + int64_t(key) * p.dk_stride.row + rc.col) = fa::pack2<T>(dk[i], dk[i + 1]);
    *reinterpret_cast<uint32_t*>(dvb + int64_t(key) * p.dv_stride.row + rc.col) = fa::pack2<T>(dv[i], dv[i + 1]);
  }
  if (rec) mark(wg, ph::kExit, 0);
}

// ---- 3. Postprocess -------------------------------------------------------------------------------
// dQ = scale * accumulator, rounded to T, through dQ's strides: 8 values per thread.
template <class T, int D, class Split>
__global__ void postprocess_kernel(const fa::AttnParams p, const float* dq_accum, int padded) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  if (idx >= rows * (D / 8)) return;
  const int64_t row = idx / (D / 8);
  const int c = int(idx % (D / 8));
  const int bh = int(row / p.seqlen_q), i = int(row % p.seqlen_q);
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  // The accumulator's layout (plan.hpp, dq_share_offset): per tile and warpgroup (half of the
  // columns), in the threads' order. This thread's 8 columns are one chunk: 4 threads, 2 floats each.
  constexpr int cols = Split::cols;  // a share's columns: D / 2, or D split by keys
  const float* src = dq_accum + Split::share_start(int64_t(bh) * (padded / kRows) + i / kRows, 1 + (8 * c) / cols) +
                     lesson14::dq_share_offset(i % kRows, (8 * c) % cols);
  float x[8];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const float2 v = *reinterpret_cast<const float2*>(src + 4 * t);
    x[2 * t] = v.x;
    x[2 * t + 1] = v.y;
  }
  const float s = p.scale;
  uint4 out;
  out.x = fa::pack2<T>(x[0] * s, x[1] * s);
  out.y = fa::pack2<T>(x[2] * s, x[3] * s);
  out.z = fa::pack2<T>(x[4] * s, x[5] * s);
  out.w = fa::pack2<T>(x[6] * s, x[7] * s);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq) + b * p.dq_stride.batch + h * p.dq_stride.head + i * p.dq_stride.row + 8 * c) = out;
}

// ---- Host ----------------------------------------------------------------------------------------
template <class T, class C, int kMode, bool kTrace>
void launch(const fa::AttnParams& p, int stress, cudaStream_t stream, const fa::TraceSink& trace) {
  constexpr int D = C::head_dim;
  constexpr int smem = lesson14::Smem<C>::total;
  static_assert(smem <= lesson14::kMaxSmem, "over Hopper's 227 KB of shared memory per block");
  const int padded = padded_rows(p.seqlen_q);
  const int64_t bh = int64_t(p.batch) * p.heads_q;
  const int64_t stats = bh * padded, n_qt = padded / kRows;
  const int64_t sems = kMode == kOrdered ? bh * n_qt * 2 : 0;
  // One scratch buffer: LSE2 and D (stats each), the dQ accumulator (stats x D), the semaphores.
  float* lse2 = static_cast<float*>(fa::device_scratch(size_t(stats * (2 + D) + sems) * sizeof(float)));
  float* delta = lse2 + stats;
  float* dq_accum = delta + stats;
  int* sem = reinterpret_cast<int*>(dq_accum + stats * D);
  if (sems > 0) FA_CUDA_CHECK(cudaMemsetAsync(sem, 0, size_t(sems) * sizeof(int), stream));

  const int64_t pre_threads = stats * (D / 8);  // a multiple of 64 * 8: whole blocks of 256
  preprocess_kernel<T, D><<<unsigned(pre_threads / 256), 256, 0, stream>>>(p, lse2, delta, dq_accum, padded);
  FA_CHECK_LAUNCH();

  const CUtensorMap tq = fa::make_tensor_map("14_hopper_backward", p.q, p.dtype, int(bh), p.seqlen_q, D, kRows);
  const CUtensorMap tdo = fa::make_tensor_map("14_hopper_backward", p.dout, p.dtype, int(bh), p.seqlen_q, D, kRows);
  const CUtensorMap tk = fa::make_tensor_map("14_hopper_backward", p.k, p.dtype, p.batch * p.heads_kv, p.seqlen_k, D, kKeys);
  const CUtensorMap tv = fa::make_tensor_map("14_hopper_backward", p.v, p.dtype, p.batch * p.heads_kv, p.seqlen_k, D, kKeys);
  auto kernel = backward_kernel<T, C, kMode, kTrace>;
  fa::allow_smem(kernel, smem);  // once per device
  const int n_kt = fa::ceil_div(p.seqlen_k, kKeys);
  // The deterministic mode keeps a group's blocks together (chunk 1): its blocks start from the
  // last key block, so chunks would start every group's lightest blocks first and its heaviest last.
  const int chunk = kMode == kOrdered ? 1 : lesson14::launch_chunk(n_kt, p.batch * p.heads_kv, fa::current_device().sm_count);
  kernel<<<unsigned(key_blocks(p)), kThreads, smem, stream>>>(p, tq, tdo, tk, tv, lse2, delta, dq_accum, sem, padded, chunk, stress, trace);
  FA_CHECK_LAUNCH();

  const int64_t post_threads = bh * p.seqlen_q * (D / 8);
  postprocess_kernel<T, D, lesson14::SplitOf<C, kMode == kOrdered>><<<unsigned((post_threads + 255) / 256), 256, 0, stream>>>(p, dq_accum, padded);
  FA_CHECK_LAUNCH();
}

// The variants (fa_lesson_14 below, in plan.hpp's order, enum Variant): 0 "writers", dQ by the
// writer warps' bulk reduce-adds; 1 "atomic", part 1's fp32 atomics from the consumers; 2 "stress",
// the writers with a lag of up to about 8 us before each add (the tests': consumers running ahead
// find their staging buffer still unread). The deterministic mode adds in order through the
// writers, with the lag in "stress". The others are the sweep's (README, "The sweep"): the default
// build with one knob changed (plan.hpp, knobs_of), in either dQ mode but the atomics.
using lesson14::kAtomicVariant;
using lesson14::kStress;
using lesson14::kWriters;

// Calls f with the build of Builds<D> whose knobs are `want` (plan.hpp, knobs_of): the tuple's
// first, else the rest's.
template <class F, class C, class... Rest>
void pick(const lesson14::Knobs& want, F& f, std::tuple<C, Rest...>*) {
  if (lesson14::knobs<C>() == want) f(C{});
  else if constexpr (sizeof...(Rest) > 0) pick(want, f, static_cast<std::tuple<Rest...>*>(nullptr));
  else throw fa::InvalidArgument("lesson 14_hopper_backward: no build of this variant at this head dim");
}
template <int D, class F>
void with_config(int variant, F&& f) {
  pick(lesson14::knobs_of(variant, D), f, static_cast<typename lesson14::Builds<D>::type*>(nullptr));
}

// With a trace sink, the traced kernel (fp16, the default build and dQ mode only, with the stress
// variant's lag or without: enough to see the schedule, and it keeps the traced instantiations to two).
void run(const fa::AttnParams& p, cudaStream_t stream, const fa::TraceSink* trace = nullptr) {
  fa::throw_if_todos_left("13_hopper", lesson13::kWgmmaTodosLeft);  // this lesson uses lesson 13's layouts
  fa::throw_if_todos_left("14_hopper_backward", lesson14::kPlanTodosLeft);
  fa::throw_if_todos_left("14_hopper_backward", kTodosLeft);
  if (key_blocks(p) > INT32_MAX)  // the grid's x
    throw fa::InvalidArgument("lesson 14_hopper_backward: more than 2^31 - 1 key blocks");
  // The dQ path: in order (deterministic), the consumers' atomics (variant atomic), else the writers.
  const int mode = p.deterministic ? kOrdered : p.variant == kAtomicVariant ? kAtomic : kBulk;
  const int stress = p.variant == kStress;
  if (trace) {
    if (p.dtype != fa::DType::kF16 || mode != kBulk || (p.variant != kWriters && p.variant != kStress))
      throw fa::InvalidArgument("lesson 14_hopper_backward: the trace runs fp16 and the default dQ mode only, of the default build");
    if (p.head_dim == 64) launch<__half, lesson14::Default<64>, kBulk, true>(p, stress, stream, *trace);
    else launch<__half, lesson14::Default<128>, kBulk, true>(p, stress, stream, *trace);
    return;
  }
  auto go = [&](auto config) {
    using C = decltype(config);
    if (mode == kAtomic) {
      if constexpr (std::is_same_v<C, lesson14::Default<C::head_dim>>)
        FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, C, kAtomic, false>(p, stress, stream, {})));
      else
        throw fa::InvalidArgument("lesson 14_hopper_backward: the atomics are a dQ path of the default build only");
    } else if (mode == kBulk) FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, C, kBulk, false>(p, stress, stream, {})));
    else FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, C, kOrdered, false>(p, stress, stream, {})));
  };
  // The atomics are a dQ path of the default build (variant atomic), not of the sweep's.
  if (p.head_dim == 64) with_config<64>(p.variant, go);
  else with_config<128>(p.variant, go);
}

void backward(const fa::AttnParams& p, cudaStream_t stream) { run(p, stream); }

// The traced build (fa::Tracer; trace.hpp): the call through the traced kernel (fp16 and the
// default dQ mode only), its lanes (kTraceRoles a block) and the CSV's label (the head dim).
// fa-bench --bwd --trace writes the records; plots/plot.py --phases reduces them to one tile's phases.
void trace(const fa::AttnParams& p, const fa::TraceSink& sink, cudaStream_t stream) { run(p, stream, &sink); }
int64_t trace_lanes(const fa::AttnParams& p) { return key_blocks(p) * lesson14::kTraceRoles; }
std::string trace_label(const fa::AttnParams& p) { return std::to_string(p.head_dim); }

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_14_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_14_declared();

const fa::LessonInfo& fa_lesson_14() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_14_declared();
    l.backward = &backward;
    l.variants = {{"writers", "dQ by the dQ writer warps, one bulk reduce-add a share"},
                  {"atomic", "dQ by 16-byte fp32 atomics from the consumers (part 1's way)"},
                  {"stress", "the dQ writers wait up to about 8 us before each add (the tests: the staging ring under a lagging writer)"},
                  // The sweep (README, "The sweep"): the default build with one knob changed.
                  {"stages2", "two query tiles in flight in the ring instead of four (the default before the sweep)", fa::Variant::Pass::kBoth, 64},
                  {"stages3", "three query tiles in flight in the ring (at head dim 128 with one dQ staging buffer a warpgroup: two do not fit)"},
                  {"one-dq-buffer", "one dQ staging buffer a consumer warpgroup instead of two"},
                  {"kv-in-smem", "S^T and dP^T read K and V from shared memory, as at head dim 128", fa::Variant::Pass::kBoth, 64},
                  {"dq-by-columns", "dQ split between the warpgroups by columns, as at head dim 128", fa::Variant::Pass::kBoth, 64}};
    l.max_batch_heads = INT32_MAX;  // TMA's coordinates are 32-bit
    l.tracer = {&trace, &trace_lanes, lesson14::kTraceRoles, lesson14::phase_name, 1 << 13, "head_dim", &trace_label, true};
    return l;
  }();
  return info;
}
