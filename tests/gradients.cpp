// The backward's verdicts: the gradients against the fp64 reference three ways (check_gradient),
// with the naive same-precision computation FlashAttention-2's rule compares with, and determinism.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "fa/compare.hpp"
#include "fa/half.hpp"
#include "fa/random.hpp"
#include "hints.hpp"
#include "run.hpp"

namespace fa::test {
namespace {

float round_as(DType t, float x) { return static_cast<float>(from_storage(t, to_storage(t, x))); }

// The naive same-precision computation of FlashAttention-2's rule: standard attention as a
// framework computes it in fp16/bf16 (fp32 accumulation, every materialised matrix rounded to the
// storage type): S, P, O, dP, dS and the gradients. Its error against the fp64 reference is what
// 16-bit storage costs anyway; a kernel may be a small multiple of it, not more. One (sequence,
// head) at a time, dense or varlen. With the gate, G is an fp32 cumsum of g and the logits are
// round(fp32(scale q.k) + fp32(G_i - G_j)); dG_t = rowsum(dS of the query at t) - colsum(dS of key
// t) and dg = the reverse cumsum of dG, in fp32 (reference/reference.cpp derives them).
// Alongside, `mag`: for every gradient element the sum of the sizes of its terms, the scale of its
// rounding error (runtime/compare.cpp): with A_ij = P_ij (sum_d |dO_id| |v_jd| + sum_d |dO_id| |O_id|)
// the size of dS_ij's terms, mag(dQ) = scale A |K|, mag(dK) = scale A^T |Q|, mag(dV) = P^T |dO|,
// mag(dG_t) = sum_i A_it (+ sum_j A_ij of the query i at t), mag(dg_t) = sum_{t' >= t} mag(dG_t').
// A visible P_ij counts as at least nu, the storage type's smallest normal number: below it fp16
// rounds with an absolute error of half a subnormal step (2^-25), not a relative one, and the
// kernels' exp2 flushes fp32 values below 2^-126 to 0 (ftz): a P below nu is all error, and
// counts as nu / (4u) in mag (the tolerance is 4u mag).
struct Naive {
  ref::Gradients g, mag;
};
Naive naive_gradients(const Case& c, const ref::Inputs& in, const std::vector<double>& dout) {
  const Problem prob = c.reference_problem();
  const Layout qside{prob, true}, kside{prob, false};
  const int D = c.head_dim, group = c.heads_q / c.heads_kv;
  const float scale = static_cast<float>(default_scale(D));
  const DType t = c.dtype;
  std::vector<float> dq(in.q.size()), dk(in.k.size(), 0.f), dv(in.v.size(), 0.f), dg(in.g.size());
  std::vector<double> mq(in.q.size()), mk(in.k.size(), 0.0), mv(in.v.size(), 0.0), mg(in.g.size());
  std::vector<float> P(size_t(c.seqlen_q) * c.seqlen_k), dS(size_t(c.seqlen_q) * c.seqlen_k), O(size_t(c.seqlen_q) * D),
      dP(c.seqlen_k), G;
  std::vector<double> A(size_t(c.seqlen_q) * c.seqlen_k), Pm(size_t(c.seqlen_q) * c.seqlen_k);
  std::vector<float> acc_d(D), ak(D), av(D);  // one row's sums, per d
  std::vector<double> mag_d(D), mk1(D), mv1(D);
  const double nu = t == DType::kF16 ? 0x1p-14 : 0x1p-126;
  for (int b = 0; b < prob.sequences(); ++b)
    for (int h = 0; h < c.heads_q; ++h) {
      const int hk = h / group, lq = prob.len_q(b), lk = prob.len_k(b);
      const std::vector<double> qrows = head_rows(in.q, qside, b, h, lq), dorows = head_rows(dout, qside, b, h, lq),
                                krows = head_rows(in.k, kside, b, hk, lk), vrows = head_rows(in.v, kside, b, hk, lk);
      const double *q = qrows.data(), *dO = dorows.data(), *k = krows.data(), *v = vrows.data();
      if (c.gate) {  // G = cumsum(g) in fp32
        G.assign(lk, 0.f);
        float acc = 0.f;
        for (int j = 0; j < lk; ++j) G[j] = acc += static_cast<float>(in.g[vec_at(prob, false, b, h, j)]);
      }
      for (int i = 0; i < lq; ++i) {
        float* p = &P[size_t(i) * lk];
        float mx = -INFINITY;
        for (int j = 0; j < lk; ++j) {
          if (c.causal && !ref::visible(i, j, lq, lk)) { p[j] = -INFINITY; continue; }
          float acc = 0.f;
          for (int d = 0; d < D; ++d) acc += float(q[size_t(i) * D + d]) * float(k[size_t(j) * D + d]);
          float s = acc * scale;
          if (c.gate) s += G[i + lk - lq] - G[j];  // visible (the gate is causal): i + lk - lq >= j >= 0
          p[j] = round_as(t, s);
          mx = std::max(mx, p[j]);
        }
        float sum = 0.f;
        for (int j = 0; j < lk; ++j) sum += (p[j] = mx == -INFINITY ? 0.f : std::exp(p[j] - mx));
        for (int j = 0; j < lk; ++j) p[j] = sum > 0.f ? round_as(t, p[j] / sum) : 0.f;
        // O_i = P_i V in fp32, each element summed over j in order (the loops run j outside, d inside,
        // along V's rows, and give the same sums).
        std::fill(acc_d.begin(), acc_d.end(), 0.f);
        for (int j = 0; j < lk; ++j) {
          const float pj = p[j];
          const double* vj = v + size_t(j) * D;
          for (int d = 0; d < D; ++d) acc_d[d] += pj * float(vj[d]);
        }
        double od = 0;  // sum_d |dO_id| |O_id|
        for (int d = 0; d < D; ++d) {
          O[size_t(i) * D + d] = round_as(t, acc_d[d]);
          od += std::fabs(dO[size_t(i) * D + d] * acc_d[d]);
        }
        // dP = dO V^T (rounded), then the softmax backward in fp32: dS = P (dP - sum_j P dP).
        float dot = 0.f;
        for (int j = 0; j < lk; ++j) {
          float acc = 0.f;
          double mag = 0;
          for (int d = 0; d < D; ++d) {
            acc += float(dO[size_t(i) * D + d]) * float(v[size_t(j) * D + d]);
            mag += std::fabs(dO[size_t(i) * D + d] * v[size_t(j) * D + d]);
          }
          dP[j] = round_as(t, acc);
          dot += p[j] * dP[j];
          const bool seen = !c.causal || ref::visible(i, j, lq, lk);
          // A P below nu may be flushed to 0 by the kernels' exp2 (ftz): its whole term is then
          // the error, so it enters mag at nu / (4u), which the tolerance 4u mag turns back
          // into nu times the term's other factors.
          const double pm = p[j] >= nu ? double(p[j]) : nu / (4 * gradient_unit(t));
          A[size_t(i) * lk + j] = seen ? std::max(nu, pm * (mag + od)) : 0.0;
          Pm[size_t(i) * lk + j] = seen ? pm : 0.0;
        }
        for (int j = 0; j < lk; ++j) dS[size_t(i) * lk + j] = round_as(t, p[j] * (dP[j] - dot));
      }
      // dQ = dS K and dK = dS^T Q, dV = P^T dO: every element summed in order (over j for dQ, over i
      // for dK and dV), with the loops along the rows of K, Q and dO (d inside), which gives the same
      // sums as one element at a time and is many times faster at 2048 tokens.
      for (int i = 0; i < lq; ++i) {
        std::fill(acc_d.begin(), acc_d.end(), 0.f);
        std::fill(mag_d.begin(), mag_d.end(), 0.0);
        for (int j = 0; j < lk; ++j) {
          const float ds = dS[size_t(i) * lk + j];
          const double a = A[size_t(i) * lk + j];
          const double* kj = k + size_t(j) * D;
          for (int d = 0; d < D; ++d) {
            acc_d[d] += ds * float(kj[d]);
            mag_d[d] += a * std::fabs(kj[d]);
          }
        }
        for (int d = 0; d < D; ++d) {
          dq[qside.at(b, h, i, d)] = round_as(t, round_as(t, acc_d[d]) * scale);
          mq[qside.at(b, h, i, d)] = scale * mag_d[d];
        }
      }
      for (int j = 0; j < lk; ++j) {
        std::fill(ak.begin(), ak.end(), 0.f);
        std::fill(av.begin(), av.end(), 0.f);
        std::fill(mk1.begin(), mk1.end(), 0.0);
        std::fill(mv1.begin(), mv1.end(), 0.0);
        for (int i = 0; i < lq; ++i) {
          const float ds = dS[size_t(i) * lk + j], pij = P[size_t(i) * lk + j];
          const double a = A[size_t(i) * lk + j], pm = Pm[size_t(i) * lk + j];
          const double *qi = q + size_t(i) * D, *doi = dO + size_t(i) * D;
          for (int d = 0; d < D; ++d) {
            ak[d] += ds * float(qi[d]);
            av[d] += pij * float(doi[d]);
            mk1[d] += a * std::fabs(qi[d]);
            mv1[d] += pm * std::fabs(doi[d]);
          }
        }
        for (int d = 0; d < D; ++d) {
          dk[kside.at(b, hk, j, d)] += round_as(t, round_as(t, ak[d]) * scale);  // GQA: the heads' sum, in fp32
          dv[kside.at(b, hk, j, d)] += round_as(t, av[d]);
          mk[kside.at(b, hk, j, d)] += scale * mk1[d];
          mv[kside.at(b, hk, j, d)] += mv1[d];
        }
      }
      if (c.gate) {
        std::vector<float> rows(lq, 0.f), cols(lk, 0.f);
        std::vector<double> arows(lq, 0.0), acols(lk, 0.0);
        for (int i = 0; i < lq; ++i)
          for (int j = 0; j < lk; ++j) {
            rows[i] += dS[size_t(i) * lk + j];
            cols[j] += dS[size_t(i) * lk + j];
            arows[i] += A[size_t(i) * lk + j];
            acols[j] += A[size_t(i) * lk + j];
          }
        float acc = 0.f;
        double mag = 0;
        for (int pos = lk - 1; pos >= 0; --pos) {  // the query at key position pos, if any, is row pos - (lk - lq)
          const int i = pos - (lk - lq);
          acc += (i >= 0 ? rows[i] : 0.f) - cols[pos];
          mag += acols[pos] + (i >= 0 ? arows[i] : 0.0);
          dg[vec_at(prob, false, b, h, pos)] = acc;
          mg[vec_at(prob, false, b, h, pos)] = mag;
        }
      }
    }
  Naive n;
  n.g.dq.assign(dq.begin(), dq.end());
  for (float x : dk) n.g.dk.push_back(round_as(t, x));
  for (float x : dv) n.g.dv.push_back(round_as(t, x));
  n.g.dg.assign(dg.begin(), dg.end());
  n.mag.dq = std::move(mq);
  n.mag.dk = std::move(mk);
  n.mag.dv = std::move(mv);
  n.mag.dg = std::move(mg);
  return n;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::isnan(a[i]) ? INFINITY : std::fabs(a[i] - b[i]));
  return m;
}

// The three checks of one gradient tensor. Elementwise against the sizes `mag` of its terms
// (Naive): |got - ref| <= 4u mag_e + 2u |ref_e| (+ 2^-25 in fp16: half a subnormal step of the
// output's rounding). The whole tensor's relative error ||got - ref|| / ||ref|| at most 4u, or
// twice the naive 16-bit computation's where cancellation makes that one larger. FlashAttention-2's
// rule: max error <= 3x the naive computation's (+ 2^-20 max mag: fp32 noise where the naive one
// happens to be exact). Every failure says MISMATCH (maintainers/run_mutant.sh counts only numerical
// rejections).
// dg is fp32, but its error comes from the 16-bit inputs and O like the others': the same u.
bool check_gradient(const Case& c, const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                    const std::vector<double>& naive, const std::vector<double>& mag, const Shape& shape, std::string& text) {
  const double u = gradient_unit(c.dtype);
  const std::vector<double> atol = terms_atol(c.dtype, mag);
  const CompareReport r = compare(what, got, want, gradient_terms_tolerance(c.dtype), shape.dims, shape.names, &atol);
  double err2 = 0, nerr2 = 0, ref2 = 0, mag2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::isnan(got[i]) ? INFINITY : got[i] - want[i];
    err2 += e * e;
    nerr2 += (naive[i] - want[i]) * (naive[i] - want[i]);
    ref2 += want[i] * want[i];
    mag2 += mag[i] * mag[i];
  }
  const double err_norm = std::sqrt(err2), norm_bound = std::max(4 * u * std::sqrt(ref2), 2 * std::sqrt(nerr2)) + 0x1p-20 * std::sqrt(mag2);
  const bool norm_ok = err_norm <= norm_bound;
  const double err = max_abs_diff(got, want), naive_err = max_abs_diff(naive, want);
  const double allowed = kNaiveErrorFactor * naive_err + 0x1p-20 * max_abs(mag);
  std::ostringstream os;
  os.precision(4);
  os << "\n  " << r.text << "\n  " << what << (norm_ok ? " relative error " : " MISMATCH: relative error ");
  if (ref2 > 0)
    os << err_norm / std::sqrt(ref2) << (norm_ok ? " <= " : " > ") << norm_bound / std::sqrt(ref2)
       << " (||got - ref|| / ||ref||; bound: 4u, or 2x the naive computation's " << std::sqrt(nerr2 / ref2) << ")";
  else
    os << "(ref is 0): ||got|| " << err_norm << (norm_ok ? " <= " : " > ") << norm_bound;
  os << "\n  " << what << (err <= allowed ? " max error " : " MISMATCH: max error ") << err << (err <= allowed ? " <= " : " > ")
     << kNaiveErrorFactor << " x the naive " << name(c.dtype) << " computation's " << naive_err << " (FlashAttention-2's rule)";
  const bool ok = r.ok && norm_ok && err <= allowed;
  text += os.str();
  return ok;
}

}  // namespace

