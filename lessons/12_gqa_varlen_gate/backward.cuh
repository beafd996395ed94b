// Your copy of this lesson, generated from solutions/12_gqa_varlen_gate/backward.cuh by fa-skeleton.
// Lesson 12's backward kernels: the preprocess (D, and the gate's anchors), lesson 11's dK/dV
// kernel over the tile map with GQA, packed sequences, the gate and dG, and the query tiles of
// lesson 11's deterministic dQ pass. Part of kernel.cu, which alone includes it.
#pragma once

#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "../11_fast_backward/dkdv.cuh"  // lesson 11's steps of one tile
#include "sequences.cuh"  // and with it, lessons 08 and 11's tiles.hpp and plan.hpp

namespace {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 12 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kBackwardTodosLeft = {
    "TODO(18) in backward.cuh: kg[kt][hh] = gate_diff of key k0 + 16 (kKT warp + kt) + g + 8 hh (if below",
    "TODO(19) in backward.cuh: add this step's dS to the column sums: each thread's values of keys g and g + 8",
    "TODO(20) in backward.cuh: the row sums: each thread's values of one column (query row r0 + nt 8 + 2 t +",
    "TODO(21) in backward.cuh: after the last query tile of head h, the same lanes store dG = -colsum for their",
    "TODO(17) in backward.cuh: the row's gate_diff (at position i + offset, from the tile's anchor, as in the",
};

// ---- Backward ----------------------------------------------------------------------------------
// Lesson 11's dK/dV kernel, one block per (key tile, kv head) of a sequence. With kGate the
// logits get the keys' anchored G differences (the rows' are in LSE2), and each key's column sum
// of dS (over the rows of one query head) is kept in registers and stored, negated, as dG.
template <class T, int D, int kKeys, int kRows, int kSub, int kWarps, bool kAtomicDq, bool kGate>
__global__ void __launch_bounds__(kWarps * 32, 1)
    dkdv_kernel(const fa::AttnParams p, const int2* kmap, const int* kcount, const int* qtile_start, const double* G,
                const float* lse2, const float* delta, int64_t stat_stride, float* dq_accum, float* dG, float* dG_rows) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kKT = kKeys / (16 * kWarps);
  constexpr int kNT = kSub / 8;
  constexpr int kDT = D / 8;
  static_assert(kRows == lesson12::kStatRows, "the statistics and the gate's anchors are per tile of kStatRows rows");
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sK = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sV = sK + kKeys * D;
  T* sQ = sV + kKeys * D;
  T* sdO = sQ + 2 * kRows * D;
  T* sdS = sdO + 2 * kRows * D;
  float* sL = reinterpret_cast<float*>(sdS + kKeys * kRows);
  float* sDelta = sL + 2 * kRows;

