// Lesson 10, part 1: the backward pass as a CPU model, in fp32 like the kernels.
//
// The forward kept S and P on chip and stored only O and the LSE. The backward needs P again, so
// it recomputes it tile by tile, P_ij = exp(scale q_i . k_j - LSE_i), and runs the five products
//   dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dK = scale dS^T Q,   dQ = scale dS K
// in three steps, the three kernels of kernel.cu:
//   1. preprocess: D_i = dO_i . O_i, one number per query row (fp32);
//   2. the dK/dV pass: one key tile at a time (on the GPU: one thread block), its dK and dV
//      accumulators kept "on chip" (here: local vectors) while every query tile that can see it
//      streams past; dK is scaled once, at the end;
//   3. the dQ pass: one query tile at a time, every key tile it sees streamed past, dQ = scale dS K.
// Every output element is written by exactly one "block", so there are no atomics and the result
// is the same bits every run. Write and test this model first (it runs without a GPU):
//   ctest --preset student -R lesson10/model
#include <algorithm>
#include <cmath>
#include <vector>

#include "backward.hpp"
#include "fa/host_tensor.hpp"
#include "fa/params.hpp"

namespace {

using lesson10::first_query_tile;
using lesson10::key_tile_end;
using lesson10::tile_count;
using lesson10::visible;

constexpr int kBr = 32;  // query rows per tile: the kernels' query tile
constexpr int kBc = 32;  // keys per tile: the kernels' key tile (one dK/dV block)

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 10 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// One query head's inputs, row-major fp32: q and dout (seqlen_q x d), its LSE and D (seqlen_q).
struct QueryHead {
  std::vector<float> q, dout, lse, delta;
};

// Row i of a row-major matrix with d columns.
const float* row(const std::vector<float>& x, int i, int d) { return x.data() + static_cast<size_t>(i) * d; }
float* row(std::vector<float>& x, int i, int d) { return x.data() + static_cast<size_t>(i) * d; }

float dot(const float* a, const float* b, int d) {
  float acc = 0.f;
  for (int x = 0; x < d; ++x) acc += a[x] * b[x];
  return acc;
}

// Step 1: D_i = rowsum(dO_i * O_i) for every row, with O as stored (the forward's rounded output).
std::vector<float> row_dots(const std::vector<float>& dout, const std::vector<float>& o, int sq, int d) {
  std::vector<float> delta(sq, 0.f);
  // TODO(3): the preprocess: delta[i] = dO_i . O_i, in fp32.
  // BEGIN SOLUTION
  for (int i = 0; i < sq; ++i) delta[i] = dot(row(dout, i, d), row(o, i, d), d);
  // END SOLUTION
  return delta;
}

// P_ij and dS_ij of one visible (query i, key j) pair, recomputed from the saved LSE: both passes
// need them.
struct PairGrad {
  float p, ds;
};
PairGrad pair_grad(const float* q, const float* k, const float* v, const float* dout, float lse, float delta, int d,
                   float scale) {
  // TODO(4): recompute one pair: p = exp(scale * q . k - lse) and ds = p * (dout . v - delta).
  //   s = scale * q . k and p = exp(s - lse): 0 when lse is +inf (a row that sees no key), never
  //   NaN; dp = dout . v; ds = p * (dp - delta).
  // BEGIN SOLUTION
  const float s = scale * dot(q, k, d);
  const float p = std::exp(s - lse);  // lse = +inf: exp(-inf) = 0
  const float dp = dot(dout, v, d);
  return {p, p * (dp - delta)};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0.f, 0.f};
  // END SKELETON
}

// Step 2, the dK/dV pass for one (batch, kv head): K and V (seqlen_k x d), the query heads of its
// group, and dK, dV (seqlen_k x d) to fill.
void dkdv_pass(const fa::AttnParams& p, const std::vector<float>& K, const std::vector<float>& V,
               const std::vector<QueryHead>& heads, std::vector<float>& dK, std::vector<float>& dV) {
  const int sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  dK.assign(static_cast<size_t>(sk) * d, 0.f);
  dV.assign(static_cast<size_t>(sk) * d, 0.f);
  for (int kt = 0; kt < tile_count(sk, kBc); ++kt) {  // outer loop: one key tile ("one block")
    const int k0 = kt * kBc, cols = std::min(kBc, sk - k0);
    std::vector<float> dk(static_cast<size_t>(cols) * d, 0.f), dv(static_cast<size_t>(cols) * d, 0.f);  // "on chip"
    for (const QueryHead& h : heads)  // GQA: every query head of the group adds to the same dK, dV
      for (int qt = first_query_tile(k0, kBr, sq, sk, p.causal); qt < tile_count(sq, kBr); ++qt) {
        const int q0 = qt * kBr, rows = std::min(kBr, sq - q0);
        // TODO(5): this query tile's share of the key tile's gradients: dv += p dO_i, dk += ds q_i.
        //   For each row i = q0 + r and key j = k0 + c the row sees (skip the pair when causal and
        //   !visible(i, j, sq, sk)): {p, ds} = pair_grad(...), then dv row c += p * dO_i and
        //   dk row c += ds * q_i (the scale comes once, after the walk).
        // BEGIN SOLUTION
        for (int r = 0; r < rows; ++r) {
          const int i = q0 + r;
          for (int c = 0; c < cols; ++c) {
            const int j = k0 + c;
            if (p.causal && !visible(i, j, sq, sk)) continue;
            const PairGrad g = pair_grad(row(h.q, i, d), row(K, j, d), row(V, j, d), row(h.dout, i, d), h.lse[i],
                                         h.delta[i], d, p.scale);
            for (int x = 0; x < d; ++x) {
              row(dv, c, d)[x] += g.p * row(h.dout, i, d)[x];
              row(dk, c, d)[x] += g.ds * row(h.q, i, d)[x];
            }
          }
        }
        // END SOLUTION
      }
    // The tile is done: leave the chip once, dK with its scale (applied here once, not per pair).
    for (int c = 0; c < cols; ++c)
      for (int x = 0; x < d; ++x) {
        row(dK, k0 + c, d)[x] = p.scale * row(dk, c, d)[x];
        row(dV, k0 + c, d)[x] = row(dv, c, d)[x];
      }
  }
}