Outcome check_backward(const LessonInfo& lesson, const Case& c, bool deterministic) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    const BackwardInputs bi(c, in);
    Run r = prepare_backward(lesson, c, in, bi);
    r.p.deterministic = deterministic;
    execute(lesson, r, Direction::kBackward);
    const std::string changed = changed_input(c, r, in);
    if (!changed.empty()) return fail(c, "the lesson modified its input " + changed);
    const ref::Gradients want = ref::backward(c.reference_problem(), in.values, bi.dout_values);
    const Naive naive = naive_gradients(c, in.values, bi.dout_values);
    std::string text = c.describe() + (deterministic ? " deterministic mode" : "");
    const Shape sq = tensor_shape(c, true), sk = tensor_shape(c, false);
    ref::Gradients got;
    got.dq = read_values(c, r.dq, true);
    got.dk = read_values(c, r.dk, false);
    got.dv = read_values(c, r.dv, false);
    std::string brief;
    auto one = [&](const char* what, const std::vector<double>& g, const std::vector<double>& w, const std::vector<double>& nv,
                   const std::vector<double>& mag, const Shape& shape) {
      const bool fine = check_gradient(c, what, g, w, nv, mag, shape, text);
      if (!fine) brief += std::string(brief.empty() ? "" : ", ") + what;
      return fine;
    };
    const bool ok_dq = one("dQ", got.dq, want.dq, naive.g.dq, naive.mag.dq, sq);
    const bool ok_dk = one("dK", got.dk, want.dk, naive.g.dk, naive.mag.dk, sk);
    const bool ok_dv = one("dV", got.dv, want.dv, naive.g.dv, naive.mag.dv, sk);
    bool ok_dg = true;
    if (c.gate) {
      const std::vector<float> dg = r.dgate.to_host<float>();
      got.dg.assign(dg.begin(), dg.end());
      ok_dg = one("dg", got.dg, want.dg, naive.g.dg, naive.mag.dg, vector_shape(c, false));
    }
    const bool ok = ok_dq && ok_dk && ok_dv && ok_dg;
    if (!ok && hints_wanted()) {
      std::vector<double> o_values(bi.o.size());
      for (size_t e = 0; e < bi.o.size(); ++e) o_values[e] = from_storage(c.dtype, bi.o[e]);
      text += format_hints(backward_hints({c, in.values, bi.dout_values, o_values, bi.lse, got, want, naive.mag, !ok_dq, !ok_dk,
                                           !ok_dv, !ok_dg}));
    }
    return Outcome{ok, false, text, 0, c.describe() + (deterministic ? " deterministic mode" : "") + ": MISMATCH in " + brief};
  });
}

Outcome check_backward_deterministic(const LessonInfo& lesson, const Case& c) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare_backward(lesson, c, in, BackwardInputs(c, in));
    r.p.deterministic = true;
    std::vector<std::vector<uint8_t>> first;
    std::string names;
    for (int run = 0; run < 3; ++run) {
      execute(lesson, r, Direction::kBackward);
      const std::vector<Buffer*> written = outputs(r, Direction::kBackward);
      for (size_t t = 0; t < written.size(); ++t) {
        const std::vector<uint8_t> now = written[t]->to_host<uint8_t>();
        if (run == 0) {
          first.push_back(now);
          names += (t ? ", " : "") + written[t]->name();
        } else if (now != first[t]) {
          return fail(c, "MISMATCH: deterministic mode, yet run " + std::to_string(run + 1) + " differs bitwise from run 1 in " +
                             written[t]->name());
        }
      }
    }
    return {true, false, c.describe() + " deterministic mode: " + names + " bitwise identical across three runs"};
  });
}

}  // namespace fa::test
