// The reference is the ground truth, so it is tested on its own: softmax rows sum to 1, the
// RoPE worked example at head_dim 4, gradients against finite differences, GQA, varlen, masked rows.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "fa/random.hpp"
#include "reference.hpp"

using fa::Problem;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

fa::ref::Inputs random_inputs(const Problem& p, uint64_t seed) {
  fa::Rng rng(seed);
  fa::ref::Inputs in;
  const size_t nq = size_t(p.total_q()) * p.heads_q * p.head_dim, nk = size_t(p.total_k()) * p.heads_kv * p.head_dim;
  for (size_t i = 0; i < nq; ++i) in.q.push_back(rng.normal());
  for (size_t i = 0; i < nk; ++i) in.k.push_back(rng.normal());
  for (size_t i = 0; i < nk; ++i) in.v.push_back(rng.normal());
  if (p.gate)
    for (size_t i = 0; i < size_t(p.total_k()) * p.heads_q; ++i) in.g.push_back(-0.5 * rng.uniform());  // log decay <= 0
  return in;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return kInf;
      continue;
    }
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

// Central differences of L = sum(dout * O) against the analytic gradients, for every element of
// q, k, v (and g). h = 1e-5: truncation error ~h^2 = 1e-10, cancellation ~1e-16 / h = 1e-11, so
// 1e-7 absolute + 1e-6 relative is far above the method's error and far below any real bug.
void check_gradients(const Problem& p, uint64_t seed) {
  fa::ref::Inputs in = random_inputs(p, seed);
  fa::Rng rng(seed + 1);
  std::vector<double> dout(size_t(p.total_q()) * p.heads_q * p.head_dim);
  for (double& x : dout) x = rng.normal();
  const fa::ref::Gradients g = fa::ref::backward(p, in, dout);
  auto loss = [&]() {
    const fa::ref::Forward f = fa::ref::forward(p, in);
    double l = 0;
    for (size_t i = 0; i < f.o.size(); ++i) l += dout[i] * f.o[i];
    return l;
  };
  const double h = 1e-5;
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
    REQUIRE(grad.size() == x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i];
      x[i] = keep + h;
      const double up = loss();
      x[i] = keep - h;
      const double down = loss();
      x[i] = keep;
      const double fd = (up - down) / (2 * h);
      REQUIRE(std::isfinite(grad[i]));
      CHECK_MESSAGE(std::fabs(fd - grad[i]) <= 1e-7 + 1e-6 * std::fabs(fd), name, "[", i, "]: analytic ", grad[i],
                    ", finite difference ", fd);
    }
  };
  check(in.q, g.dq, "dq");
  check(in.k, g.dk, "dk");
  check(in.v, g.dv, "dv");
  if (p.gate) check(in.g, g.dg, "dg");
}

Problem small(int sq, int sk, bool causal) {
  Problem p;
  p.batch = 2;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.head_dim = 4;
  p.causal = causal;
  return p;
}

}  // namespace

TEST_CASE("reference: softmax rows sum to 1") {
  for (bool causal : {false, true})
    for (auto [sq, sk] : {std::pair{7, 7}, std::pair{5, 9}, std::pair{9, 5}}) {
      Problem p = small(sq, sk, causal);
      fa::ref::Inputs in = random_inputs(p, 11);
      // With V = 1 every visible row of O is sum_j P_ij = 1; a fully masked row is 0.
      for (double& x : in.v) x = 1.0;
      const fa::ref::Forward f = fa::ref::forward(p, in);
      for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads_q; ++h)
          for (int i = 0; i < sq; ++i) {
            const bool any = !causal || i + sk - sq >= 0;
            const size_t row = (size_t(b) * p.heads_q + h) * sq + i;
            CHECK(f.o[row * p.head_dim] == doctest::Approx(any ? 1.0 : 0.0).epsilon(1e-14));
            // And exp(s_ij - LSE_i) sums to 1 over the visible keys, recomputed here from q and k.
            if (!any) continue;
            double sum = 0;
            for (int j = 0; j < sk; ++j) {
              if (causal && !fa::ref::visible(i, j, sq, sk)) continue;
              double s = 0;
              for (int d = 0; d < p.head_dim; ++d)
                s += in.q[row * p.head_dim + d] * in.k[((size_t(b) * p.heads_kv + 0) * sk + j) * p.head_dim + d];
              sum += std::exp(s * p.softmax_scale() - f.lse[row]);
            }
            CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
          }
    }
}

