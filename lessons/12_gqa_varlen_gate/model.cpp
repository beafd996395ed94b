// Your copy of this lesson, generated from solutions/12_gqa_varlen_gate/model.cpp by fa-skeleton.
// Lesson 12, part 1: grouped-query heads, packed variable-length batches and the log-decay gate,
// as a CPU model of the GPU algorithm (forward and backward), in fp32 like the kernels.
//
// Three things are new since lessons 08 (forward) and 11 (backward):
//   1. Varlen. Sequences of different lengths are packed back to back, (total_tokens, heads,
//      head_dim), with prefix sums cu_seqlens_q/k: sequence b owns tokens cu[b] .. cu[b+1] - 1.
//      Padding every sequence to the longest would spend the GPU's time on padding instead. Work is
//      cut into tiles of 64 query rows that never cross a sequence boundary, and a tile map lists
//      every (sequence, tile) pair, heaviest first: under the causal mask a tile's cost is the
//      number of key tiles it visits, and starting the long tiles first leaves the short ones to
//      fill the GPU at the end. On the GPU one thread block runs one (map entry, head).
//   2. GQA. Query head h reads kv head h / (heads_q / heads_kv); the dK/dV pass sums the group.
//   3. The log-decay gate of the FLA kernel: s_ij += G_i - G_j, G the inclusive cumsum of g within
//      the sequence, query i's G taken at its key position i + len_k - len_q (the causal mask's
//      alignment). G is computed once per (sequence, head) in fp64 ("the cumsum kernel"). Inside a
//      tile only differences from an anchor A near the tile are used, qg_i = G_i - A and
//      kg_j = G_j - A, each rounded once to fp32: |G| reaches ~1e4 at 16k tokens, where fp32 keeps
//      only ~1e-3 absolute, while the differences that matter (nearby keys, where P is not
//      negligible) are small and keep fp32's relative precision.
// The backward adds dg. A logit depends on G through G_i - G_j, so dG_t = (the row sum of dS of the
// query at t) - (the column sum of dS of key t): the column sums come from the dK/dV pass, the row
// sums from the dQ pass (each block has its dS already), and dg_t = sum_{t' >= t} dG_t' because
// G = cumsum(g). The row sums vanish in exact arithmetic, yet they are kept: TODO 8 says why.
// Write and test this model first (it runs without a GPU):
//   ctest --preset student -R lesson12/model
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "fa/host_tensor.hpp"
#include "fa/params.hpp"
#include "plan.hpp"

namespace {

using lesson12::tiles_of;

constexpr int kBr = 64;  // query rows per tile: one entry of the tile map (one thread block on the GPU)
constexpr int kBc = 64;  // keys per K/V tile
constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x log2(e)): lesson 05's folding
constexpr float kLn2 = 0.6931471805599453f;    // and back: log(x) = log2(x) ln(2)
constexpr float kInf = std::numeric_limits<float>::infinity();

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 12 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(4) in model.cpp: sequence b of a packed batch: its lengths and first tokens, from the prefix sums.",
    "TODO(5) in model.cpp: the tile map: one entry per query tile of every sequence, heaviest first.",
    "TODO(6) in model.cpp: the inclusive cumsum of the gate within the sequence, accumulated in fp64.",
    "TODO(7) in model.cpp: the tile's anchor and its gate terms relative to it.",
    "TODO(8) in model.cpp: the gate's gradient, key side: add dS_ij to key j's column sum, colsum[c].",
    "TODO(9) in model.cpp: the gate's gradient, query side: add dS_ij to row r's sum, rowsum[r].",
    "TODO(10) in model.cpp: dg_t = dG_t + dG_{t+1} + ... + dG_{lk-1}, from the last key back to the first.",
};

// The causal mask within a sequence, bottom-right aligned (docs/conventions.md): key j is
// visible to query i iff j <= i + (len_k - len_q).
bool visible(int i, int j, int lq, int lk) { return j <= i + (lk - lq); }

float dot(const float* a, const float* b, int d) {
  float acc = 0.f;
  for (int x = 0; x < d; ++x) acc += a[x] * b[x];
  return acc;
}
const float* row(const std::vector<float>& x, int i, int d) { return x.data() + static_cast<size_t>(i) * d; }
float* row(std::vector<float>& x, int i, int d) { return x.data() + static_cast<size_t>(i) * d; }

