// Lesson 12's forward kernel: lesson 08's, over the tile map, with GQA, packed sequences and the
// gate. Part of kernel.cu, which alone includes it.
#pragma once

#include "../08_pipelining/attention.cuh"  // lesson 08's steps of one key sub-tile
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "sequences.cuh"  // and with it, lessons 08 and 11's tiles.hpp and plan.hpp

namespace {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 12 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kForwardTodosLeft = {
    // @todos-left
};

// ---- Forward -----------------------------------------------------------------------------------
// Lesson 08's kernel, one block per (query tile, query head), with a sequence's bounds in place of
// seqlen_q/seqlen_k and, with kGate, the gate's anchored differences added to the logits (which
// then live in base-2 units: the softmax runs with scale 1).
template <class T, int D, int kRows, int kKeys, int kSub, int kWarps, int kStages, int kBlocksPerSM, bool kGate>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSM)
    forward_kernel(const fa::AttnParams p, const int2* map, const int* map_count, const double* G, bool heaviest_first) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpRows = kRows / kWarps;
  constexpr int kMT = kWarpRows / 16;
  constexpr int kNT = kSub / 8;
  constexpr int kDT = D / 8;
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sQ = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sK = sQ + kRows * D;
  T* sV = sK + kStages * kKeys * D;

  // The block's sequence and loop bounds live in shared memory, read where they are used (fresh):
  // this kernel is at the 255-register limit, and lesson 08's bounds came from the kernel's
  // parameters, which cost no register. Kept in registers through the loop, these would push
  // the accumulators out to local memory (ptxas reports the spills).
  __shared__ Block blk;
  __shared__ alignas(16) int64_t at[4];  // where the block's K, V, O rows and LSE entries start (elements)
  __shared__ int4 loop;  // what the key loop reads: n_tiles, n_full, len_k, q0 + offset (one 16-byte load)
  if (threadIdx.x == 0) {
    blk = block_of(p, map, map_count, entry(p.heads_q), kRows, kKeys, heaviest_first);
    const int h = head(p.heads_q), hk = h / (p.heads_q / p.heads_kv);
    at[0] = k_offset(p.k_stride, blk.s, hk);
    at[1] = k_offset(p.v_stride, blk.s, hk);
    at[2] = q_offset(p.o_stride, blk.s, h);
    at[3] = lse_index(p, blk.s, h);
    loop = make_int4(blk.n_tiles, blk.n_full, blk.s.len_k, blk.tile * kRows + blk.offset);
  }
  __syncthreads();
  if (blk.tile < 0) return;  // past the end of the map
  const Seq& s = blk.s;
  auto len_k = [&] { return fresh(blk.s.len_k); };
  auto offset = [&] { return fresh(blk.offset); };
  auto q0 = [&] { return fresh(blk.tile) * kRows; };
  const int h = head(p.heads_q);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* qbase = static_cast<const T*>(p.q) + q_offset(p.q_stride, s, h);
  auto kbase = [&] { return static_cast<const T*>(p.k) + fresh(at[0]); };
  auto vbase = [&] { return static_cast<const T*>(p.v) + fresh(at[1]); };
  load_tile<kThreads, kRows, D>(sQ, qbase, p.q_stride.row, q0(), s.len_q);
  fa::cp_async_commit();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < blk.n_tiles) {
      load_tile<kThreads, kKeys, D>(sK + st * kKeys * D, kbase(), p.k_stride.row, st * kKeys, len_k());
      load_tile<kThreads, kKeys, D>(sV + st * kKeys * D, vbase(), p.v_stride.row, st * kKeys, len_k());
    }
    fa::cp_async_commit();
  }

  float o[kMT][kDT][4] = {};
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    for (int hh = 0; hh < 2; ++hh) m[mt][hh] = fa::kNegInf, l[mt][hh] = 0.f;
  const float sl2 = p.scale * fa::kLog2e;
  const float sc = kGate ? 1.f : sl2;  // the softmax's scale: with the gate, S is scaled as it is biased
  const int g = lane / 4, t = lane % 4;

  // The gate: G of this (sequence, head), the tile's anchor, and this thread's rows' differences.
  const double* gh = nullptr;
  double anchor = 0;
  float qg[kMT][2] = {};
  if constexpr (kGate) {
    gh = G + gate_index(p, s, h);
    // TODO(15): the anchor (G at lesson12::gate_anchor) and qg = gate_diff at each of this
    //   thread's rows' key position row + offset (0 for rows past len_q or before position 0).
    // BEGIN SOLUTION
    if (s.len_k > 0) {
      anchor = gh[lesson12::gate_anchor(q0(), s.len_q, s.len_k)];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int row = q0() + warp * kWarpRows + mt * 16 + g + 8 * hh;
          if (row < s.len_q && row + offset() >= 0) qg[mt][hh] = gate_diff(gh, row + offset(), anchor);
        }
    }
    // END SOLUTION
  }

  const uint32_t q_addr = fa::smem_addr(sQ), k_addr = q_addr + kRows * D * 2, v_addr = k_addr + kStages * kKeys * D * 2;
  const uint32_t q_off = 2 * tile_offset(warp * kWarpRows + lane % 16, 8 * (lane / 16), D);
  const uint32_t k_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t v_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);

  // The key loop reads its bounds once per key tile, as one 16-byte load, and again after S
  // (where Q's and K's fragments are dead): a few volatile loads a tile, not one per use.
  for (int j = 0;; ++j) {
    const int4 top = fresh(loop);
    if (j >= top.x) break;
    fa::cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int next = j + kStages - 1;
      if (next < top.x) {
        const int slot = next % kStages;
        const longlong2 kv = fresh_pair(at);
        load_tile<kThreads, kKeys, D>(sK + slot * kKeys * D, static_cast<const T*>(p.k) + kv.x, p.k_stride.row, next * kKeys, top.z);
        load_tile<kThreads, kKeys, D>(sV + slot * kKeys * D, static_cast<const T*>(p.v) + kv.y, p.v_stride.row, next * kKeys, top.z);
      }
      fa::cp_async_commit();
    }