  // The block's sequence and bounds in shared memory, as in the forward: dK and dV hold 128
  // registers a thread, and the kernel is at the 255-register limit. The loop reads them as
  // 16-byte loads (fresh) at the top of an iteration, and again where S^T's fragments are dead:
  // a few volatile loads an iteration, not one per use.
  struct KeyBlock {
    Seq s;
    int k0, hk;  // the first key (-1: past the end of the map) and the K/V head
  };
  __shared__ KeyBlock kb;
  __shared__ int4 iters;   // n_iter, per_head, first, hk * group
  __shared__ int4 bounds;  // len_q, len_k, offset, k0
  // Where head 0's rows start in Q and dO, its statistics (stat_row), its fp32 dQ sums (lse_index)
  // and its gate (gate_index); head h's are h times the head's stride further.
  __shared__ alignas(16) int64_t origin[5];
  // Per buffer, its query tile: head h, first row q0, whether it needs the mask, and the mask's
  // bound (below). Thread 0 writes it as the loads start, and it travels with the tiles: the loop
  // reads it back where it needs it, with no register held and no division (it / per_head).
  __shared__ int4 tile_of[2];  // h, q0, masked, bound
  auto head_row = [&](int buf) { return fresh(reinterpret_cast<const int2&>(tile_of[buf])); };  // h, q0
  if (threadIdx.x == 0) {
    int b = 0, ktile = -1;
    kb.k0 = -1;
    if (work_item(p, kmap, kcount, entry(p.heads_kv), fa::ceil_div(p.seqlen_k, kKeys), false, b, ktile)) {
      const Seq sq = sequence(p, b);
      const int k0 = ktile * kKeys, offset = sq.len_k - sq.len_q, hk = head(p.heads_kv), group = p.heads_q / p.heads_kv;
      kb.s = sq;
      kb.k0 = k0;
      kb.hk = hk;
      // The query tiles this key tile visits, for each head of the group: from the first that
      // sees any of its keys (causal) to the last. Iteration `it` is query tile first + it %
      // per_head of head hk * group + it / per_head.
      const int first = lesson11::first_query_tile(k0, offset, kRows, p.causal);
      const int per_head = max(0, fa::ceil_div(sq.len_q, kRows) - first);
      iters = make_int4(per_head * group, per_head, first, hk * group);
      bounds = make_int4(sq.len_q, sq.len_k, offset, k0);
      origin[0] = q_offset(p.q_stride, sq, 0);
      origin[1] = q_offset(p.do_stride, sq, 0);
      origin[2] = lesson12::stat_row(sq.varlen, b, 0, 0, p.heads_q, stat_stride, sq.varlen ? qtile_start[b] : 0);
      origin[3] = lse_index(p, sq, 0);
      origin[4] = gate_index(p, sq, 0);
    }
  }
  __syncthreads();
  if (kb.k0 < 0) return;
  const Seq& s = kb.s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // Head h's statistics, fp32 dQ sums and gate: origin[2], [3] and [4] plus h heads' strides
  // (the parameters', which cost no register).
  auto stat_at = [&](int h) { return fresh(origin[2]) + h * stat_stride; };
  auto accum_at = [&](int h) { return fresh(origin[3]) + h * int64_t(is_varlen(p) ? p.total_q : p.seqlen_q); };
  auto gate_at = [&](int h) { return fresh(origin[4]) + h * int64_t(is_varlen(p) ? p.total_k : p.seqlen_k); };
  {
    const int4 bd = fresh(bounds);
    const int hk = fresh(kb.hk);
    load_tile<kThreads, kKeys, D>(sK, static_cast<const T*>(p.k) + k_offset(p.k_stride, s, hk), p.k_stride.row, bd.w, bd.y);
    load_tile<kThreads, kKeys, D>(sV, static_cast<const T*>(p.v) + k_offset(p.v_stride, s, hk), p.v_stride.row, bd.w, bd.y);
  }
  // Starts the loads of query head h's tile at row q0 into buffer `buf`: Q, dO, and the rows' LSE2
  // and D (whole tiles of statistics: no guard); thread 0 fills the buffer's tile_of. The mask's
  // bound: causal, q0 + offset - k0 (key k0 + k is masked past row q0 + r + offset, k > r + bound);
  // otherwise len_k - k0 (masked at k >= bound).
  auto load_queries = [&](int h, int q0, int buf) {
    const int4 bd = fresh(bounds);
    const longlong2 qd = fresh_pair(origin);
    const T* qbase = static_cast<const T*>(p.q) + qd.x + h * p.q_stride.head;
    const T* dobase = static_cast<const T*>(p.dout) + qd.y + h * p.do_stride.head;
    load_tile<kThreads, kRows, D>(sQ + buf * kRows * D, qbase, p.q_stride.row, q0, bd.x);
    load_tile<kThreads, kRows, D>(sdO + buf * kRows * D, dobase, p.do_stride.row, q0, bd.x);
    const int64_t r0 = stat_at(h) + q0;
    const int x = threadIdx.x;
    if (x < kRows / 4) fa::cp_async_16(fa::smem_addr(sL + buf * kRows + 4 * x), lse2 + r0 + 4 * x, true);
    else if (x < kRows / 2)
      fa::cp_async_16(fa::smem_addr(sDelta + buf * kRows + 4 * (x - kRows / 4)), delta + r0 + 4 * (x - kRows / 4), true);
    if (x == 0) {
      const bool masked = lesson11::needs_mask(q0, bd.w, kKeys, bd.y, bd.z, p.causal);
      tile_of[buf] = make_int4(h, q0, masked, p.causal ? q0 + bd.z - bd.w : bd.y - bd.w);
    }
  };
  {
    const int4 n = fresh(iters);
    if (n.x > 0) load_queries(n.w, n.z * kRows, 0);
  }
  fa::cp_async_commit();

