// fp64 attention with Eigen. The per-(sequence, head) core works on dense matrices; dense and
// varlen batches, GQA, RoPE and the gate are only different ways of cutting those matrices out
// of the tensors and putting the results back.
#include "reference.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace fa::ref {
namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Where element (sequence b, head h, row s, column d) of a tensor lives.
struct Layout {
  const Problem& p;
  int heads;
  bool is_q;  // q-side (q, o, lse, dq) or k-side (k, v, dk, dv) lengths
  size_t at(int b, int h, int s, int d) const {
    if (p.varlen()) {
      const int t = (is_q ? p.cu_seqlens_q : p.cu_seqlens_k)[b] + s;
      return (size_t(t) * heads + h) * p.head_dim + d;
    }
    return ((size_t(b) * heads + h) * (is_q ? p.seqlen_q : p.seqlen_k) + s) * p.head_dim + d;
  }
};

Mat gather(const std::vector<double>& t, const Layout& L, int b, int h, int rows) {
  Mat m(rows, L.p.head_dim);
  for (int s = 0; s < rows; ++s)
    for (int d = 0; d < L.p.head_dim; ++d) m(s, d) = t[L.at(b, h, s, d)];
  return m;
}

void scatter_add(std::vector<double>& t, const Layout& L, int b, int h, const Mat& m) {
  for (int s = 0; s < m.rows(); ++s)
    for (int d = 0; d < L.p.head_dim; ++d) t[L.at(b, h, s, d)] += m(s, d);
}

// g and lse are (batch, heads_q, seqlen) dense, (heads_q, total) varlen.
size_t vec_at(const Problem& p, bool is_q, int b, int h, int s) {
  if (p.varlen()) return size_t(h) * (is_q ? p.total_q() : p.total_k()) + (is_q ? p.cu_seqlens_q : p.cu_seqlens_k)[b] + s;
  const int len = is_q ? p.seqlen_q : p.seqlen_k;
  return (size_t(b) * p.heads_q + h) * len + s;
}

void rotate_rows(Mat& x, const std::vector<int>& pos, double base, bool inverse) {
  std::vector<double> flat(x.data(), x.data() + x.size());
  rope_rotate(flat, static_cast<int>(x.rows()), static_cast<int>(x.cols()), pos, base, inverse);
  x = Eigen::Map<Mat>(flat.data(), x.rows(), x.cols());
}

// One (sequence, head): everything needed for the forward and the backward.
struct Head {
  int lq = 0, lk = 0;
  Mat q, k, v;      // q and k rotated when RoPE is on
  Vec gk;           // G at key positions (cumsum of g), when gated
  std::vector<int> qpos, kpos;

  // Logits of query rows `rows` (indices into 0..lq-1) against all keys, masked entries -inf.
  Mat logits(const Problem& p, const std::vector<int>& rows) const {
    Mat s(rows.size(), lk);
    const double scale = p.softmax_scale();
    for (size_t r = 0; r < rows.size(); ++r) {
      const int i = rows[r];
      for (int j = 0; j < lk; ++j) {
        if (p.causal && !visible(i, j, lq, lk)) {
          s(r, j) = -kInf;
          continue;
        }
        double x = scale * q.row(i).dot(k.row(j));
        if (p.gate) x += gk(i + lk - lq) - gk(j);
        s(r, j) = x;
      }
    }
    return s;
  }
};

Head load_head(const Problem& p, const Inputs& in, int b, int hq) {
  Head h;
  h.lq = p.len_q(b);
  h.lk = p.len_k(b);
  const int hk = hq / (p.heads_q / p.heads_kv);
  const Layout lq{p, p.heads_q, true}, lk{p, p.heads_kv, false};
  h.q = gather(in.q, lq, b, hq, h.lq);
  h.k = gather(in.k, lk, b, hk, h.lk);
  h.v = gather(in.v, lk, b, hk, h.lk);
  for (int i = 0; i < h.lq; ++i) h.qpos.push_back(i + h.lk - h.lq);
  for (int j = 0; j < h.lk; ++j) h.kpos.push_back(j);
  if (p.rope_base > 0) {
    rotate_rows(h.q, h.qpos, p.rope_base, false);
    rotate_rows(h.k, h.kpos, p.rope_base, false);
  }
  if (p.gate) {
    h.gk.resize(h.lk);
    double acc = 0;
    for (int j = 0; j < h.lk; ++j) h.gk(j) = (acc += in.g[vec_at(p, false, b, hq, j)]);
  }
  return h;
}

