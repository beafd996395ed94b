// Your copy of this lesson, generated from solutions/02_online_softmax/model.cpp by fa-skeleton.
// Lesson 02, part 1: the online softmax on the CPU.
//
// A softmax row needs its max m before it can sum exp(x_j - m), so the obvious kernel reads the row
// three times: max, sum, normalise. The online softmax keeps a running max and rescales the
// running sum whenever the max grows:
//     m_new = max(m, x_j)      l = l * exp(m - m_new) + exp(x_j - m_new)      m = m_new
// and gets both in one pass. The model below is attention with that softmax, in fp32, row by row;
// the forward suite checks it like any kernel. Write and test it first (it runs without a GPU):
//   cmake --build --preset student --target check-lesson02
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fa/host_tensor.hpp"
#include "fa/params.hpp"
#include "online_softmax.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 02 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(1) in model.cpp: compute m and l in one pass over x, rescaling l whenever the running max m grows.",
    "TODO(2) in model.cpp: the second pass: O_i = sum_j exp(s_j - m) / l * v_j, and lse = m + log(l).",
};

}  // namespace

namespace fa::lesson02 {

SoftmaxStats online_softmax_stats(const float* x, int n) {
  float m = -kInf, l = 0.f;
  // TODO(1): compute m and l in one pass over x, rescaling l whenever the running max m grows.
  //   For each x_j: m_new = max(m, x_j); if m_new is -inf (everything so far is masked) keep
  //   m = -inf, l = 0; else l = l * exp(m - m_new) + exp(x_j - m_new) and m = m_new.
  return {m, l};
}

}  // namespace fa::lesson02

namespace {

void model_forward(const fa::AttnParams& p, cudaStream_t) {
  fa::throw_if_todos_left("02_online_softmax", kTodosLeft);
  const int group = p.heads_q / p.heads_kv, d = p.head_dim, sq = p.seqlen_q, sk = p.seqlen_k;
  std::vector<float> s(sk), o(d);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const auto Q = fa::read_head(p.q, p.q_stride, p.dtype, b, h, sq, d);
      const auto K = fa::read_head(p.k, p.k_stride, p.dtype, b, h / group, sk, d);
      const auto V = fa::read_head(p.v, p.v_stride, p.dtype, b, h / group, sk, d);
      std::vector<float> O(static_cast<size_t>(sq) * d, 0.f);
      for (int i = 0; i < sq; ++i) {
        for (int j = 0; j < sk; ++j) {
          float dot = 0.f;
          for (int x = 0; x < d; ++x) dot += Q[static_cast<size_t>(i) * d + x] * K[static_cast<size_t>(j) * d + x];
          s[j] = (p.causal && j > i + (sk - sq)) ? -kInf : p.scale * dot;
        }
        const fa::lesson02::SoftmaxStats st = fa::lesson02::online_softmax_stats(s.data(), sk);
        float& lse = p.lse[fa::lse_index(p, b, h, i)];
        // TODO(2): the second pass: O_i = sum_j exp(s_j - m) / l * v_j, and lse = m + log(l).
        //   A row with l == 0 (nothing visible) keeps O_i = 0 and gets lse = +inf. (A single pass
        //   would need O_i rescaled each time m grows, like l: that is lessons 03-04.)
      }
      fa::write_head(O, p.o, p.o_stride, p.dtype, b, h, sq, d);
    }
}

}  // namespace

const fa::LessonInfo& fa_lesson_02_model() {
  static const fa::LessonInfo info = fa::cpu_model("02_online_softmax", "online softmax, CPU model", &model_forward);
  return info;
}
