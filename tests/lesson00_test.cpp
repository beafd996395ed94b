// Lesson 00's own test: the worked example of its README, by hand, through the lesson.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "fa/compare.hpp"
#include "fa/half.hpp"
#include "fa/params.hpp"
#include "reference.hpp"
#include "support.hpp"

TEST_CASE("lesson00: the README worked example") {
  // Q, K, V are (3 x 2), one batch and head, scale 1/sqrt(2); every input is exact in fp16.
  const double q[3][2] = {{1, 0}, {0, 2}, {1, 1}}, k[3][2] = {{2, 0}, {0, 1}, {1, -1}}, v[3][2] = {{1, 0}, {0, 1}, {1, 1}};
  // The README's O and LSE, rounded to 4 decimals; the lesson stores O in fp16 (1e-3 at most off).
  const double o_full[3][2] = {{0.8600, 0.4240}, {0.2321, 0.8133}, {0.7160, 0.4240}};
  const double lse_full[3] = {1.9659, 1.6783, 1.9659};
  const double o_causal[3][2] = {{1.0, 0.0}, {0.1956, 0.8044}, {0.7160, 0.4240}};
  const double lse_causal[3] = {1.4142, 1.6318, 1.9659};
  for (bool causal : {false, true}) {
    std::vector<uint16_t> qs, ks, vs, os(6, 0xffff);
    std::vector<float> lse(3, NAN);
    for (int i = 0; i < 3; ++i)
      for (int d = 0; d < 2; ++d) {
        qs.push_back(fa::float_to_f16(float(q[i][d])));
        ks.push_back(fa::float_to_f16(float(k[i][d])));
        vs.push_back(fa::float_to_f16(float(v[i][d])));
      }
    fa::AttnParams p;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seqlen_q = p.seqlen_k = 3;
    p.head_dim = 2;
    p.scale = static_cast<float>(fa::default_scale(2));
    p.causal = causal;
    p.q = qs.data();
    p.k = ks.data();
    p.v = vs.data();
    p.o = os.data();
    p.lse = lse.data();
    fa::set_contiguous_strides(p);
    try {
      fa::run_forward(fa::test::lesson_under_test(), p);
    } catch (const fa::NotImplemented& e) {
      FAIL(std::string(e.what()));
    }
    for (int i = 0; i < 3; ++i) {
      CHECK(std::fabs(lse[i] - (causal ? lse_causal : lse_full)[i]) <= 1e-4);
      for (int d = 0; d < 2; ++d)
        CHECK_MESSAGE(std::fabs(fa::f16_to_float(os[i * 2 + d]) - (causal ? o_causal : o_full)[i][d]) <= 1e-3,
                      std::string(causal ? "causal" : "non-causal"), " O(", i, ", ", d, ") = ", fa::f16_to_float(os[i * 2 + d]));
    }
  }
}