TEST_CASE("reference: RoPE worked example at head_dim 4") {
  // Lesson 09's README, "A worked example": batch 0, head 0, positions 0-3 of an (8 x 4) Q; d = 4
  // so theta = [1, 0.01]. The expected values are given to 4 decimals, computed from inputs that
  // are themselves given to 4 decimals, so agreement is to 1e-4.
  const std::vector<double> q = {0.3581, 0.1616, 0.5714, 0.4795, 0.5468, 0.3008, 0.9154, 0.3457,
                                 0.4201, 0.1406, 0.2273, 0.5269, 0.1441, 0.1024, 0.8580, 0.8310};
  const fa::ref::RopeTables t = fa::ref::rope_tables(4, 4);
  const double cos_want[4][2] = {{1.0, 1.0}, {0.5403, 0.9999}, {-0.4161, 0.9998}, {-0.9900, 0.9996}};
  const double sin_want[4][2] = {{0.0, 0.0}, {0.8415, 0.0100}, {0.9093, 0.0200}, {0.1411, 0.0300}};
  for (int pos = 0; pos < 4; ++pos)
    for (int i = 0; i < 2; ++i) {
      CHECK(std::fabs(t.sin[pos * 2 + i] - sin_want[pos][i]) <= 1e-4);
      CHECK(std::fabs(t.cos[pos * 2 + i] - cos_want[pos][i]) <= 1e-4);
    }
  std::vector<double> rot = q;
  fa::ref::rope_rotate(rot, 4, 4, {0, 1, 2, 3}, 10000.0);
  // Rows: the rotated first halves (columns 0-1), then the rotated second halves (columns 2-3).
  const double rot_want[4][4] = {{0.3581, 0.1616, 0.5714, 0.4795},
                                 {-0.4748, 0.2973, 0.9547, 0.3487},
                                 {-0.3815, 0.1300, 0.2874, 0.5296},
                                 {-0.2637, 0.0774, -0.8291, 0.8337}};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c)
      CHECK_MESSAGE(std::fabs(rot[r * 4 + c] - rot_want[r][c]) <= 1e-4, "q_rot(", r, ", ", c, ") = ", rot[r * 4 + c],
                    ", want ", rot_want[r][c]);
  const double qk_want[4][4] = {{0.7108, 0.5907, 0.3026, -0.1559},
                                {0.5907, 1.3469, 0.6789, -0.3526},
                                {0.3026, 0.6789, 0.5255, 0.3139},
                                {-0.1559, -0.3526, 0.3139, 1.4580}};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int d = 0; d < 4; ++d) s += rot[i * 4 + d] * rot[j * 4 + d];
      CHECK_MESSAGE(std::fabs(s - qk_want[i][j]) <= 1e-4, "qk(", i, ", ", j, ") = ", s, ", want ", qk_want[i][j]);
    }
  // The reference's own forward with RoPE uses exactly these scores: with Q = K, scale 1 and no
  // mask, LSE_i = log sum_j exp(qk_ij).
  Problem p;
  p.seqlen_q = p.seqlen_k = 4;
  p.head_dim = 4;
  p.scale = 1.0;
  p.rope_base = 10000.0;
  const fa::ref::Forward f = fa::ref::forward(p, {q, q, q, {}});
  for (int i = 0; i < 4; ++i) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += std::exp(qk_want[i][j]);
    CHECK(std::fabs(f.lse[i] - std::log(sum)) <= 2e-4);
  }
}