// ---- Varlen: where a sequence lives ---------------------------------------------------------
// A dense batch is the special case of equal lengths, each sequence in its own batch slice.
struct Sequence {
  int lq = 0, lk = 0;            // its lengths (0: an empty sequence)
  int q_start = 0, k_start = 0;  // its first query and key token in the packed tensors (0 dense)
  int slice = 0;                 // its batch index: b dense, 0 varlen (packed tensors have no batch stride)

  // Head h's rows of this sequence in a q-side (q, o, dO, dQ) or k-side (k, v, dK, dV) tensor.
  std::vector<float> read(const void* base, const fa::Strides& st, fa::DType t, int h, bool q_side, int d) const {
    const auto* first = static_cast<const uint16_t*>(base) + int64_t(q_side ? q_start : k_start) * st.row;
    return fa::read_head(first, st, t, slice, h, q_side ? lq : lk, d);
  }
  void write(const std::vector<float>& x, void* base, const fa::Strides& st, fa::DType t, int h, bool q_side, int d) const {
    auto* first = static_cast<uint16_t*>(base) + int64_t(q_side ? q_start : k_start) * st.row;
    fa::write_head(x, first, st, t, slice, h, q_side ? lq : lk, d);
  }
  // Entry (h, row) of the LSE (q side) or of g and dg (k side): (batch, heads_q, seqlen) dense,
  // (heads_q, total) varlen. One formula: a varlen head's rows are `total` long, its slice is 0.
  size_t lse_index(const fa::AttnParams& p, int h, int i) const {
    return (size_t(slice) * p.heads_q + h) * (p.is_varlen() ? p.total_q : p.seqlen_q) + q_start + i;
  }
  size_t gate_index(const fa::AttnParams& p, int h, int j) const {
    return (size_t(slice) * p.heads_q + h) * (p.is_varlen() ? p.total_k : p.seqlen_k) + k_start + j;
  }
};

Sequence sequence(const fa::AttnParams& p, int b) {
  if (!p.is_varlen()) return {p.seqlen_q, p.seqlen_k, 0, 0, b};
  // TODO(4): sequence b of a packed batch: its lengths and first tokens, from the prefix sums.
  //   cu_seqlens_q and cu_seqlens_k hold batch + 1 entries: sequence b is query tokens
  //   cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (keys alike). lq and lk are the differences,
  //   q_start and k_start the first tokens, and slice is 0 (one packed batch).
  return {0, 0, 0, 0, 0};
}

std::vector<Sequence> sequences(const fa::AttnParams& p) {
  std::vector<Sequence> all;
  for (int b = 0; b < p.batch; ++b) all.push_back(sequence(p, b));
  return all;
}

// ---- The tile map ---------------------------------------------------------------------------
// How many key tiles query tile `tile` of a sequence visits: all, or up to the causal diagonal
// (plan.hpp, the function the kernels use).
int key_tiles(const Sequence& s, int tile, bool causal) {
  return lesson12::key_tiles_visited(tile, kBr, kBc, s.lq, s.lk, causal);
}

struct TileJob {
  int seq, tile;  // query rows tile * kBr .. of sequence seq
};

// Every (sequence, query tile) of the batch, heaviest first.
std::vector<TileJob> tile_map(const std::vector<Sequence>& seqs, bool causal) {
  std::vector<TileJob> map;
  // TODO(5): the tile map: one entry per query tile of every sequence, heaviest first.
  //   Sequence b has tiles_of(lq, kBr) tiles (none when it is empty); a tile never crosses into
  //   the next sequence, so a sequence's last tile may be partial. Order the entries by the number
  //   of key tiles they visit (key_tiles), descending, ties by (sequence, tile) ascending.
  return map;
}

// ---- The gate -------------------------------------------------------------------------------
// The cumsum kernel: G_t = g_0 + ... + g_t over the keys of (sequence, query head h), in fp64.
// All zeros without a gate.
std::vector<double> gate_cumsum(const fa::AttnParams& p, const Sequence& s, int h) {
  std::vector<double> G(s.lk, 0.0);
  if (p.gate == nullptr) return G;
  // TODO(6): the inclusive cumsum of the gate within the sequence, accumulated in fp64.
  //   G[t] = g_0 + ... + g_t with g_t = p.gate[s.gate_index(p, h, t)].
  return G;
}

