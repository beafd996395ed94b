// Your copy of this lesson, generated from solutions/00_reference/attention.cpp by fa-skeleton.
// Lesson 00: naive attention on the CPU, in Eigen with fp64 accumulation.
//
// What it is: softmax(scale * Q K^T + mask) V for every (batch, head), one full (seqlen_q x
// seqlen_k) score matrix at a time, plus the log-sum-exp of each row. It is the ground truth of
// the course: every later kernel must agree with it (tests/ uses the course's own copy in
// reference/, which you cannot call from here).
// Why it is slow: S and P are seqlen_q x seqlen_k per head. At N = 16k that is 256 M scores per
// head, 512 MB in fp16, more than ten times the H200's 50 MB L2 (README, "The memory wall").
// Build, test, profile:
//   cmake --preset student, then: cmake --build --preset student --target check-lesson00
//   lessons/00_reference/profile.sh          (CPU time and memory as N doubles)
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fa/host_tensor.hpp"
#include "fa/params.hpp"

namespace {

// README question 4 turns double into float here. Eigen refuses to mix float and double, so name
// matrix and row types through Mat (Mat::Scalar), not double, and this one word switches them all.
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 00 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(1) in attention.cpp: compute the scores S = scale * Q K^T, an (sq x sk) matrix.",
    "TODO(2) in attention.cpp: when causal, mask the keys query i must not see: S(i, j) = -kInf for j > i + (sk - sq).",
    "TODO(3) in attention.cpp: the softmax of row i with its max subtracted: p_j = exp(S(i, j) - m), l = sum_j p_j.",
    "TODO(4) in attention.cpp: write O.row(i) = (p / l) V and lse(i) = m + log(l), the natural log of sum_j exp(S(i, j)).",
};

// Provided: one (rows x dim) head of a 16-bit tensor in fp64, and back (fa/host_tensor.hpp).
Mat load_head(const void* base, const fa::Strides& st, int b, int h, int rows, int dim, fa::DType t) {
  const std::vector<float> x = fa::read_head(base, st, t, b, h, rows, dim);
  return Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(x.data(), rows, dim)
      .cast<Mat::Scalar>();
}

void store_head(const Mat& m, void* base, const fa::Strides& st, int b, int h, fa::DType t) {
  std::vector<float> x(m.size());
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(x.data(), m.rows(), m.cols()) =
      m.cast<float>();
  fa::write_head(x, base, st, t, b, h, static_cast<int>(m.rows()), static_cast<int>(m.cols()));
}

// Attention for one (batch, head): Q is (sq x d), K and V are (sk x d). Writes O (sq x d) and
// the natural-log LSE of each row (sq).
void naive_attention(const Mat& Q, const Mat& K, const Mat& V, double scale, bool causal, Mat& O, Vec& lse) {
  const int sq = static_cast<int>(Q.rows()), sk = static_cast<int>(K.rows());
  O = Mat::Zero(sq, V.cols());
  lse = Vec::Zero(sq);

  // TODO(1): compute the scores S = scale * Q K^T, an (sq x sk) matrix.
  //   Eigen: Q * K.transpose() is the matrix product; multiply by the scalar scale.
  Mat S = Mat::Zero(sq, sk);

  // TODO(2): when causal, mask the keys query i must not see: S(i, j) = -kInf for j > i + (sk - sq).
  //   The mask is bottom-right aligned, as in FlashAttention-2: with sk > sq the queries are the
  //   last sq positions of the sequence; with sq > sk the first sq - sk rows see no key at all.

  for (int i = 0; i < sq; ++i) {
    // TODO(3): the softmax of row i with its max subtracted: p_j = exp(S(i, j) - m), l = sum_j p_j.
    //   m is the row max. Never exp(S(i, j)) alone: at S = 100 it overflows fp32 (not fp64, but
    //   every kernel after this lesson works in fp32). If m is -kInf the row sees no key: leave
    //   O.row(i) = 0, set lse(i) = +kInf and go to the next row (exp(-inf - -inf) would be NaN).
    // TODO(4): write O.row(i) = (p / l) V and lse(i) = m + log(l), the natural log of sum_j exp(S(i, j)).
  }
}

void forward(const fa::AttnParams& p, cudaStream_t /*stream: host lesson*/) {
  fa::throw_if_todos_left("00_reference", kTodosLeft);
  const int group = p.heads_q / p.heads_kv;  // grouped-query heads share one K/V head
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const Mat Q = load_head(p.q, p.q_stride, b, h, p.seqlen_q, p.head_dim, p.dtype);
      const Mat K = load_head(p.k, p.k_stride, b, h / group, p.seqlen_k, p.head_dim, p.dtype);
      const Mat V = load_head(p.v, p.v_stride, b, h / group, p.seqlen_k, p.head_dim, p.dtype);
      Mat O;
      Vec lse;
      naive_attention(Q, K, V, p.scale, p.causal, O, lse);
      store_head(O, p.o, p.o_stride, b, h, p.dtype);
      for (int i = 0; i < p.seqlen_q; ++i)
        p.lse[fa::lse_index(p, b, h, i)] = static_cast<float>(lse(i));
    }
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_00_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_00_declared();

const fa::LessonInfo& fa_lesson_00() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_00_declared();
    l.forward = &forward;
    return l;
  }();
  return info;
}