TEST_CASE("reference: RoPE scores depend only on the relative position") {
  fa::Rng rng(5);
  std::vector<double> q(8), k(8);
  for (double& x : q) x = rng.normal();
  for (double& x : k) x = rng.normal();
  auto score = [&](int m, int n) {
    std::vector<double> a = q, b = k;
    fa::ref::rope_rotate(a, 1, 8, {m}, 10000.0);
    fa::ref::rope_rotate(b, 1, 8, {n}, 10000.0);
    double s = 0;
    for (int d = 0; d < 8; ++d) s += a[d] * b[d];
    return s;
  };
  CHECK(score(5, 2) == doctest::Approx(score(103, 100)).epsilon(1e-12));
  CHECK(score(0, 7) == doctest::Approx(score(1000, 1007)).epsilon(1e-12));
  std::vector<double> back = q;  // the inverse rotation undoes the rotation
  fa::ref::rope_rotate(back, 1, 8, {12345}, 10000.0);
  fa::ref::rope_rotate(back, 1, 8, {12345}, 10000.0, true);
  for (int d = 0; d < 8; ++d) CHECK(back[d] == doctest::Approx(q[d]).epsilon(1e-12));
}

TEST_CASE("reference: backward matches central finite differences") {
  for (bool causal : {false, true})
    for (auto [sq, sk] : {std::pair{5, 5}, std::pair{3, 6}, std::pair{6, 4}}) check_gradients(small(sq, sk, causal), 21);
  SUBCASE("with the decay gate (dg)") {
    Problem p = small(5, 7, true);
    p.gate = true;
    check_gradients(p, 22);
  }
  SUBCASE("with RoPE") {
    Problem p = small(4, 6, true);
    p.rope_base = 10000.0;
    check_gradients(p, 23);
  }
  SUBCASE("varlen with the gate") {
    Problem p = small(0, 0, true);
    p.cu_seqlens_q = {0, 3, 3, 7};
    p.cu_seqlens_k = {0, 4, 6, 11};
    p.gate = true;
    check_gradients(p, 24);
  }
}

TEST_CASE("reference: grouped-query heads equal repeated heads") {
  Problem g;
  g.batch = 2;
  g.heads_q = 6;
  g.heads_kv = 2;
  g.seqlen_q = 9;
  g.seqlen_k = 13;
  g.head_dim = 8;
  g.causal = true;
  const fa::ref::Inputs in = random_inputs(g, 31);
  Problem r = g;
  r.heads_kv = 6;
  fa::ref::Inputs rep = in;  // K and V repeated: query head h uses kv head h / 3
  rep.k.clear();
  rep.v.clear();
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 6; ++h)
      for (int j = 0; j < 13; ++j)
        for (int d = 0; d < 8; ++d) {
          const size_t src = ((size_t(b) * 2 + h / 3) * 13 + j) * 8 + d;
          rep.k.push_back(in.k[src]);
          rep.v.push_back(in.v[src]);
        }
  const fa::ref::Forward fg = fa::ref::forward(g, in), fr = fa::ref::forward(r, rep);
  CHECK(max_abs_diff(fg.o, fr.o) == 0.0);
  CHECK(max_abs_diff(fg.lse, fr.lse) == 0.0);
  std::vector<double> dout(fg.o.size());
  fa::Rng rng(32);
  for (double& x : dout) x = rng.normal();
  const fa::ref::Gradients gg = fa::ref::backward(g, in, dout), gr = fa::ref::backward(r, rep, dout);
  CHECK(max_abs_diff(gg.dq, gr.dq) <= 1e-13);
  for (int b = 0; b < 2; ++b)  // a shared kv head's gradient is the sum over its group
    for (int hk = 0; hk < 2; ++hk)
      for (int j = 0; j < 13; ++j)
        for (int d = 0; d < 8; ++d) {
          double sk = 0, sv = 0;
          for (int h = hk * 3; h < hk * 3 + 3; ++h) {
            sk += gr.dk[((size_t(b) * 6 + h) * 13 + j) * 8 + d];
            sv += gr.dv[((size_t(b) * 6 + h) * 13 + j) * 8 + d];
          }
          CHECK(std::fabs(gg.dk[((size_t(b) * 2 + hk) * 13 + j) * 8 + d] - sk) <= 1e-13);
          CHECK(std::fabs(gg.dv[((size_t(b) * 2 + hk) * 13 + j) * 8 + d] - sv) <= 1e-13);
        }
}