// The gate as one query tile sees it: G minus the tile's anchor A, each difference rounded once to
// fp32 (on the GPU: qg in registers with the tile's rows, kg loaded with each key tile).
struct TileGate {
  int q0 = 0;             // the tile's first row
  std::vector<float> qg;  // per row of the tile: G at its key position, minus A (0 for a row that sees no key)
  std::vector<float> kg;  // per key of the sequence: G_j - A
  // The logit bias G_i - G_j, in fp32 (the anchor cancels); 0 without a gate.
  float bias(int i, int j) const { return qg.empty() ? 0.f : qg[i - q0] - kg[j]; }
};

TileGate tile_gate(const std::vector<double>& G, const Sequence& s, int q0, bool gated) {
  TileGate t;
  t.q0 = q0;
  if (!gated || s.lk == 0) return t;  // no keys: no logits to bias
  const int shift = s.lk - s.lq, rows = std::min(kBr, s.lq - q0);  // query row i sits at key position i + shift
  t.qg.assign(rows, 0.f);
  t.kg.assign(s.lk, 0.f);
  // TODO(7): the tile's anchor and its gate terms relative to it.
  //   A = G at the key position of the tile's first row: G[lesson12::gate_anchor(q0, lq, lk)]
  //   (TODO 3). qg[r] = G[q0 + r + shift] - A for the rows with q0 + r + shift >= 0 (the others
  //   see no key: leave 0), kg[j] = G[j] - A. Subtract in fp64, then round once to float:
  //   rounding G first loses ~1e-3 at |G| ~ 1e4.
  return t;
}

// A pair's logit in base 2: log2(e) (scale q_i . k_j + G_i - G_j).
float logit2(const float* q, const float* k, int d, float scale_log2, float bias) {
  return dot(q, k, d) * scale_log2 + bias * kLog2e;
}

// ---- Forward --------------------------------------------------------------------------------
// One (sequence, query head): its inputs and outputs, row-major fp32.
struct ForwardHead {
  std::vector<float> q, k, v;  // q: lq x d; k, v: lk x d (of its kv head)
  std::vector<double> G;       // the gate's cumsum over its keys
  std::vector<float> o, lse;   // lq x d, lq
};

// One map entry for one head: lesson 08's online softmax in base 2 over the key tiles the query
// tile visits (the causal early stop per sequence), with the gate's bias in every logit.
void forward_tile(const fa::AttnParams& p, const Sequence& s, int tile, ForwardHead& h) {
  const int d = p.head_dim, q0 = tile * kBr, rows = std::min(kBr, s.lq - q0);
  const float scale_log2 = p.scale * kLog2e;
  const TileGate gate = tile_gate(h.G, s, q0, p.gate != nullptr);
  std::vector<float> m(rows, -kInf), l(rows, 0.f), acc(static_cast<size_t>(rows) * d, 0.f);  // "on chip"
  for (int kt = 0; kt < key_tiles(s, tile, p.causal); ++kt) {
    const int k0 = kt * kBc, cols = std::min(kBc, s.lk - k0);
    for (int r = 0; r < rows; ++r) {
      const int i = q0 + r;
      float s2[kBc], m_tile = -kInf;
      for (int c = 0; c < cols; ++c) {
        const int j = k0 + c;
        s2[c] = p.causal && !visible(i, j, s.lq, s.lk)
                    ? -kInf
                    : logit2(row(h.q, i, d), row(h.k, j, d), d, scale_log2, gate.bias(i, j));
        m_tile = std::max(m_tile, s2[c]);
      }
      const float m_new = std::max(m[r], m_tile);
      if (m_new == -kInf) continue;  // every key so far masked: nothing to add, and -inf - -inf is NaN
      const float alpha = std::exp2(m[r] - m_new);
      l[r] *= alpha;
      for (int x = 0; x < d; ++x) row(acc, r, d)[x] *= alpha;
      for (int c = 0; c < cols; ++c) {
        const float pr = std::exp2(s2[c] - m_new);
        l[r] += pr;
        for (int x = 0; x < d; ++x) row(acc, r, d)[x] += pr * row(h.v, k0 + c, d)[x];
      }
      m[r] = m_new;
    }
  }
  for (int r = 0; r < rows; ++r) {  // a row that saw no key keeps O = 0 and gets LSE = +inf
    if (l[r] == 0.f) continue;
    for (int x = 0; x < d; ++x) row(h.o, q0 + r, d)[x] = row(acc, r, d)[x] / l[r];
    h.lse[q0 + r] = (m[r] + std::log2(l[r])) * kLn2;
  }
}

