// Your copy of this lesson, generated from solutions/02_online_softmax/online_softmax.hpp by fa-skeleton.
// Lesson 02: the online softmax, as plain functions the tests call directly.
#pragma once

namespace fa::lesson02 {

// The two numbers a softmax row needs: its max m and l = sum_j exp(x_j - m).
// A row whose entries are all -inf has m = -inf and l = 0.
struct SoftmaxStats {
  float m;
  float l;
};

// m and l in ONE pass over x[0 .. n), with the running max and the running, rescaled sum.
SoftmaxStats online_softmax_stats(const float* x, int n);

// HBM bytes one row of n fp32 scores costs a softmax kernel that reads the row `reads` times and
// writes it once: 3-pass (max, sum, normalise) is reads = 3, online (stats, normalise) is 2.
constexpr double softmax_row_bytes(int n, int reads) { return 4.0 * n * (reads + 1); }

}  // namespace fa::lesson02