TEST_CASE("reference: varlen equals running each sequence alone") {
  Problem v;
  v.heads_q = 4;
  v.heads_kv = 2;
  v.head_dim = 8;
  v.causal = true;
  v.gate = true;
  v.cu_seqlens_q = {0, 5, 5, 17, 18};  // an empty query sequence, and seqlen_q != seqlen_k
  v.cu_seqlens_k = {0, 7, 10, 30, 31};
  const fa::ref::Inputs in = random_inputs(v, 41);
  std::vector<double> dout(size_t(v.total_q()) * v.heads_q * v.head_dim);
  fa::Rng rng(42);
  for (double& x : dout) x = rng.normal();
  const fa::ref::Forward f = fa::ref::forward(v, in);
  const fa::ref::Gradients g = fa::ref::backward(v, in, dout);
  for (int b = 0; b < v.sequences(); ++b) {
    const int lq = v.len_q(b), lk = v.len_k(b), q0 = v.cu_seqlens_q[b], k0 = v.cu_seqlens_k[b];
    if (lq == 0) continue;
    Problem one = v;
    one.cu_seqlens_q.clear();
    one.cu_seqlens_k.clear();
    one.batch = 1;
    one.seqlen_q = lq;
    one.seqlen_k = lk;
    fa::ref::Inputs alone;  // packed (t, h, d) -> dense (1, h, s, d); g (h, total) -> (1, h, s)
    std::vector<double> dalone;
    auto take = [&](const std::vector<double>& src, int heads, int t0, int len, std::vector<double>& dst) {
      for (int h = 0; h < heads; ++h)
        for (int s = 0; s < len; ++s)
          for (int d = 0; d < v.head_dim; ++d) dst.push_back(src[((size_t(t0) + s) * heads + h) * v.head_dim + d]);
    };
    take(in.q, v.heads_q, q0, lq, alone.q);
    take(in.k, v.heads_kv, k0, lk, alone.k);
    take(in.v, v.heads_kv, k0, lk, alone.v);
    take(dout, v.heads_q, q0, lq, dalone);
    for (int h = 0; h < v.heads_q; ++h)
      for (int s = 0; s < lk; ++s) alone.g.push_back(in.g[size_t(h) * v.total_k() + k0 + s]);
    const fa::ref::Forward fa1 = fa::ref::forward(one, alone);
    const fa::ref::Gradients ga = fa::ref::backward(one, alone, dalone);
    for (int h = 0; h < v.heads_q; ++h)
      for (int s = 0; s < lq; ++s) {
        CHECK(f.lse[size_t(h) * v.total_q() + q0 + s] == fa1.lse[size_t(h) * lq + s]);
        for (int d = 0; d < v.head_dim; ++d) {
          CHECK(f.o[((size_t(q0) + s) * v.heads_q + h) * v.head_dim + d] == fa1.o[(size_t(h) * lq + s) * v.head_dim + d]);
          CHECK(std::fabs(g.dq[((size_t(q0) + s) * v.heads_q + h) * v.head_dim + d] -
                          ga.dq[(size_t(h) * lq + s) * v.head_dim + d]) <= 1e-13);
        }
      }
    for (int h = 0; h < v.heads_kv; ++h)
      for (int s = 0; s < lk; ++s)
        for (int d = 0; d < v.head_dim; ++d) {
          CHECK(std::fabs(g.dk[((size_t(k0) + s) * v.heads_kv + h) * v.head_dim + d] - ga.dk[(size_t(h) * lk + s) * v.head_dim + d]) <= 1e-13);
          CHECK(std::fabs(g.dv[((size_t(k0) + s) * v.heads_kv + h) * v.head_dim + d] - ga.dv[(size_t(h) * lk + s) * v.head_dim + d]) <= 1e-13);
        }
    for (int h = 0; h < v.heads_q; ++h)
      for (int s = 0; s < lk; ++s)
        CHECK(std::fabs(g.dg[size_t(h) * v.total_k() + k0 + s] - ga.dg[size_t(h) * lk + s]) <= 1e-13);
  }
}