TEST_CASE("lesson00: logits beyond the fp64 exp range need the row max subtracted") {
  // The forward suite's largest logits (~+80) overflow exp in fp32 but not in fp64 (exp(80) =
  // 5.5e34, and fp64 reaches 1.8e308): there, a lesson 00 that forgets the max still passes. Here
  // rows cycle through logits near +960, near +760, ordinary ones and near -960. exp(x) is +inf
  // in fp64 above x = 709.78 and 0 below x = -745.1, so exp(S) / sum exp(S) is inf / inf or 0 / 0,
  // NaN, and log(sum exp(S)) is inf or -inf (Eigen's vectorised exp clamps x to about +-709
  // instead, which gives finite but wrong rows); exp(S - m) is at most 1 and needs none of that.
  // Every row sees key 0, so no LSE here is +inf.
  const int n = 8, d = 4;  // scale = 1/sqrt(4) = 0.5; every input is exact in fp16
  std::vector<double> q(n * d), k(n * d), v(n * d);
  const double row_size[4] = {24, 19, 0, -24};  // s ~ 0.5 * 4 * 20 * a = 40 a: 960, 760, ~3, -960
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) {
      const double a = row_size[i % 4];
      q[i * d + c] = a != 0 ? a + 0.25 * ((i + c) % 3) : 0.125 * ((i + 2 * c) % 5) - 0.25;
      k[i * d + c] = 20 + 0.0625 * ((3 * i + c) % 4) - 0.125 * (c == i % d);
      v[i * d + c] = 0.25 * ((i * 3 + c * 5) % 9) - 1;
    }
  for (bool causal : {false, true}) {
    std::vector<uint16_t> qs, ks, vs, os(n * d, 0xffff);
    std::vector<float> lse(n, NAN);
    for (int e = 0; e < n * d; ++e) {
      qs.push_back(fa::float_to_f16(float(q[e])));
      ks.push_back(fa::float_to_f16(float(k[e])));
      vs.push_back(fa::float_to_f16(float(v[e])));
    }
    fa::AttnParams p;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seqlen_q = p.seqlen_k = n;
    p.head_dim = d;
    p.scale = static_cast<float>(fa::default_scale(d));
    p.causal = causal;
    p.q = qs.data();
    p.k = ks.data();
    p.v = vs.data();
    p.o = os.data();
    p.lse = lse.data();
    fa::set_contiguous_strides(p);
    try {
      fa::run_forward(fa::test::lesson_under_test(), p);
    } catch (const fa::NotImplemented& e) {
      FAIL(std::string(e.what()));
    }
    fa::Problem prob;
    prob.seqlen_q = prob.seqlen_k = n;
    prob.head_dim = d;
    prob.scale = p.scale;
    prob.causal = causal;
    const fa::ref::Forward want = fa::ref::forward(prob, {q, k, v});
    std::vector<double> got_o(n * d), got_lse(lse.begin(), lse.end());
    for (int e = 0; e < n * d; ++e) got_o[e] = fa::f16_to_float(os[e]);
    const fa::Tolerance to = fa::output_tolerance(fa::DType::kF16), tl = fa::lse_tolerance();
    const fa::CompareReport o = fa::compare("O", got_o, want.o, to, {n, d}, {"i", "d"});
    const fa::CompareReport l = fa::compare("LSE", got_lse, want.lse, tl, {n}, {"i"});
    // The wrong rows, each with the range of its logits: they are the rows beyond +-709.
    std::ostringstream rows;
    for (int i = 0; i < n; ++i) {
      bool wrong = !(std::fabs(got_lse[i] - want.lse[i]) <= tl.atol + tl.rtol * std::fabs(want.lse[i]));
      for (int c = 0; c < d; ++c)
        wrong = wrong || !(std::fabs(got_o[i * d + c] - want.o[i * d + c]) <= to.atol + to.rtol * std::fabs(want.o[i * d + c]));
      if (!wrong) continue;
      double lo = INFINITY, hi = -INFINITY;
      for (int j = 0; j <= (causal ? i : n - 1); ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
        lo = std::min(lo, s * p.scale);
        hi = std::max(hi, s * p.scale);
      }
      rows << "\n  row " << i << ": logits " << lo << " .. " << hi << ", LSE " << got_lse[i] << " (want " << want.lse[i]
           << "), O(" << i << ", 0) " << got_o[i * d] << " (want " << want.o[i * d] << ")";
    }
    CHECK_MESSAGE((o.ok && l.ok), std::string(causal ? "causal" : "non-causal"),
                  ": rows with logits beyond +-709 are wrong.", rows.str(), "\n  ", o.text, "\n  ", l.text,
                  "\n  hint [no-max-subtraction]: in fp64 exp(x) is inf above x = 709.78 and 0 below -745 (Eigen's "
                  "vectorised exp clamps x instead: just as wrong); subtract the row max m first: p_j = exp(S(i, j) - m), "
                  "lse(i) = m + log(l)");
  }
}