// Softmax of each logit row: P (rows x lk) and LSE; a row with no visible key gets P = 0 and +inf.
void softmax_rows(const Mat& s, Mat& prob, Vec& lse) {
  prob.resize(s.rows(), s.cols());
  lse.resize(s.rows());
  for (int r = 0; r < s.rows(); ++r) {
    const double m = s.cols() > 0 ? s.row(r).maxCoeff() : -kInf;
    if (m == -kInf) {
      prob.row(r).setZero();
      lse(r) = kInf;
      continue;
    }
    prob.row(r) = (s.row(r).array() - m).exp().matrix();
    const double l = prob.row(r).sum();
    prob.row(r) /= l;
    lse(r) = m + std::log(l);
  }
}

std::vector<int> all_rows(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

}  // namespace

Forward forward(const Problem& p, const Inputs& in, const std::vector<int>* rows) {
  p.check();
  if (rows != nullptr && p.varlen()) throw std::invalid_argument("reference: sampled rows are for dense problems");
  const int nrows = rows ? static_cast<int>(rows->size()) : 0;
  Forward out;
  out.o.assign(rows ? size_t(p.batch) * p.heads_q * nrows * p.head_dim : size_t(p.total_q()) * p.heads_q * p.head_dim, 0.0);
  out.lse.assign(rows ? size_t(p.batch) * p.heads_q * nrows : size_t(p.total_q()) * p.heads_q, 0.0);
  for (int b = 0; b < p.sequences(); ++b) {
    for (int hq = 0; hq < p.heads_q; ++hq) {
      const Head h = load_head(p, in, b, hq);
      const std::vector<int> which = rows ? *rows : all_rows(h.lq);
      for (int i : which)
        if (i < 0 || i >= h.lq) throw std::invalid_argument("reference: sampled row out of range");
      Mat prob;
      Vec lse;
      softmax_rows(h.logits(p, which), prob, lse);
      const Mat o = prob * h.v;
      for (size_t r = 0; r < which.size(); ++r) {
        const int s = rows ? static_cast<int>(r) : which[r];
        if (rows) {
          for (int d = 0; d < p.head_dim; ++d) out.o[((size_t(b) * p.heads_q + hq) * nrows + s) * p.head_dim + d] = o(r, d);
          out.lse[(size_t(b) * p.heads_q + hq) * nrows + s] = lse(r);
        } else {
          const Layout L{p, p.heads_q, true};
          for (int d = 0; d < p.head_dim; ++d) out.o[L.at(b, hq, s, d)] = o(r, d);
          out.lse[vec_at(p, true, b, hq, s)] = lse(r);
        }
      }
    }
  }
  return out;
}