TEST_CASE("reference: fully masked rows give O = 0 and LSE = +inf with finite gradients") {
  Problem p = small(6, 2, true);  // rows 0-3 see no key
  p.gate = true;
  const fa::ref::Inputs in = random_inputs(p, 51);
  const fa::ref::Forward f = fa::ref::forward(p, in);
  std::vector<double> dout(f.o.size(), 1.0);
  const fa::ref::Gradients g = fa::ref::backward(p, in, dout);
  for (int bh = 0; bh < p.batch * p.heads_q; ++bh)
    for (int i = 0; i < 6; ++i) {
      const size_t row = size_t(bh) * 6 + i;
      if (i < 4) {
        CHECK(f.lse[row] == kInf);
        for (int d = 0; d < 4; ++d) {
          CHECK(f.o[row * 4 + d] == 0.0);
          CHECK(g.dq[row * 4 + d] == 0.0);
        }
      } else {
        CHECK(std::isfinite(f.lse[row]));
      }
    }
  for (const auto* v : {&g.dq, &g.dk, &g.dv, &g.dg})
    for (double x : *v) CHECK(std::isfinite(x));
}

TEST_CASE("reference: the decay gate adds G_i - G_j") {
  Problem p = small(4, 6, true);
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.gate = true;
  fa::ref::Inputs in = random_inputs(p, 61);
  Problem plain = p;
  plain.gate = false;
  // g = 0 is no gate at all.
  fa::ref::Inputs zero = in;
  for (double& x : zero.g) x = 0;
  CHECK(max_abs_diff(fa::ref::forward(p, zero).o, fa::ref::forward(plain, in).o) == 0.0);
  // By hand for query 2 (position 2 + 6 - 4 = 4): s_j = scale q.k_j + G_4 - G_j, j <= 4.
  std::vector<double> G(6);
  double acc = 0;
  for (int j = 0; j < 6; ++j) G[j] = (acc += in.g[j]);
  double m = -kInf;
  std::vector<double> s(5);
  for (int j = 0; j <= 4; ++j) {
    double dot = 0;
    for (int d = 0; d < 4; ++d) dot += in.q[2 * 4 + d] * in.k[j * 4 + d];
    s[j] = p.softmax_scale() * dot + G[4] - G[j];
    m = std::max(m, s[j]);
  }
  double l = 0;
  for (double x : s) l += std::exp(x - m);
  CHECK(fa::ref::forward(p, in).lse[2] == doctest::Approx(m + std::log(l)).epsilon(1e-14));
}

TEST_CASE("reference: sampled rows equal the full result") {
  Problem p = small(40, 50, true);
  p.head_dim = 16;
  const fa::ref::Inputs in = random_inputs(p, 71);
  const std::vector<int> rows = {0, 9, 10, 39};
  const fa::ref::Forward full = fa::ref::forward(p, in), part = fa::ref::forward(p, in, &rows);
  for (int bh = 0; bh < p.batch * p.heads_q; ++bh)
    for (size_t r = 0; r < rows.size(); ++r) {
      CHECK(part.lse[bh * rows.size() + r] == full.lse[size_t(bh) * 40 + rows[r]]);
      for (int d = 0; d < 16; ++d)
        CHECK(part.o[(bh * rows.size() + r) * 16 + d] == full.o[(size_t(bh) * 40 + rows[r]) * 16 + d]);
    }
}