  float dk[kKT][kDT][4] = {}, dv[kKT][kDT][4] = {};
  // kGate: the column sums of dS of the block's keys, for the current query head. Each key's sum
  // is kept by one lane (t == 0 of the quad holding the key's row of S^T), so no two threads ever
  // touch the same one; shared memory rather than registers, which dK and dV fill.
  __shared__ float colsum[kGate ? kKeys : 1];
  // kGate with atomic dQ: the row sums of dS of the current query tile over the block's keys, two
  // buffers (iteration it adds to buffer it % 2 while the previous one is flushed, with atomics,
  // to the row terms of dG: other key tiles add to the same rows). In the deterministic mode the
  // dQ pass sums the rows instead (it owns them).
  constexpr bool kRowSums = kGate && kAtomicDq;
  __shared__ float rowsum[2][kRowSums ? kRows : 1];
  if constexpr (kGate) {
    for (int k = threadIdx.x; k < kKeys; k += kThreads) colsum[k] = 0.f;  // before the loop's first barrier
  }
  if constexpr (kRowSums) {
    for (int r = threadIdx.x; r < 2 * kRows; r += kThreads) rowsum[r / kRows][r % kRows] = 0.f;
  }
  // Adds buffer `buf` (query head h's rows from q0) to the row terms of dG and clears it: after a
  // barrier.
  auto flush_rows = [&](int h, int q0, int len_q, int offset, int buf) {
    const int x = threadIdx.x;
    if (x < kRows) {
      const int row = q0 + x, pos = row + offset;
      if (row < len_q && pos >= 0) atomicAdd(dG_rows + gate_at(h) + pos, rowsum[buf][x]);
      rowsum[buf][x] = 0.f;
    }
  };
  const float sl2 = p.scale * fa::kLog2e;
  const uint32_t k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t a_off = 2 * tile_offset(16 * kKT * warp + lane % 16, 8 * (lane / 16), D);
  const uint32_t b_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t t_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);
  const lesson11::Offsets off{a_off, b_off, t_off};

  for (int it = 0;; ++it) {
    const int4 n = fresh(iters);
    if (it >= n.x) break;
    const int buf = it & 1;
    fa::cp_async_wait<0>();
    __syncthreads();
    float kg[kKT][2] = {};  // the gate: this thread's keys' differences from the query tile's anchor
    {  // The iteration's setup, while no fragment is live: its query tile and the bounds in registers.
      const int4 bd = fresh(bounds);
      const int2 tile = head_row(buf);
      const int len_q = bd.x, len_k = bd.y, offset = bd.z, k0 = bd.w, h = tile.x, q0 = tile.y;
      if (it + 1 < n.x) {
        // The next iteration's: the head's next query tile, or the first of the next head.
        const bool next_head = q0 + kRows >= len_q;
        load_queries(next_head ? h + 1 : h, next_head ? n.z * kRows : q0 + kRows, buf ^ 1);
      }
      fa::cp_async_commit();
      if constexpr (kRowSums) {
        // The previous iteration's tile (its slot was just rewritten): query tile first + (it - 1)
        // % per_head of head hk * group + (it - 1) / per_head.
        if (it > 0) flush_rows(n.w + (it - 1) / n.y, (n.z + (it - 1) % n.y) * kRows, len_q, offset, buf ^ 1);
      }
      if constexpr (kGate) {
        const double* gh = G + gate_at(h);
        // TODO(18): kg[kt][hh] = gate_diff of key k0 + 16 (kKT warp + kt) + g + 8 hh (if below
        //   len_k) from the anchor of the query tile at q0 (lesson12::gate_anchor).
      }
    }
    const uint32_t q_addr = fa::smem_addr(sQ + buf * kRows * D), do_addr = fa::smem_addr(sdO + buf * kRows * D);
    const float* lse_s = sL + buf * kRows;
    const float* delta_s = sDelta + buf * kRows;

#pragma unroll 1
    for (int sub = 0; sub < kRows / kSub; ++sub) {
    const int r0 = sub * kSub;
    float sacc[kKT][kNT][4] = {}, dp[kKT][kNT][4] = {};
    lesson11::transposed_scores<T, D, kKT, kSub>(sacc, dp, k_addr, v_addr, q_addr, do_addr, off, r0);

    // P^T and dS^T in place (lesson 11), the key's gate difference beside the row's LSE2. The mask
    // (tile_of), keys counted from the warp's first and rows from the step's first: causal,
    // key > row + lim; otherwise key >= lim. Causal, keys past len_k are past row + offset for every
    // row of the sequence, and rows past len_q have P = 0 anyway (LSE2 = +inf): no test of their own.
    const int4 tile = fresh(tile_of[buf]);
    const bool masked = tile.z;
    const int lim = tile.w - 16 * kKT * warp + (p.causal ? r0 : 0);
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse_s + r0 + nt * 8 + 2 * t);
      const float2 dd = *reinterpret_cast<const float2*>(delta_s + r0 + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float lg = e % 2 ? l2.y : l2.x;
        if constexpr (kGate) lg += kg[kt][e / 2];
        float pv = fa::ex2(fmaf(sacc[kt][nt][e], sl2, -lg));
        if (masked) {
          const lesson11::KeyRow at = lesson11::st_element(lane, nt, e);
          const int key = 16 * kt + at.key;
          if (p.causal ? key > at.row + lim : key >= lim) pv = 0.f;
        }
        sacc[kt][nt][e] = pv;
        dp[kt][nt][e] = pv * (dp[kt][nt][e] - (e % 2 ? dd.y : dd.x));
      }
    }
    if constexpr (kGate) {
      // TODO(19): add this step's dS to the column sums: each thread's values of keys g and g + 8
      //   (for each kt), summed over its columns, then over the quad (fa::group_sum<4>); lane
      //   t == 0 adds them to colsum[16 (kKT warp + kt) + g (+ 8)].
    }
    if constexpr (kRowSums) {
      // TODO(20): the row sums: each thread's values of one column (query row r0 + nt 8 + 2 t +
      //   e % 2) summed over its keys, then over the 8 lanes sharing the column (xor 4, 8, 16);
      //   lanes 0-3 add them to rowsum[buf][column] (atomicAdd: every warp holds the same rows).
    }

    // dV += P^T dO and dK += dS^T Q, and with kAtomicDq dS^T to sdS (lesson 11's dkdv.cuh).
    lesson11::accumulate_dkdv<T, D, kKT, kSub, kRows, kAtomicDq>(sacc, dp, dk, dv, sdS, q_addr, do_addr, off, r0, warp,
                                                                  lane);
    }  // sub

    // The iteration's query head and first row again, where S^T's fragments are dead.
    const int2 tile = head_row(buf);
    const int h = tile.x, q0 = tile.y;
    if constexpr (kGate) {
      const int4 bd = fresh(bounds);
      const int len_q = bd.x, len_k = bd.y, k0 = bd.w;
      // TODO(21): after the last query tile of head h, the same lanes store dG = -colsum for their
      //   keys below len_k and set colsum back to 0 for the next head.
    }

    // The fp32 sums of dQ: (heads_q, total_q, D) varlen, (batch, heads_q, seqlen_q, D) dense.
    if constexpr (kAtomicDq)
      lesson11::atomic_dq<T, D, kKeys, kRows, kWarps>(sdS, k_addr, off, q0, warp, lane, dq_accum, [&] { return accum_at(h); },
                                                       [&] { return fresh(bounds.x); });
  }
  if constexpr (kRowSums) {
    const int n_iter = fresh(iters.x), last = (n_iter - 1) & 1;
    if (n_iter > 0) {
      __syncthreads();
      const int4 bd = fresh(bounds);
      const int2 tile = head_row(last);
      flush_rows(tile.x, tile.y, bd.x, bd.z, last);
    }
  }
  fa::cp_async_wait<0>();

  const int4 bd = fresh(bounds);
  const int hk = fresh(kb.hk);
  T* dkb = static_cast<T*>(p.dk) + k_offset(p.dk_stride, s, hk);
  T* dvb = static_cast<T*>(p.dv) + k_offset(p.dv_stride, s, hk);
  lesson11::store_dkdv<T>(dk, dv, dkb, dvb, p.dk_stride.row, p.dv_stride.row, bd.w, bd.y, p.scale, warp, lane);
}

