// Lesson 12's backward: lesson 11's kernels (dkdv.cuh) over the tile maps, with GQA, packed
// sequences and the gate: the key tiles of the dK/dV kernel (PackedKeys, with the gate's hooks)
// and the query tiles of the preprocess and the dQ pass (PackedRows). Part of kernel.cu.
#pragma once

#include "sequences.cuh"  // and with it lesson 11's kernels (dkdv.cuh) and plan.hpp

namespace {

const fa::TodoList kBackwardTodosLeft = {  // delete an entry when its code is written (sequences.cuh)
    // @todos-left
};

// The key tiles of lesson 11's dK/dV kernel (dkdv.cuh says what it asks of them): one block per
// (map entry, kv head), its KeyTile from its sequence; it visits the query tiles of every head of
// its group. With kGate the logits get the keys' anchored G differences (the rows' are in LSE2),
// and each key's column sum of dS (per query head) is stored, negated, as dG (the hooks below).
template <int kKeysT, int kRowsT, bool kGateOn>
struct PackedKeys {
  static constexpr int kKeys = kKeysT, kRows = kRowsT;
  static constexpr bool kGate = kGateOn;
  static_assert(kRows == lesson12::kStatRows, "the statistics and the gate's anchors are per tile of kStatRows rows");
  struct Args : lesson11::KeyArgs {
    const int2* kmap;
    const int *kcount, *qtile_start;
    const double* G;
    float *dG, *dG_rows;  // the gate's column terms of dG (dkdv), and its row terms (atomic dQ)
  };
  struct Block : lesson11::KeyTile {
    int64_t gate;  // query head 0's first position in G and dG
  };
  __device__ static bool begin(const fa::AttnParams& p, const Args& a, Block& blk) {
    int b = 0, ktile = -1;
    if (!work_item(a.kmap, a.kcount, entry(p.heads_kv), b, ktile)) return false;
    const Seq sq = sequence(p, b);
    const int k0 = ktile * kKeys, offset = sq.len_k - sq.len_q, hk = head(p.heads_kv), group = p.heads_q / p.heads_kv;
    const int first = lesson11::first_query_tile(k0, offset, kRows, p.causal);
    const int per_head = max(0, fa::ceil_div(sq.len_q, kRows) - first);
    blk.iters = make_int4(per_head * group, per_head, first, hk * group);
    blk.bounds = make_int4(sq.len_q, sq.len_k, offset, k0);
    blk.origin[0] = q_offset(p.q_stride, sq, 0);
    blk.origin[1] = q_offset(p.do_stride, sq, 0);
    blk.origin[2] = lesson12::stat_row(sq.varlen, b, 0, 0, p.heads_q, a.stat_stride, sq.varlen ? a.qtile_start[b] : 0);
    blk.origin[3] = lse_index(p, sq, 0);
    blk.kv[0] = k_offset(p.k_stride, sq, hk);
    blk.kv[1] = k_offset(p.v_stride, sq, hk);
    blk.grads[0] = k_offset(p.dk_stride, sq, hk);
    blk.grads[1] = k_offset(p.dv_stride, sq, hk);
    blk.gate = gate_index(p, sq, 0);
    return true;
  }
  __device__ static int64_t gate_at(const fa::AttnParams& p, const Block& blk, int h) {  // head h's: + h heads
    return fresh(blk.gate) + h * int64_t(is_varlen(p) ? p.total_k : p.seqlen_k);
  }