TEST_CASE("reference: sampled gradients equal the full backward, with and without the gate") {
  // backward_rows (fa-bench's check of 16k-long problems) against backward on one head: dq, dk and
  // dv at sampled rows; with the gate, dg at the last positions too, from the full forward's O and
  // LSE. seqlen_q < seqlen_k, equal, and > (its first rows see no key).
  for (const std::pair<int, int>& lengths : std::vector<std::pair<int, int>>{{30, 37}, {37, 37}, {37, 30}})
    for (bool gate : {false, true}) {
      const int sq = lengths.first, sk = lengths.second;
      Problem p = small(sq, sk, true);
      p.batch = p.heads_q = p.heads_kv = 1;
      p.head_dim = 8;
      p.gate = gate;
      CAPTURE(sq);
      CAPTURE(sk);
      CAPTURE(gate);
      const fa::ref::Inputs in = random_inputs(p, 81);
      fa::Rng rng(82);
      std::vector<double> dout(size_t(sq) * p.head_dim);
      for (double& x : dout) x = rng.normal();
      const fa::ref::Forward f = fa::ref::forward(p, in);
      const fa::ref::Gradients want = fa::ref::backward(p, in, dout);
      const std::vector<int> qrows = {0, 5, sq - 1}, krows = {0, 11, sk - 1};
      const int last = gate ? 9 : 0;
      const fa::ref::SampledGradients got = fa::ref::backward_rows(p, in, dout, f.o, f.lse, qrows, krows, last);
      const int D = p.head_dim;
      auto rows_of = [&](const std::vector<double>& full, const std::vector<int>& rows) {
        std::vector<double> out;
        for (int r : rows)
          for (int d = 0; d < D; ++d) out.push_back(full[size_t(r) * D + d]);
        return out;
      };
      CHECK(max_abs_diff(got.dq, rows_of(want.dq, qrows)) < 1e-12);
      CHECK(max_abs_diff(got.dk, rows_of(want.dk, krows)) < 1e-12);
      CHECK(max_abs_diff(got.dv, rows_of(want.dv, krows)) < 1e-12);
      REQUIRE(got.dg.size() == size_t(last));
      REQUIRE(got.dg_terms.size() == size_t(last));
      for (int e = 0; e < last; ++e) {
        CHECK(got.dg[e] == doctest::Approx(want.dg[sk - last + e]).epsilon(1e-10).scale(1e-12));
        // The sizes of the terms bound the sum, and they are not all 0.
        CHECK(got.dg_terms[e] >= std::fabs(got.dg[e]));
        CHECK(got.dg_terms[e] > 0);
      }
    }
  Problem p = small(5, 5, true);
  p.batch = p.heads_q = p.heads_kv = 1;
  const fa::ref::Inputs in = random_inputs(p, 83);
  const std::vector<double> zeros(5 * 4, 0.0), lse(5, 0.0);
  CHECK_THROWS_WITH_AS(fa::ref::backward_rows(p, in, zeros, zeros, lse, {}, {}, 2), doctest::Contains("needs the gate"),
                       std::invalid_argument);
}

TEST_CASE("reference: visible pairs count the FLOPs") {
  Problem p;
  p.seqlen_q = p.seqlen_k = 100;
  p.heads_q = p.heads_kv = 3;
  CHECK(fa::ref::visible_pairs(p) == 3 * 100 * 100);
  p.causal = true;
  CHECK(fa::ref::visible_pairs(p) == 3 * 100 * 101 / 2);
  p.seqlen_q = 10;  // bottom-right: query i sees 91 + i keys
  CHECK(fa::ref::visible_pairs(p) == 3 * (91 + 100) * 10 / 2);
  p.seqlen_q = 120;  // the first 20 rows see nothing
  CHECK(fa::ref::visible_pairs(p) == 3 * 100 * 101 / 2);
}

TEST_CASE("reference: rejects shapes the conventions do not define") {
  Problem p;
  p.heads_q = 3;
  p.heads_kv = 2;
  CHECK_THROWS_AS(fa::ref::forward(p, {}), std::invalid_argument);
  Problem g;
  g.gate = true;  // not causal
  CHECK_THROWS_WITH_AS(fa::ref::forward(g, {}), doctest::Contains("causal"), std::invalid_argument);
  Problem r;
  r.rope_base = 10000;
  r.head_dim = 4;
  r.seqlen_q = 5;
  r.seqlen_k = 3;
  CHECK_THROWS_WITH_AS(fa::ref::forward(r, {}), doctest::Contains("seqlen_q <= seqlen_k"), std::invalid_argument);
}
