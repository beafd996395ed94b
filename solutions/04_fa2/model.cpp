// Lesson 04, part 1: the FlashAttention-2 loop order as a CPU model, in fp32 like the kernel.
//
// One query tile at a time (on the GPU: one thread block), stream every K/V tile past it, and
// keep each row's running max m, running sum l and unnormalised output acc "on chip" (here: in
// local vectors). Divide by l once, at the very end. The kernel in kernel.cu does exactly this,
// with the rows spread over threads; write and test this model first (it runs without a GPU):
//   cmake --build --preset student --target check-lesson04   (its CPU tests, this model among them, run first)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fa/host_tensor.hpp"
#include "fa/params.hpp"

namespace {

constexpr int kBr = 64;  // query rows per tile (a block of the GPU kernel holds 32; any size works)
constexpr int kBc = 64;  // keys per K/V tile
constexpr float kInf = std::numeric_limits<float>::infinity();

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 04 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// Attention for one (batch, head) in the FA2 loop order. Q: (sq x d), K, V: (sk x d), row-major.
void fa2_head(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V, int sq, int sk,
              int d, float scale, bool causal, std::vector<float>& O, std::vector<float>& lse) {
  O.assign(static_cast<size_t>(sq) * d, 0.f);
  lse.assign(sq, 0.f);
  for (int q0 = 0; q0 < sq; q0 += kBr) {  // outer loop: one query tile, its state stays "on chip"
    const int rows = std::min(kBr, sq - q0);
    std::vector<float> m(rows, -kInf), l(rows, 0.f), acc(static_cast<size_t>(rows) * d, 0.f);
    for (int k0 = 0; k0 < sk; k0 += kBc) {  // inner loop: stream the K/V tiles
      const int cols = std::min(kBc, sk - k0);
      for (int r = 0; r < rows; ++r) {
        const int i = q0 + r;
        float s[kBc];
        float m_tile = -kInf;
        // TODO(1): the scores of row i against this K/V tile, and their max m_tile.
        //   s[c] = scale * q_i . k_j for j = k0 + c, or -kInf where causal and j > i + (sk - sq).
        // BEGIN SOLUTION
        for (int c = 0; c < cols; ++c) {
          const int j = k0 + c;
          float dot = 0.f;
          for (int x = 0; x < d; ++x) dot += Q[static_cast<size_t>(i) * d + x] * K[static_cast<size_t>(j) * d + x];
          s[c] = (causal && j > i + (sk - sq)) ? -kInf : scale * dot;
          m_tile = std::max(m_tile, s[c]);
        }
        // END SOLUTION
        // TODO(2): the online update of row r's m, l and acc with this tile.
        //   m_new = max(m[r], m_tile); if m_new is still -kInf every key
        //   so far is masked: skip the tile. Otherwise rescale the old state by alpha =
        //   exp(m[r] - m_new) (l[r] *= alpha and every acc of row r *= alpha), then add the tile:
        //   p = exp(s[c] - m_new), l[r] += p, acc row r += p * v_j; finally m[r] = m_new.
        // BEGIN SOLUTION
        const float m_new = std::max(m[r], m_tile);
        if (m_new == -kInf) continue;
        const float alpha = std::exp(m[r] - m_new);  // 0 on the first visible tile (m = -inf)
        l[r] *= alpha;
        for (int x = 0; x < d; ++x) acc[static_cast<size_t>(r) * d + x] *= alpha;
        for (int c = 0; c < cols; ++c) {
          const float p = std::exp(s[c] - m_new);
          l[r] += p;
          for (int x = 0; x < d; ++x) acc[static_cast<size_t>(r) * d + x] += p * V[static_cast<size_t>(k0 + c) * d + x];
        }
        m[r] = m_new;
        // END SOLUTION
      }
    }
    // TODO(3): normalise once per row, at the end: O_i = acc / l and lse_i = m + log(l).
    //   A row that saw no key (l == 0) keeps O_i = 0 and gets lse_i = +kInf.
    // BEGIN SOLUTION
    for (int r = 0; r < rows; ++r) {
      const int i = q0 + r;
      if (l[r] == 0.f) {
        lse[i] = kInf;
        continue;
      }
      for (int x = 0; x < d; ++x) O[static_cast<size_t>(i) * d + x] = acc[static_cast<size_t>(r) * d + x] / l[r];
      lse[i] = m[r] + std::log(l[r]);
    }
    // END SOLUTION
  }
}

void model_forward(const fa::AttnParams& p, cudaStream_t) {
  fa::throw_if_todos_left("04_fa2", kTodosLeft);
  const int group = p.heads_q / p.heads_kv;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const auto Q = fa::read_head(p.q, p.q_stride, p.dtype, b, h, p.seqlen_q, p.head_dim);
      const auto K = fa::read_head(p.k, p.k_stride, p.dtype, b, h / group, p.seqlen_k, p.head_dim);
      const auto V = fa::read_head(p.v, p.v_stride, p.dtype, b, h / group, p.seqlen_k, p.head_dim);
      std::vector<float> O, lse;
      fa2_head(Q, K, V, p.seqlen_q, p.seqlen_k, p.head_dim, p.scale, p.causal, O, lse);
      fa::write_head(O, p.o, p.o_stride, p.dtype, b, h, p.seqlen_q, p.head_dim);
      for (int i = 0; i < p.seqlen_q; ++i) p.lse[fa::lse_index(p, b, h, i)] = lse[i];
    }
}

}  // namespace

const fa::LessonInfo& fa_lesson_04_model() {
  static const fa::LessonInfo info = fa::cpu_model("04_fa2", "FA2 loop order, CPU model", &model_forward);
  return info;
}