void model_forward(const fa::AttnParams& p, cudaStream_t) {
  fa::throw_if_todos_left("12_gqa_varlen_gate", lesson12::kPlanTodosLeft);
  fa::throw_if_todos_left("12_gqa_varlen_gate", kTodosLeft);
  const int group = p.heads_q / p.heads_kv, d = p.head_dim;
  const std::vector<Sequence> seqs = sequences(p);
  const std::vector<TileJob> map = tile_map(seqs, p.causal);
  for (int h = 0; h < p.heads_q; ++h) {
    std::vector<ForwardHead> heads(seqs.size());
    for (size_t b = 0; b < seqs.size(); ++b) {
      const Sequence& s = seqs[b];
      ForwardHead& fh = heads[b];
      fh.q = s.read(p.q, p.q_stride, p.dtype, h, true, d);
      fh.k = s.read(p.k, p.k_stride, p.dtype, h / group, false, d);  // GQA: the group's kv head
      fh.v = s.read(p.v, p.v_stride, p.dtype, h / group, false, d);
      fh.G = gate_cumsum(p, s, h);
      fh.o.assign(static_cast<size_t>(s.lq) * d, 0.f);
      fh.lse.assign(s.lq, kInf);
    }
    for (const TileJob& job : map) forward_tile(p, seqs[job.seq], job.tile, heads[job.seq]);
    for (size_t b = 0; b < seqs.size(); ++b) {
      seqs[b].write(heads[b].o, p.o, p.o_stride, p.dtype, h, true, d);
      for (int i = 0; i < seqs[b].lq; ++i) p.lse[seqs[b].lse_index(p, h, i)] = heads[b].lse[i];
    }
  }
}

// ---- Backward -------------------------------------------------------------------------------
// One (sequence, query head) of the backward: its inputs (row-major fp32) and its dG.
struct QueryHead {
  std::vector<float> q, dout, lse, delta;  // q, dout: lq x d; lse, delta = dO_i . O_i: lq
  std::vector<double> G;                   // the gate's cumsum over its keys
  std::vector<float> dG;                   // dL/dG per key (lk): the dK/dV pass's -colsum, plus the dQ pass's row sums
};

// P_ij and dS_ij of one visible pair, recomputed from the saved LSE in base 2 (lesson 11):
// P = exp2(log2(e) (scale q.k + G_i - G_j - LSE_i)), 0 when LSE = +inf; dS = P (dO_i . v_j - D_i).
struct PairGrad {
  float p, ds;
};
PairGrad pair_grad(const QueryHead& h, int i, const float* k, const float* v, int d, float scale_log2, float bias) {
  const float pr = std::exp2(logit2(row(h.q, i, d), k, d, scale_log2, bias) - h.lse[i] * kLog2e);
  return {pr, pr * (dot(row(h.dout, i, d), v, d) - h.delta[i])};
}