// Step 3, the dQ pass for one query head: K and V of its kv head, dQ (seqlen_q x d) to fill.
void dq_pass(const fa::AttnParams& p, const std::vector<float>& K, const std::vector<float>& V, const QueryHead& h,
             std::vector<float>& dQ) {
  const int sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  dQ.assign(static_cast<size_t>(sq) * d, 0.f);
  for (int qt = 0; qt < tile_count(sq, kBr); ++qt) {  // outer loop: one query tile ("one block")
    const int q0 = qt * kBr, rows = std::min(kBr, sq - q0);
    std::vector<float> dq(static_cast<size_t>(rows) * d, 0.f);  // "on chip"
    for (int kt = 0; kt < key_tile_end(q0, kBr, kBc, sq, sk, p.causal); ++kt) {
      const int k0 = kt * kBc, cols = std::min(kBc, sk - k0);
      // TODO(6): this key tile's share of dQ: dq row r += ds * k_j for every visible pair.
      //   For each row i = q0 + r and key j = k0 + c the row sees, {p, ds} = pair_grad(...) again
      //   (P and dS are recomputed, not stored by the dK/dV pass) and dq row r += ds * k_j.
      // BEGIN SOLUTION
      for (int r = 0; r < rows; ++r) {
        const int i = q0 + r;
        for (int c = 0; c < cols; ++c) {
          const int j = k0 + c;
          if (p.causal && !visible(i, j, sq, sk)) continue;
          const PairGrad g = pair_grad(row(h.q, i, d), row(K, j, d), row(V, j, d), row(h.dout, i, d), h.lse[i],
                                       h.delta[i], d, p.scale);
          for (int x = 0; x < d; ++x) row(dq, r, d)[x] += g.ds * row(K, j, d)[x];
        }
      }
      // END SOLUTION
    }
    for (int r = 0; r < rows; ++r)
      for (int x = 0; x < d; ++x) row(dQ, q0 + r, d)[x] = p.scale * row(dq, r, d)[x];
  }
}

void model_backward(const fa::AttnParams& p, cudaStream_t) {
  fa::throw_if_todos_left("10_backward", lesson10::kTilesTodosLeft);
  fa::throw_if_todos_left("10_backward", kTodosLeft);
  // p.deterministic needs nothing: every output element has one writer, so every run is the same.
  const int group = p.heads_q / p.heads_kv, sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  for (int b = 0; b < p.batch; ++b)
    for (int hk = 0; hk < p.heads_kv; ++hk) {
      const auto K = fa::read_head(p.k, p.k_stride, p.dtype, b, hk, sk, d);
      const auto V = fa::read_head(p.v, p.v_stride, p.dtype, b, hk, sk, d);
      std::vector<QueryHead> heads(group);
      for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        QueryHead& qh = heads[g];
        qh.q = fa::read_head(p.q, p.q_stride, p.dtype, b, h, sq, d);
        qh.dout = fa::read_head(p.dout, p.do_stride, p.dtype, b, h, sq, d);
        qh.delta = row_dots(qh.dout, fa::read_head(p.o, p.o_stride, p.dtype, b, h, sq, d), sq, d);
        qh.lse.resize(sq);
        for (int i = 0; i < sq; ++i) qh.lse[i] = p.lse[fa::lse_index(p, b, h, i)];
      }
      std::vector<float> dK, dV;
      dkdv_pass(p, K, V, heads, dK, dV);
      fa::write_head(dK, p.dk, p.dk_stride, p.dtype, b, hk, sk, d);  // rounded to 16 bits once, here
      fa::write_head(dV, p.dv, p.dv_stride, p.dtype, b, hk, sk, d);
      for (int g = 0; g < group; ++g) {
        std::vector<float> dQ;
        dq_pass(p, K, V, heads[g], dQ);
        fa::write_head(dQ, p.dq, p.dq_stride, p.dtype, b, hk * group + g, sq, d);
      }
    }
}

}  // namespace

const fa::LessonInfo& fa_lesson_10_model() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa::cpu_model("10_backward", "backward pass, CPU model", nullptr);
    l.backward = &model_backward;  // no forward: the backward takes O and the LSE as inputs
    return l;
  }();
  return info;
}
