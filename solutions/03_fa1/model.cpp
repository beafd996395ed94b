// Lesson 03, part 1: the FlashAttention-1 loop order as a CPU model, in fp32 like the kernel.
//
// K/V tiles in the OUTER loop, query tiles in the INNER loop (FlashAttention-1, Algorithm 1). For
// each K/V tile, every query tile reads its running O, m and l back from "HBM" (here: the arrays
// O, m, l of the whole head), folds the tile in, normalises O again, and writes all three back.
// So O travels to HBM and back once per K/V tile: seqlen_k / kBc times. Lesson 04 swaps the loops
// and keeps them on chip. Write and test this model first (it runs without a GPU):
//   cmake --build --preset student --target check-lesson03
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fa/host_tensor.hpp"
#include "fa/params.hpp"

namespace {

constexpr int kBr = 64;  // query rows per tile
constexpr int kBc = 64;  // keys per K/V tile
constexpr float kInf = std::numeric_limits<float>::infinity();

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 03 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// One (batch, head) in the FA1 loop order. O (sq x d), m and l (sq) play the role of HBM.
void fa1_head(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V, int sq, int sk,
              int d, float scale, bool causal, std::vector<float>& O, std::vector<float>& lse) {
  O.assign(static_cast<size_t>(sq) * d, 0.f);
  std::vector<float> m(sq, -kInf), l(sq, 0.f);
  std::vector<float> pv(d);
  for (int k0 = 0; k0 < sk; k0 += kBc) {    // outer: K/V tiles (loaded once each)
    const int cols = std::min(kBc, sk - k0);
    for (int q0 = 0; q0 < sq; q0 += kBr) {  // inner: every query tile, its state from HBM
      for (int i = q0; i < std::min(q0 + kBr, sq); ++i) {
        float s[kBc];
        float m_tile = -kInf;
        for (int c = 0; c < cols; ++c) {
          const int j = k0 + c;
          float dot = 0.f;
          for (int x = 0; x < d; ++x) dot += Q[static_cast<size_t>(i) * d + x] * K[static_cast<size_t>(j) * d + x];
          s[c] = (causal && j > i + (sk - sq)) ? -kInf : scale * dot;
          m_tile = std::max(m_tile, s[c]);
        }
        if (m_tile == -kInf) continue;  // this tile is invisible to row i: its state is unchanged
        // TODO(1): the tile's own softmax and its P V: p_c, l_tile and pv for row i.
        //   p_c = exp(s[c] - m_tile), l_tile = sum_c p_c, pv = sum_c p_c * v_(k0 + c) (a d-vector).
        // BEGIN SOLUTION
        float l_tile = 0.f;
        std::fill(pv.begin(), pv.end(), 0.f);
        for (int c = 0; c < cols; ++c) {
          const float p = std::exp(s[c] - m_tile);
          l_tile += p;
          for (int x = 0; x < d; ++x) pv[x] += p * V[static_cast<size_t>(k0 + c) * d + x];
        }
        // END SOLUTION
        // BEGIN SKELETON
        // float l_tile = 0.f;
        // END SKELETON
        // TODO(2): merge the tile into row i's state in "HBM" (O, m, l), FA1 style.
        //   m_new = max(m_i, m_tile),
        //   a = exp(m_i - m_new), b = exp(m_tile - m_new), l_new = a l_i + b l_tile,
        //   O_i = (a l_i O_i + b pv) / l_new (O stays normalised after every tile), then store
        //   m_i = m_new, l_i = l_new.
        // BEGIN SOLUTION
        const float m_new = std::max(m[i], m_tile);
        const float a = std::exp(m[i] - m_new), b = std::exp(m_tile - m_new);
        const float l_new = a * l[i] + b * l_tile;
        for (int x = 0; x < d; ++x) {
          float& o = O[static_cast<size_t>(i) * d + x];
          o = (a * l[i] * o + b * pv[x]) / l_new;
        }
        m[i] = m_new;
        l[i] = l_new;
        // END SOLUTION
      }
    }
  }
  lse.resize(sq);
  for (int i = 0; i < sq; ++i) lse[i] = l[i] > 0.f ? m[i] + std::log(l[i]) : kInf;  // O is already normalised
}

void model_forward(const fa::AttnParams& p, cudaStream_t) {
  fa::throw_if_todos_left("03_fa1", kTodosLeft);
  const int group = p.heads_q / p.heads_kv;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const auto Q = fa::read_head(p.q, p.q_stride, p.dtype, b, h, p.seqlen_q, p.head_dim);
      const auto K = fa::read_head(p.k, p.k_stride, p.dtype, b, h / group, p.seqlen_k, p.head_dim);
      const auto V = fa::read_head(p.v, p.v_stride, p.dtype, b, h / group, p.seqlen_k, p.head_dim);
      std::vector<float> O, lse;
      fa1_head(Q, K, V, p.seqlen_q, p.seqlen_k, p.head_dim, p.scale, p.causal, O, lse);
      fa::write_head(O, p.o, p.o_stride, p.dtype, b, h, p.seqlen_q, p.head_dim);
      for (int i = 0; i < p.seqlen_q; ++i) p.lse[fa::lse_index(p, b, h, i)] = lse[i];
    }
}

}  // namespace

const fa::LessonInfo& fa_lesson_03_model() {
  static const fa::LessonInfo info = fa::cpu_model("03_fa1", "FA1 loop order, CPU model", &model_forward);
  return info;
}