// The dK/dV pass of one (sequence, kv head): one key tile at a time (one thread block), every
// query head of the group and every query tile that sees the tile streamed past; dK and dV
// written once per tile, no atomics. With the gate, each head's dG of the tile's keys too.
void dkdv_pass(const fa::AttnParams& p, const Sequence& s, const std::vector<float>& K, const std::vector<float>& V,
               std::vector<QueryHead>& heads, std::vector<float>& dK, std::vector<float>& dV) {
  const int d = p.head_dim;
  const float scale_log2 = p.scale * kLog2e;
  dK.assign(static_cast<size_t>(s.lk) * d, 0.f);
  dV.assign(static_cast<size_t>(s.lk) * d, 0.f);
  for (QueryHead& h : heads) h.dG.assign(s.lk, 0.f);
  for (int kt = 0; kt < tiles_of(s.lk, kBc); ++kt) {
    const int k0 = kt * kBc, cols = std::min(kBc, s.lk - k0);
    std::vector<float> dk(static_cast<size_t>(cols) * d, 0.f), dv(static_cast<size_t>(cols) * d, 0.f);  // "on chip"
    for (QueryHead& h : heads) {
      std::vector<float> colsum(cols, 0.f);  // sum_i dS_ij over this head's rows, per key of the tile
      // The causal early start: the first query tile that sees key k0 (plan.hpp).
      for (int qt = lesson11::first_query_tile(k0, s.lk - s.lq, kBr, p.causal); qt < tiles_of(s.lq, kBr); ++qt) {
        const int q0 = qt * kBr, rows = std::min(kBr, s.lq - q0);
        const TileGate gate = tile_gate(h.G, s, q0, p.gate != nullptr);
        for (int r = 0; r < rows; ++r) {
          const int i = q0 + r;
          for (int c = 0; c < cols; ++c) {
            const int j = k0 + c;
            if (p.causal && !visible(i, j, s.lq, s.lk)) continue;
            const PairGrad g = pair_grad(h, i, row(K, j, d), row(V, j, d), d, scale_log2, gate.bias(i, j));
            for (int x = 0; x < d; ++x) {
              row(dv, c, d)[x] += g.p * row(h.dout, i, d)[x];
              row(dk, c, d)[x] += g.ds * row(h.q, i, d)[x];
            }
            // TODO(8): the gate's gradient, key side: add dS_ij to key j's column sum, colsum[c].
            //   logit_ij = ... + G_i - G_j, so dL/dG_t = sum_j dS_tj (the row of the query at key
            //   position t; TODO 9) - sum_i dS_it (the column of key t: here, where the block that
            //   owns key tile t has every dS_it). In exact arithmetic the row sums vanish:
            //   sum_j dS_ij = sum_j P_ij dP_ij - D_i sum_j P_ij = D_i - D_i = 0, since sum_j P_ij = 1
            //   and D_i = dO_i . O_i = sum_j P_ij dO_i . v_j. Here they do not: D comes from the O
            //   the forward stored in 16 bits, so row i's sum is -(that rounding's error in D_i).
            //   The column sums carry the same errors, and dg's reverse cumsum adds them up along
            //   the sequence; with the row sums they cancel. Without them the backward suite's
            //   bf16 gate case fails (README, "Why the kernels keep the row sum anyway").
          }
        }
      }
      for (int c = 0; c < cols; ++c) h.dG[k0 + c] = -colsum[c];
    }
    // The tile is done: leave the chip once, dK with its scale (applied once, not per pair).
    for (int c = 0; c < cols; ++c)
      for (int x = 0; x < d; ++x) {
        row(dK, k0 + c, d)[x] = p.scale * row(dk, c, d)[x];
        row(dV, k0 + c, d)[x] = row(dv, c, d)[x];
      }
  }
}

// The dQ pass of one map entry for one query head: every key tile it sees, dQ = scale dS K, and
// with the gate the row sums of dS added to dG.
void dq_tile(const fa::AttnParams& p, const Sequence& s, int tile, const std::vector<float>& K, const std::vector<float>& V,
             QueryHead& h, std::vector<float>& dQ) {
  const int d = p.head_dim, q0 = tile * kBr, rows = std::min(kBr, s.lq - q0);
  const float scale_log2 = p.scale * kLog2e;
  const TileGate gate = tile_gate(h.G, s, q0, p.gate != nullptr);
  std::vector<float> dq(static_cast<size_t>(rows) * d, 0.f);  // "on chip"
  std::vector<float> rowsum(rows, 0.f);                        // sum_j dS_ij per row, for dG
  for (int kt = 0; kt < key_tiles(s, tile, p.causal); ++kt) {
    const int k0 = kt * kBc, cols = std::min(kBc, s.lk - k0);
    for (int r = 0; r < rows; ++r) {
      const int i = q0 + r;
      for (int c = 0; c < cols; ++c) {
        const int j = k0 + c;
        if (p.causal && !visible(i, j, s.lq, s.lk)) continue;
        const PairGrad g = pair_grad(h, i, row(K, j, d), row(V, j, d), d, scale_log2, gate.bias(i, j));
        for (int x = 0; x < d; ++x) row(dq, r, d)[x] += g.ds * row(K, j, d)[x];
        // TODO(9): the gate's gradient, query side: add dS_ij to row r's sum, rowsum[r].
        //   TODO 8 says why it is kept although it is 0 in exact arithmetic.
      }
    }
  }
  // Row i sits at key position i + (lk - lq); a row before the first key saw nothing (its sum is 0).
  if (p.gate != nullptr)
    for (int r = 0; r < rows; ++r)
      if (q0 + r + s.lk - s.lq >= 0) h.dG[q0 + r + s.lk - s.lq] += rowsum[r];
  for (int r = 0; r < rows; ++r)
    for (int x = 0; x < d; ++x) row(dQ, q0 + r, d)[x] = p.scale * row(dq, r, d)[x];
}