Gradients backward(const Problem& p, const Inputs& in, const std::vector<double>& dout) {
  p.check();
  Gradients g;
  g.dq.assign(in.q.size(), 0.0);
  g.dk.assign(in.k.size(), 0.0);
  g.dv.assign(in.v.size(), 0.0);
  if (p.gate) g.dg.assign(in.g.size(), 0.0);
  const double scale = p.softmax_scale();
  const Layout lq{p, p.heads_q, true}, lk{p, p.heads_kv, false};
  for (int b = 0; b < p.sequences(); ++b) {
    for (int hq = 0; hq < p.heads_q; ++hq) {
      const int hk = hq / (p.heads_q / p.heads_kv);
      const Head h = load_head(p, in, b, hq);
      Mat prob;
      Vec lse;
      softmax_rows(h.logits(p, all_rows(h.lq)), prob, lse);
      const Mat o = prob * h.v;
      const Mat dO = gather(dout, lq, b, hq, h.lq);
      const Vec delta = (dO.array() * o.array()).rowwise().sum();  // D_i = rowsum(dO * O)
      const Mat dP = dO * h.v.transpose();
      const Mat dS = (prob.array() * (dP.colwise() - delta).array()).matrix();  // d L / d logits
      Mat dQ = scale * dS * h.k;
      Mat dK = scale * dS.transpose() * h.q;
      const Mat dV = prob.transpose() * dO;
      if (p.rope_base > 0) {  // the rotation is orthogonal: its gradient is the inverse rotation
        rotate_rows(dQ, h.qpos, p.rope_base, true);
        rotate_rows(dK, h.kpos, p.rope_base, true);
      }
      scatter_add(g.dq, lq, b, hq, dQ);
      scatter_add(g.dk, lk, b, hk, dK);
      scatter_add(g.dv, lk, b, hk, dV);
      if (p.gate) {
        // logit_ij += G(i + lk - lq) - G(j): dG at a position collects +rowsum from the query there
        // and -colsum from the key there; G = cumsum(g) so dg_t = sum over positions >= t of dG.
        Vec dG = -dS.colwise().sum().transpose();
        const Vec rs = dS.rowwise().sum();
        for (int i = 0; i < h.lq; ++i)
          if (i + h.lk - h.lq >= 0) dG(i + h.lk - h.lq) += rs(i);
        double acc = 0;
        for (int t = h.lk - 1; t >= 0; --t) g.dg[vec_at(p, false, b, hq, t)] = (acc += dG(t));
      }
    }
  }
  return g;
}

SampledGradients backward_rows(const Problem& p, const Inputs& in, const std::vector<double>& dout,
                               const std::vector<double>& o, const std::vector<double>& lse,
                               const std::vector<int>& q_rows, const std::vector<int>& k_rows, int dg_last) {
  p.check();
  if (p.varlen() || p.batch != 1 || p.heads_q != 1 || p.heads_kv != 1 || p.rope_base > 0)
    throw std::invalid_argument("reference: backward_rows takes one dense head without RoPE");
  const int lq = p.seqlen_q, lk = p.seqlen_k, D = p.head_dim;
  if (p.gate && in.g.size() != size_t(lk)) throw std::invalid_argument("reference: backward_rows needs the head's g (seqlen_k values)");
  if (dg_last < 0 || dg_last > lk || (dg_last > 0 && !p.gate))
    throw std::invalid_argument("reference: dg_last must be in [0, seqlen_k], and needs the gate");
  const double scale = p.softmax_scale();
  auto mat = [&](const std::vector<double>& t, int rows) { return Eigen::Map<const Mat>(t.data(), rows, D); };
  const auto q = mat(in.q, lq), k = mat(in.k, lk), v = mat(in.v, lk), dO = mat(dout, lq), O = mat(o, lq);
  const Vec delta = (dO.array() * O.array()).rowwise().sum();
  const Vec delta_terms = (dO.array() * O.array()).abs().rowwise().sum();
  Vec G = Vec::Zero(lk);  // the gate's G = cumsum(g), as load_head computes it
  if (p.gate) {
    double acc = 0;
    for (int j = 0; j < lk; ++j) G(j) = (acc += in.g[j]);
  }
  // dS_ij = P_ij (dO_i . v_j - D_i), with P from the saved LSE (0 when masked or LSE = +inf); and
  // in *cancel, P_ij times the sizes of the two dot products' terms.
  auto ds = [&](int i, int j, double* prob, double* cancel = nullptr) {
    *prob = 0;
    if (cancel != nullptr) *cancel = 0;
    if ((p.causal && !visible(i, j, lq, lk)) || std::isinf(lse[i])) return 0.0;
    double s = scale * q.row(i).dot(k.row(j));
    if (p.gate) s += G(i + lk - lq) - G(j);  // visible under the causal mask: i + lk - lq >= j >= 0
    *prob = std::exp(s - lse[i]);
    if (cancel != nullptr) *cancel = *prob * ((dO.row(i).array() * v.row(j).array()).abs().sum() + delta_terms(i));
    return *prob * (dO.row(i).dot(v.row(j)) - delta(i));
  };
  SampledGradients g;
  for (int i : q_rows) {
    Vec acc = Vec::Zero(D), cq = Vec::Zero(D);
    double prob, cancel;
    for (int j = 0; j < lk; ++j) {
      acc += ds(i, j, &prob, &cancel) * k.row(j).transpose();
      cq += cancel * k.row(j).transpose().cwiseAbs();
    }
    for (int d = 0; d < D; ++d) g.dq.push_back(scale * acc(d));
    for (int d = 0; d < D; ++d) g.dq_cancel.push_back(scale * cq(d));
  }
  for (int j : k_rows) {
    Vec ak = Vec::Zero(D), av = Vec::Zero(D), ck = Vec::Zero(D);
    for (int i = 0; i < lq; ++i) {
      double prob, cancel;
      const double s = ds(i, j, &prob, &cancel);
      ak += s * q.row(i).transpose();
      av += prob * dO.row(i).transpose();
      ck += cancel * q.row(i).transpose().cwiseAbs();
    }
    for (int d = 0; d < D; ++d) g.dk.push_back(scale * ak(d));
    for (int d = 0; d < D; ++d) g.dv.push_back(av(d));
    for (int d = 0; d < D; ++d) g.dk_cancel.push_back(scale * ck(d));
  }
  if (dg_last > 0) {
    // dG_t = rowsum(dS of the query at key position t) - colsum(dS of key t), dg_t = sum of dG_t'
    // over t' >= t (backward). Positions t >= t0 = lk - dg_last involve the query rows at
    // positions >= t0 only: rows i >= t0 - (lk - lq) (a key column j >= t0 is visible to those alone).
    const int t0 = lk - dg_last, i0 = std::max(0, t0 - (lk - lq));
    Vec rows = Vec::Zero(lq), rows_terms = Vec::Zero(lq), cols = Vec::Zero(lk), cols_terms = Vec::Zero(lk);
    for (int i = i0; i < lq; ++i)
      for (int j = 0; j < lk; ++j) {
        double prob;
        const double s = ds(i, j, &prob);
        rows(i) += s;
        rows_terms(i) += std::fabs(s);
        if (j >= t0) {
          cols(j) += s;
          cols_terms(j) += std::fabs(s);
        }
      }
    g.dg.resize(dg_last);
    g.dg_terms.resize(dg_last);
    double acc = 0, terms = 0;
    for (int t = lk - 1; t >= t0; --t) {
      const int i = t - (lk - lq);  // the query at key position t, if any
      acc += (i >= 0 && i < lq ? rows(i) : 0.0) - cols(t);
      terms += (i >= 0 && i < lq ? rows_terms(i) : 0.0) + cols_terms(t);
      g.dg[t - t0] = acc;
      g.dg_terms[t - t0] = terms;
    }
  }
  return g;
}