// The query tiles of lesson 11's preprocess and deterministic dQ pass (dkdv.cuh's preprocess_kernel
// and dq_kernel): one block per (map entry, query head), kStatRows rows. The statistics' rows are
// padded per sequence to whole tiles (lesson12::stat_row). With the gate, the preprocess folds the
// row's anchored G difference into its LSE2 (row_term), so the inner loops only add the key's
// (keys), and the dQ pass stores the row terms of dG (row_terms).
template <bool kGateOn>
struct PackedRows {
  static constexpr bool kGate = kGateOn;
  struct Args {
    float *lse2, *delta;  // the statistics: the preprocess writes them, the dQ pass reads them
    const int2* qmap;
    const int *qcount, *qtile_start;
    int64_t stat_stride;
    const double* G;
    float* dG_rows;
  };
  struct Gate {
    int64_t at;      // gate_index of (sequence, head h)
    double anchor;   // G at the tile's anchor
    int offset;      // len_k - len_q
  };
  // The key terms of a key tile: G and the anchor read once (after S, where fragments are dead).
  struct Keys {
    const double* gh;
    double anchor;
    __device__ void terms(int c, int len_k, float (&kg)[2]) const {
      if (c < len_k) kg[0] = gate_diff(gh, c, anchor);
      if (c + 1 < len_k) kg[1] = gate_diff(gh, c + 1, anchor);
    }
  };
  __device__ static Keys keys(const Args& a, const Gate& gate) {
    if constexpr (kGate) return {a.G + fresh(gate.at), fresh(gate.anchor)};
    return {nullptr, 0.0};
  }
  __device__ static void begin(const fa::AttnParams& p, const Args& a, int rows, int keys, lesson11::QueryTile& t, Gate& gate) {
    const int h = head(p.heads_q);
    const Block k = block_of(p, a.qmap, a.qcount, entry(p.heads_q), rows, keys);
    t.tile = k.tile;
    if (k.tile < 0) return;
    const Seq& s = k.s;
    const int hk = h / (p.heads_q / p.heads_kv);
    t.k = k_offset(p.k_stride, s, hk);
    t.v = k_offset(p.v_stride, s, hk);
    t.q = q_offset(p.q_stride, s, h);
    t.dout = q_offset(p.do_stride, s, h);
    t.dq = q_offset(p.dq_stride, s, h);
    t.o = q_offset(p.o_stride, s, h);
    t.lse = lse_index(p, s, h);
    t.stats = lesson12::stat_row(s.varlen, s.b, h, 0, p.heads_q, a.stat_stride, s.varlen ? a.qtile_start[s.b] : 0);
    t.loop = make_int4(k.n_tiles, k.n_full, s.len_k, k.tile * rows + k.offset);
    t.len_q = s.len_q;
    gate.at = gate_index(p, s, h);
    gate.offset = k.offset;
    if (kGate) gate.anchor = s.len_k > 0 ? a.G[gate.at + lesson12::gate_anchor(k.tile * rows, s.len_q, s.len_k)] : 0.0;
  }
  // The row's gate term, subtracted from its LSE2 by the preprocess: row i of the tile's sequence.
  __device__ static float row_term(const Args& a, const lesson11::QueryTile& t, const Gate& gate, int i) {
    float term = 0.f;
    // TODO(17): the row's gate_diff (at position i + offset, from the tile's anchor, as in the
    //   forward) for rows i < len_q with a key position i + offset >= 0; 0 for the others.
    return term;
  }
  // The row terms of dG: this block owns its rows, so a plain store (no atomics, the same bits
  // every run). row0: the thread's first row (g of its warp's 16), the second 8 further.
  __device__ static void row_terms(const Args& a, const lesson11::QueryTile& t, const Gate& gate, const float (&rows)[2],
                                   int row0, int lane) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(rows[hh]);
      const int row = row0 + 8 * hh, pos = row + fresh(gate.offset);
      if (lane % 4 == 0 && row < t.len_q && pos >= 0) a.dG_rows[fresh(gate.at) + pos] = sum;
    }
  }
};

}  // namespace