#pragma unroll 1
    for (int sub = 0; sub < kKeys / kSub; ++sub) {
    const uint32_t kj = k_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
    float sacc[kMT][kNT][4] = {};
    lesson08::scores<T, D, kMT, kSub>(sacc, q_addr, q_off, kj, k_off);

    const int col0 = j * kKeys + sub * kSub + 2 * t;  // this thread's first column
    if constexpr (kGate) {
      // TODO(16): the logits in base 2 with the gate: sacc = sacc * scale * log2(e) + qg - kg,
      //   kg = gate_diff at the column (0 past len_k, where the mask below removes it anyway).
      // BEGIN SOLUTION
      const int lk = fresh(blk.s.len_k);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int c = col0 + nt * 8;
        const float kg0 = c < lk ? gate_diff(gh, c, anchor) : 0.f;
        const float kg1 = c + 1 < lk ? gate_diff(gh, c + 1, anchor) : 0.f;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[mt][nt][e] = fmaf(sacc[mt][nt][e], sl2, qg[mt][e / 2] - (e % 2 ? kg1 : kg0));
      }
      // END SOLUTION
    }
    if (j >= fresh(blk.n_full)) {
      // One read for the whole tile: causal, q0 + offset (key col is masked past row + offset);
      // otherwise len_k. A single register: the int4 whole does not fit beside 128 keys of S.
      const int lim = p.causal ? fresh(loop.w) : fresh(loop.z);
      // Causal: key col is masked past row + offset, which is below len_k for every row of the
      // sequence (rows past len_q are zeros, never stored), so the tail needs no test of its own
      // (and the one test fewer keeps this kernel within its registers).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = col0 + nt * 8 + e % 2;
            if (p.causal ? col > lim + warp * kWarpRows + mt * 16 + g + 8 * (e / 2) : col >= lim) sacc[mt][nt][e] = fa::kNegInf;
          }
    }

    lesson08::online_softmax(sacc, m, l, o, sc);
    lesson08::accumulate_pv<T, D, kMT, kSub>(sacc, l, o, v_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2, v_off);
    }  // sub
  }
  fa::cp_async_wait<0>();

  // With the gate the LSE holds G_i - A and -(G_j - A): the anchor cancels, it is the true one.
  lesson08::store_o(o, m, l, static_cast<T*>(p.o) + fresh(at[2]), p.o_stride.row, p.lse + fresh(at[3]),
                    [&] { return q0() + warp * kWarpRows; }, s.len_q, sc, lane);
}

}  // namespace