RopeTables rope_tables(int positions, int head_dim, double base) {
  RopeTables t;
  t.positions = positions;
  t.half = head_dim / 2;
  t.cos.resize(size_t(positions) * t.half);
  t.sin.resize(size_t(positions) * t.half);
  for (int pos = 0; pos < positions; ++pos)
    for (int i = 0; i < t.half; ++i) {
      const double angle = pos * std::pow(base, -2.0 * i / head_dim);
      t.cos[size_t(pos) * t.half + i] = std::cos(angle);
      t.sin[size_t(pos) * t.half + i] = std::sin(angle);
    }
  return t;
}

void rope_rotate(std::vector<double>& x, int n, int head_dim, const std::vector<int>& positions, double base,
                 bool inverse) {
  const int half = head_dim / 2;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < half; ++i) {
      const double angle = (inverse ? -1.0 : 1.0) * positions[r] * std::pow(base, -2.0 * i / head_dim);
      const double c = std::cos(angle), s = std::sin(angle);
      double& x1 = x[size_t(r) * head_dim + i];
      double& x2 = x[size_t(r) * head_dim + i + half];
      const double a = x1, b = x2;
      x1 = a * c - b * s;
      x2 = b * c + a * s;
    }
}

double visible_pairs(const Problem& p) {
  double pairs = 0;
  for (int b = 0; b < p.sequences(); ++b) {
    const int lq = p.len_q(b), lk = p.len_k(b);
    for (int i = 0; i < lq; ++i) pairs += p.causal ? std::clamp(i + lk - lq + 1, 0, lk) : lk;
  }
  return pairs * p.heads_q;
}

}  // namespace fa::ref