// The reverse cumsum kernel: G = cumsum(g), so dL/dg_t = sum_{t' >= t} dL/dG_t', accumulated in
// fp64 (a 16k-long sum), stored in fp32 like g.
void write_dgate(const fa::AttnParams& p, const Sequence& s, int h, const std::vector<float>& dG) {
  // TODO(10): dg_t = dG_t + dG_{t+1} + ... + dG_{lk-1}, from the last key back to the first.
  //   Accumulate in a double, store each partial sum as float at p.dgate[s.gate_index(p, h, t)].
  for (int t = 0; t < s.lk; ++t) p.dgate[s.gate_index(p, h, t)] = 0.f;
}

void model_backward(const fa::AttnParams& p, cudaStream_t) {
  fa::throw_if_todos_left("12_gqa_varlen_gate", lesson12::kPlanTodosLeft);
  fa::throw_if_todos_left("12_gqa_varlen_gate", kTodosLeft);
  // p.deterministic needs nothing: every output element has one writer, so every run is the same.
  const int group = p.heads_q / p.heads_kv, d = p.head_dim;
  const std::vector<Sequence> seqs = sequences(p);
  const std::vector<TileJob> map = tile_map(seqs, p.causal);
  for (int hk = 0; hk < p.heads_kv; ++hk) {
    std::vector<std::vector<float>> K(seqs.size()), V(seqs.size());
    std::vector<std::vector<QueryHead>> heads(seqs.size(), std::vector<QueryHead>(group));  // [sequence][head of the group]
    for (size_t b = 0; b < seqs.size(); ++b) {
      const Sequence& s = seqs[b];
      K[b] = s.read(p.k, p.k_stride, p.dtype, hk, false, d);
      V[b] = s.read(p.v, p.v_stride, p.dtype, hk, false, d);
      for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        QueryHead& qh = heads[b][g];
        qh.q = s.read(p.q, p.q_stride, p.dtype, h, true, d);
        qh.dout = s.read(p.dout, p.do_stride, p.dtype, h, true, d);
        const std::vector<float> o = s.read(p.o, p.o_stride, p.dtype, h, true, d);
        qh.delta.resize(s.lq);
        qh.lse.resize(s.lq);
        for (int i = 0; i < s.lq; ++i) {  // the preprocess: D_i = dO_i . O_i
          qh.delta[i] = dot(row(qh.dout, i, d), row(o, i, d), d);
          qh.lse[i] = p.lse[s.lse_index(p, h, i)];
        }
        qh.G = gate_cumsum(p, s, h);
      }
      std::vector<float> dK, dV;
      dkdv_pass(p, s, K[b], V[b], heads[b], dK, dV);
      s.write(dK, p.dk, p.dk_stride, p.dtype, hk, false, d);  // rounded to 16 bits once, here
      s.write(dV, p.dv, p.dv_stride, p.dtype, hk, false, d);
    }
    std::vector<std::vector<std::vector<float>>> dQ(seqs.size());  // [sequence][head of the group]
    for (size_t b = 0; b < seqs.size(); ++b)
      dQ[b].assign(group, std::vector<float>(static_cast<size_t>(seqs[b].lq) * d, 0.f));
    for (const TileJob& job : map)
      for (int g = 0; g < group; ++g)
        dq_tile(p, seqs[job.seq], job.tile, K[job.seq], V[job.seq], heads[job.seq][g], dQ[job.seq][g]);
    for (size_t b = 0; b < seqs.size(); ++b)
      for (int g = 0; g < group; ++g) {
        seqs[b].write(dQ[b][g], p.dq, p.dq_stride, p.dtype, hk * group + g, true, d);
        if (p.gate != nullptr) write_dgate(p, seqs[b], hk * group + g, heads[b][g].dG);  // dG is complete now
      }
  }
}

}  // namespace

const fa::LessonInfo& fa_lesson_12_model() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa::cpu_model("12_gqa_varlen_gate", "GQA, varlen and the decay gate, CPU model", &model_forward);
    l.features.varlen = l.features.gate = true;
    l.backward = &model_backward;
    return l;
  }();
  return info;
}