  // ---- The gate's hooks (kGate) ----
  // The column sums of dS of the block's keys for the current query head, one lane each (t == 0
  // of the quad holding the key's row of S^T), in shared memory (dK and dV fill the registers).
  // With atomic dQ also the row sums of the query tile, two buffers: iteration it adds to buffer
  // it % 2 while the other is flushed with atomics (other key tiles add to the same rows); else
  // the dQ pass sums the rows (it owns them).
  struct Sums {
    float colsum[kGate ? kKeys : 1];
    float rowsum[2][kGate ? kRows : 1];
  };
  template <int kThreads>
  __device__ static void clear(Sums& x) {
    for (int i = threadIdx.x; i < kKeys; i += kThreads) x.colsum[i] = 0.f;
    for (int r = threadIdx.x; r < 2 * kRows; r += kThreads) x.rowsum[r / kRows][r % kRows] = 0.f;
  }
  // Adds iteration j's row sums (buffer j % 2) to dG's row terms and clears them, after a barrier.
  __device__ static void flush_rows(const fa::AttnParams& p, const Args& a, const Block& blk, Sums& x, int j) {
    const int4 n = fresh(blk.iters), bd = fresh(blk.bounds);
    const int i = threadIdx.x, row = (n.z + j % n.y) * kRows + i, pos = row + bd.z;  // from iters: tile_of holds the next load's
    if (i >= kRows) return;
    if (row < bd.x && pos >= 0) atomicAdd(a.dG_rows + gate_at(p, blk, n.w + j / n.y) + pos, x.rowsum[j & 1][i]);
    x.rowsum[j & 1][i] = 0.f;
  }
  // At iteration it's start (after its barrier, no fragment live): the previous iteration's row
  // sums flushed, and this thread's keys' terms kg of the logits for the query tile in buffer buf.
  template <bool kAtomicDq, int kKT>
  __device__ static void start_tile(const fa::AttnParams& p, const Args& a, const Block& blk, Sums& x, int it, int buf,
                                    int warp, int lane, float (&kg)[kKT][2]) {
    if (kAtomicDq && it > 0) flush_rows(p, a, blk, x, it - 1);
    const int4 bd = fresh(blk.bounds);
    const int2 tile = blk.head_row(buf);
    const int len_q = bd.x, len_k = bd.y, k0 = bd.w, h = tile.x, q0 = tile.y, g = lane / 4;
    const double* gh = a.G + gate_at(p, blk, h);
    // TODO(18): kg[kt][hh] = gate_diff of key k0 + 16 (kKT warp + kt) + g + 8 hh (if below
    //   len_k) from the anchor of the query tile at q0 (lesson12::gate_anchor).
    // BEGIN SOLUTION
    const double anchor = gh[lesson12::gate_anchor(q0, len_q, len_k)];
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int key = k0 + 16 * (kKT * warp + kt) + g + 8 * hh;
        if (key < len_k) kg[kt][hh] = gate_diff(gh, key, anchor);
      }
    // END SOLUTION
  }
  // After a step's dS^T (in dp: the warp's keys, the step's rows from r0): the sums.
  template <bool kAtomicDq, int kKT, int kNT>
  __device__ static void add_sums(Sums& x, const float (&dp)[kKT][kNT][4], int r0, int buf, int warp, int lane) {
    const int g = lane / 4, t = lane % 4;
    // TODO(19): add this step's dS to the column sums: each thread's values of keys g and g + 8
    //   (for each kt), summed over its columns, then over the quad (fa::group_sum<4>); lane
    //   t == 0 adds them to x.colsum[16 (kKT warp + kt) + g (+ 8)].
    // BEGIN SOLUTION
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) sum += dp[kt][nt][2 * hh] + dp[kt][nt][2 * hh + 1];
        sum = fa::group_sum<4>(sum);
        if (t == 0) x.colsum[16 * (kKT * warp + kt) + g + 8 * hh] += sum;
      }
    // END SOLUTION
    if constexpr (kAtomicDq) {
      // TODO(20): the row sums: each thread's values of one column (query row r0 + nt 8 + 2 t +
      //   e % 2) summed over its keys, then over the 8 lanes sharing the column (xor 4, 8, 16);
      //   lanes 0-3 add them to x.rowsum[buf][column] (atomicAdd: every warp holds the same rows).
      // BEGIN SOLUTION
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float sum = 0.f;
#pragma unroll
          for (int kt = 0; kt < kKT; ++kt) sum += dp[kt][nt][c] + dp[kt][nt][2 + c];
          sum += __shfl_xor_sync(0xffffffffu, sum, 4);
          sum += __shfl_xor_sync(0xffffffffu, sum, 8);
          sum += __shfl_xor_sync(0xffffffffu, sum, 16);
          if (g == 0) atomicAdd(&x.rowsum[buf][r0 + nt * 8 + 2 * t + c], sum);
        }
      // END SOLUTION
    }
  }
  // After the query tile (h, q0) = tile, where S^T's fragments are dead.
  template <int kKT>
  __device__ static void end_tile(const fa::AttnParams& p, const Args& a, const Block& blk, Sums& x, int2 tile, int warp,
                                  int lane) {
    const int4 bd = fresh(blk.bounds);
    const int len_q = bd.x, len_k = bd.y, k0 = bd.w, h = tile.x, q0 = tile.y, g = lane / 4, t = lane % 4;
    // TODO(21): after the last query tile of head h, the same lanes store dG = -colsum for their
    //   keys below len_k and set colsum back to 0 for the next head.
    // BEGIN SOLUTION
    if (q0 + kRows >= len_q && t == 0) {  // the head's last tile
      float* dgh = a.dG + gate_at(p, blk, h);
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int k = 16 * (kKT * warp + kt) + g + 8 * hh;
          if (k0 + k < len_k) dgh[k0 + k] = -x.colsum[k];
          x.colsum[k] = 0.f;
        }
    }
    // END SOLUTION
  }
  // After the loop: the last iteration's row sums.
  template <bool kAtomicDq>
  __device__ static void finish(const fa::AttnParams& p, const Args& a, const Block& blk, Sums& x) {
    const int n_iter = kAtomicDq ? fresh(blk.iters.x) : 0;  // no row sums here in the deterministic mode
    if (n_iter == 0) return;
    __syncthreads();
    flush_rows(p, a, blk, x, n_iter - 1);
  }
};

// The query tiles of lesson 11's preprocess and dQ pass: one block per (map entry, query head),
// kStatRows rows. With the gate the preprocess folds the row's anchored G difference into its
// LSE2 (row_term), so the loops add only the key's (keys), and the dQ pass stores dG's row terms.
template <bool kGateOn>
struct PackedRows {
  static constexpr bool kGate = kGateOn;
  struct Args : lesson11::RowArgs {
    const int2* qmap;
    const int *qcount, *qtile_start;
    const double* G;
    float* dG_rows;
  };
  struct Gate {
    int64_t at;      // gate_index of (sequence, head h)
    double anchor;   // G at the tile's anchor
    int offset;      // len_k - len_q
  };
  // A key tile's terms: G and the anchor read once (after S, where fragments are dead).
  struct Keys {
    const double* gh;
    double anchor;
    __device__ void terms(int c, int len_k, float (&kg)[2]) const {
      if (c < len_k) kg[0] = gate_diff(gh, c, anchor);
      if (c + 1 < len_k) kg[1] = gate_diff(gh, c + 1, anchor);
    }
  };
  __device__ static Keys keys(const Args& a, const Gate& g) { return kGate ? Keys{a.G + fresh(g.at), fresh(g.anchor)} : Keys{}; }
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
    // BEGIN SOLUTION
    const int pos = i + gate.offset;
    if (i < t.len_q && pos >= 0) term = gate_diff(a.G + gate.at, pos, gate.anchor);
    // END SOLUTION
    return term;
  }
  // dG's row terms: this block owns its rows, so a plain store (the same bits every run). row0:
  // the thread's first row, the second 8 further.
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
