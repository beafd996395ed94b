#include "hints.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "layout.hpp"

namespace fa::test {

std::string format_hints(const std::vector<Hint>& hints) {
  std::string text;
  for (const Hint& h : hints) text += "\n  hint [" + h.id + "]: " + h.text;
  return text;
}

namespace {

constexpr double kLog2e = 1.4426950408889634;

// ---- Forward ---------------------------------------------------------------------------------
// The wrong rows are compared with alternative computations, each the result of one classic bug
// (a "what-if"): a hint is given when every wrong row matches it within the suite's tolerance,
// and it differs from the right answer on at least one of them. What matches is computed in fp64
// from the same rounded inputs as the reference, one row at a time.

struct RowId {
  int b, h, i;
};

// The rows of O and the LSE, in the LSE's order (ForwardRun).
std::vector<RowId> row_ids(const Case& c, const Problem& p) {
  std::vector<RowId> rows;
  if (c.varlen()) {
    for (int h = 0; h < c.heads_q; ++h)
      for (int b = 0; b < p.sequences(); ++b)
        for (int i = 0; i < p.len_q(b); ++i) rows.push_back({b, h, i});
  } else {
    for (int b = 0; b < c.batch; ++b)
      for (int h = 0; h < c.heads_q; ++h) {
        if (c.sample_rows.empty())
          for (int i = 0; i < c.seqlen_q; ++i) rows.push_back({b, h, i});
        else
          for (int i : c.sample_rows) rows.push_back({b, h, i});
      }
  }
  return rows;
}

struct RowOut {
  std::vector<double> o;
  double lse = INFINITY;
};

bool within(double got, double want, const Tolerance& t) {
  if (std::isnan(got)) return false;
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::fabs(got - want) <= t.atol + t.rtol * std::fabs(want);
}

bool row_close(const double* o, double lse, const RowOut& w, const Tolerance& ot, const Tolerance& lt, bool with_lse) {
  for (size_t x = 0; x < w.o.size(); ++x)
    if (!within(o[x], w.o[x], ot)) return false;
  return !with_lse || within(lse, w.lse, lt);
}

enum class Kind {
  kTruth,
  kEnd,            // row i sees keys [0, end(i)) instead of the right ones
  kZeroKeys,       // non-causal: keys past seqlen_k, zero vectors, up to a multiple of t
  kScale,          // the scores times x
  kNotRescaled,    // the accumulator not rescaled when the running max grows (key tiles of t)
  kKFromHead,      // K (only) of another head: t = 0 head 0 of the batch
  kKVFromHead,     // K and V of another head: t = 0 head 0 of the batch, 1 batch 0, 2 head h % heads_kv
  kPrevSequence,   // varlen: keys, values and gate read from where the previous sequence starts
  kGateFlipped,    // s_ij += G_j - G_i
  kRopeQueryAtI,   // RoPE: query i at position i
  kRopeKUnrotated, // RoPE: K not rotated
  kRopeKTileRow,   // RoPE: key j at position j % t
  kNotDivided,     // O left as sum_j exp(s_j - m) v_j: never divided by l
};

struct Hypothesis {
  Kind kind;
  std::string id, text;
  int t = 0;
  double x = 1;
  std::function<int(int i, int lq, int lk)> end;  // kEnd
  bool lse = true;                                // must the LSE match too?
  // May the bug touch some rows only (a loop that stops early for the last row of a block)? Any
  // other hypothesis must also leave the right rows right where it changes them.
  bool partial = false;
};

struct Ctx {
  const ForwardRun& r;
  Problem p;
  int d;
};

int right_end(const Case& c, int i, int lq, int lk) { return c.causal ? std::clamp(i + lk - lq + 1, 0, lk) : lk; }

// The keys, values and G (the gate's cumsum) head (b, h) reads under a hypothesis; n of them
// (more than len_k with zero keys). False when the hypothesis reads outside the tensors.
struct HeadKeys {
  std::vector<double> k, v, G;
  int n = 0;
};

bool head_keys(const Ctx& x, const Hypothesis& hy, int b, int h, HeadKeys& out) {
  const Problem& p = x.p;
  const int d = x.d, group = p.heads_q / p.heads_kv, lk = p.len_k(b);
  int bk = b, hk = h / group;
  if ((hy.kind == Kind::kKFromHead || hy.kind == Kind::kKVFromHead) && hy.t == 0) hk = 0;
  if (hy.kind == Kind::kKVFromHead && hy.t == 1) bk = 0;
  if (hy.kind == Kind::kKVFromHead && hy.t == 2) hk = h % p.heads_kv;
  const bool rope_k = hy.kind == Kind::kRopeKUnrotated || hy.kind == Kind::kRopeKTileRow;
  const ref::Inputs& src = rope_k ? x.r.values : x.r.rotated;
  // Token index of key row s of this head's sequence (varlen: absolute; dense: within batch bk).
  int start = p.varlen() ? p.cu_seqlens_k[b] : 0;
  if (hy.kind == Kind::kPrevSequence && b > 0) {  // the first sequence reads its own
    start = p.cu_seqlens_k[b - 1];
    if (start + lk > p.total_k()) return false;
  }
  auto k_index = [&](int batch, int head, int s, int col) -> size_t {
    if (p.varlen()) return (size_t(start + s) * p.heads_kv + head) * d + col;
    return at(batch, head, s, col, p.heads_kv, p.seqlen_k, d);
  };
  const int n = hy.kind == Kind::kZeroKeys ? (lk + hy.t - 1) / hy.t * hy.t : lk;
  out.n = n;
  out.k.assign(size_t(n) * d, 0.0);
  out.v.assign(size_t(n) * d, 0.0);
  const int k_batch = hy.kind == Kind::kKFromHead ? b : bk, k_head = hk;
  const int v_batch = hy.kind == Kind::kKFromHead ? b : bk, v_head = hy.kind == Kind::kKFromHead ? h / group : hk;
  for (int s = 0; s < lk; ++s)
    for (int col = 0; col < d; ++col) {
      out.k[size_t(s) * d + col] = src.k[k_index(k_batch, k_head, s, col)];
      out.v[size_t(s) * d + col] = x.r.rotated.v[k_index(v_batch, v_head, s, col)];
    }
  if (rope_k && x.r.rope) {
    for (int s = 0; s < lk; ++s) {
      if (hy.kind == Kind::kRopeKUnrotated) break;
      std::vector<double> row(out.k.begin() + size_t(s) * d, out.k.begin() + size_t(s + 1) * d);
      rope_rotate_rounded(row, d, 1, s % hy.t, *x.r.rope, x.r.c.dtype);
      std::copy(row.begin(), row.end(), out.k.begin() + size_t(s) * d);
    }
  }
  if (p.gate) {
    out.G.assign(lk, 0.0);
    double acc = 0;
    for (int s = 0; s < lk; ++s) {
      const size_t gi = p.varlen() ? size_t(h) * p.total_k() + start + s : vec_at(p, false, b, h, s);
      acc += x.r.values.g[gi];
      out.G[s] = acc;
    }
  }
  return true;
}

RowOut eval_row(const Ctx& x, const Hypothesis& hy, const HeadKeys& keys, const RowId& id) {
  const Problem& p = x.p;
  const int d = x.d, lq = p.len_q(id.b), lk = p.len_k(id.b), off = lk - lq;
  std::vector<double> q(d);
  const Layout qside{p, true};
  const ref::Inputs& qsrc = hy.kind == Kind::kRopeQueryAtI ? x.r.values : x.r.rotated;
  for (int col = 0; col < d; ++col) q[col] = qsrc.q[qside.at(id.b, id.h, id.i, col)];
  if (hy.kind == Kind::kRopeQueryAtI && x.r.rope) rope_rotate_rounded(q, d, 1, id.i, *x.r.rope, x.r.c.dtype);
  int e = right_end(x.r.c, id.i, lq, lk);
  if (hy.kind == Kind::kEnd) e = hy.end(id.i, lq, lk);
  if (hy.kind == Kind::kZeroKeys) e = keys.n;
  RowOut out;
  out.o.assign(d, 0.0);
  if (e <= 0) return out;
  const double scale = p.softmax_scale() * (hy.kind == Kind::kScale ? hy.x : 1.0);
  std::vector<double> s(e);
  double m = -INFINITY;
  for (int j = 0; j < e; ++j) {
    double dot = 0;
    for (int col = 0; col < d; ++col) dot += q[col] * keys.k[size_t(j) * d + col];
    s[j] = scale * dot;
    if (p.gate && j < lk) {
      const double gi = keys.G[id.i + off], gj = keys.G[j];
      s[j] += hy.kind == Kind::kGateFlipped ? gj - gi : gi - gj;
    }
    m = std::max(m, s[j]);
  }
  double l = 0;
  double running = -INFINITY;
  for (int j = 0; j < e; ++j) {
    l += std::exp(s[j] - m);
    double w = std::exp(s[j] - m);
    if (hy.kind == Kind::kNotRescaled) {
      // The running max after the key tile holding j: what j's weight was computed against, never
      // corrected afterwards.
      if (j % hy.t == 0) {
        const int tile_end = std::min(e, j + hy.t);
        for (int jj = j; jj < tile_end; ++jj) running = std::max(running, s[jj]);
      }
      w = std::exp(s[j] - running);
    }
    for (int col = 0; col < d; ++col) out.o[col] += w * keys.v[size_t(j) * d + col];
  }
  if (hy.kind != Kind::kNotDivided)
    for (double& v : out.o) v /= l;
  out.lse = m + std::log(l);
  return out;
}

std::vector<Hypothesis> hypotheses(const Case& c, const Problem& p) {
  std::vector<Hypothesis> hs;
  auto end_h = [&](std::string id, std::string text, std::function<int(int, int, int)> f, bool partial = false) {
    Hypothesis h{Kind::kEnd, std::move(id), std::move(text)};
    h.end = std::move(f);
    h.partial = partial;
    hs.push_back(std::move(h));
  };
  bool differ = false;  // some sequence with seqlen_q != seqlen_k
  for (int b = 0; b < p.sequences(); ++b) differ = differ || p.len_q(b) != p.len_k(b);
  const std::vector<int> tiles = {16, 32, 64, 128};
  if (c.causal) {
    end_h("mask-hides-diagonal",
          "each wrong row misses its last visible key, j = i + (seqlen_k - seqlen_q): the mask (or the loop's last key) "
          "stops one key short; key j is visible iff j <= i + seqlen_k - seqlen_q (<=, not <)",
          [c](int i, int lq, int lk) { return std::max(0, right_end(c, i, lq, lk) - 1); }, true);
    end_h("mask-one-key-past",
          "each wrong row also sees the key just past its diagonal: key j is visible iff j <= i + seqlen_k - seqlen_q",
          [c](int i, int lq, int lk) { return std::min(lk, right_end(c, i, lq, lk) + 1); }, true);
    if (differ)
      end_h("mask-top-left",
            "the wrong rows see keys j <= i: the mask is aligned top-left; the course aligns it bottom-right, key j "
            "visible iff j <= i + (seqlen_k - seqlen_q) (docs/conventions.md)",
            [](int i, int, int lk) { return std::clamp(i + 1, 0, lk); });
    end_h("mask-missing", "the wrong rows see every key, also those past the diagonal: the causal mask is not applied",
          [](int, int, int lk) { return lk; });
    for (int t : tiles)
      end_h("mask-tile-granular",
            "the wrong rows see every key up to the end of the key tile holding their diagonal (tiles of " + std::to_string(t) +
                " keys): the keys past the diagonal inside that tile are not masked",
            [c, t](int i, int lq, int lk) {
              const int e = right_end(c, i, lq, lk);
              return e == 0 ? 0 : std::min(lk, (e + t - 1) / t * t);
            },
            true);
  }
  for (int t : tiles)
    end_h("tail-keys-dropped",
          "the wrong rows ignore the keys of the last, partial key tile (tiles of " + std::to_string(t) +
              " keys): the loop over key tiles stops one tile early when seqlen_k is not a multiple of the tile",
          [c, t](int i, int lq, int lk) { return lk % t == 0 ? right_end(c, i, lq, lk) : std::min(right_end(c, i, lq, lk), lk / t * t); });
  if (!c.causal)
    for (int t : tiles) {
      Hypothesis h{Kind::kZeroKeys, "tail-keys-included",
                   "the wrong rows also weigh the keys past seqlen_k of the last key tile (as zero vectors: score 0, value "
                   "0; tiles of " + std::to_string(t) + " keys): mask keys j >= seqlen_k to -inf"};
      h.t = t;
      hs.push_back(h);
    }
  {
    Hypothesis h{Kind::kScale, "scale-log2e",
                 "O is softmax(log2(e) * s) V: scores already multiplied by log2(e) for exp2 went into exp (use exp2, or "
                 "leave log2(e) out of the scale)"};
    h.x = kLog2e;
    h.lse = false;
    hs.push_back(h);
    Hypothesis g{Kind::kScale, "scale-log2e",
                 "O is softmax(s / log2(e)) V: exp2 applied to scores that do not carry log2(e) (fold log2(e) into the "
                 "scale, or use exp)"};
    g.x = 1 / kLog2e;
    g.lse = false;
    hs.push_back(g);
  }
  for (int t : {1, 16, 32, 64, 128, 176}) {
    Hypothesis h{Kind::kNotRescaled, "acc-not-rescaled",
                 "O matches an accumulator that is never rescaled: when the running max grows from m_old to m_new, multiply "
                 "the accumulated P V (not only l) by exp(m_old - m_new)"};
    h.t = t;
    hs.push_back(h);
  }
  if (!c.varlen() && c.heads_q > 1) {
    hs.push_back({Kind::kKFromHead, "head-offset",
                  "the wrong heads computed with the K of head 0 of their batch: K's head offset is missing (V's is right)"});
    hs.push_back({Kind::kKVFromHead, "head-offset",
                  "the wrong heads computed with the K and V of head 0 of their batch: the head offset of K and V is missing"});
  }
  if (!c.varlen() && c.batch > 1) {
    Hypothesis h{Kind::kKVFromHead, "head-offset",
                 "the wrong batches computed with the K and V of batch 0: the batch offset of K and V is missing"};
    h.t = 1;
    hs.push_back(h);
  }
  if (c.heads_q != c.heads_kv) {
    Hypothesis h{Kind::kKVFromHead, "gqa-head-map",
                 "query head h read K/V head h % heads_kv: consecutive query heads share a K/V head, kv head = h / (heads_q / "
                 "heads_kv)"};
    h.t = 2;
    hs.push_back(h);
  }
  if (c.varlen() && p.sequences() > 1)
    hs.push_back({Kind::kPrevSequence, "varlen-offsets",
                  "sequence b read its keys from where sequence b - 1 starts: sequence b's keys start at cu_seqlens_k[b]"});
  if (c.gate)
    hs.push_back({Kind::kGateFlipped, "gate-sign",
                  "the gate's bias has the wrong sign: s_ij += G_i - G_j (older keys lose weight), not G_j - G_i"});
  if (c.rope()) {
    if (differ)
      hs.push_back({Kind::kRopeQueryAtI, "rope-query-positions",
                    "query i was rotated at position i; it sits at i + seqlen_k - seqlen_q (docs/conventions.md, RoPE)"});
    hs.push_back({Kind::kRopeKUnrotated, "rope-k-not-rotated", "O matches Q rotated and K not rotated: rotate K too"});
    for (int t : tiles) {
      Hypothesis h{Kind::kRopeKTileRow, "rope-key-positions",
                   "key j was rotated at position j % " + std::to_string(t) +
                       " (its row within the tile): the tables are indexed by the key's position in the sequence"};
      h.t = t;
      hs.push_back(h);
    }
  }
  // Last: a row that sees one key (l = 1) is right under it, and any wrong row of a rank-one O
  // (every row the same V row) looks like a scaled right row whatever the bug; this what-if asks
  // for the factor to be that row's l.
  hs.push_back({Kind::kNotDivided, "o-not-divided",
                "each wrong row of O is the right row times its l, and the LSE is right: divide O by l (once, at the end)"});
  return hs;
}

// The hypotheses every tested wrong row matches, at most one per id. A hypothesis that is not
// partial must also leave the tested right rows right. When two hypotheses predict the same
// numbers on every tested row (a 1-row case cannot tell a hidden diagonal from a dropped tail
// tile), the first in hypotheses()'s order is given.
std::vector<Hint> what_if(const ForwardRun& r, const std::vector<RowId>& ids, const std::vector<size_t>& bad,
                          const std::vector<size_t>& good) {
  Ctx x{r, r.c.reference_problem(), r.c.head_dim};
  std::vector<Hint> out;
  std::vector<std::vector<RowOut>> matched;  // the predictions of each hint given
  Hypothesis truth{Kind::kTruth, "", ""};
  for (const Hypothesis& hy : hypotheses(r.c, x.p)) {
    if (std::any_of(out.begin(), out.end(), [&](const Hint& h) { return h.id == hy.id; })) continue;
    bool all = true, changes = false;
    std::vector<RowOut> predicted;
    auto visit = [&](const std::vector<size_t>& rows, bool wrong_rows) {
      int kb = -1, kh = -1;
      HeadKeys keys, right_keys;
      for (size_t row : rows) {
        const RowId& id = ids[row];
        if (id.b != kb || id.h != kh) {
          kb = id.b;
          kh = id.h;
          if (!head_keys(x, hy, id.b, id.h, keys)) { all = false; return; }
          head_keys(x, truth, id.b, id.h, right_keys);
        }
        const RowOut want = eval_row(x, hy, keys, id);
        const RowOut right = eval_row(x, truth, right_keys, id);
        const bool moved = !row_close(want.o.data(), want.lse, right, r.otol, r.ltol, hy.lse);
        if (wrong_rows) {
          changes = changes || moved;
          predicted.push_back(want);
          if (!row_close(&r.o[row * x.d], r.lse[row], want, r.otol, r.ltol, hy.lse)) { all = false; return; }
        } else if (moved) {
          all = false;  // it would have made this right row wrong
          return;
        }
      }
    };
    visit(bad, true);
    if (all && !hy.partial) visit(good, false);
    if (!all || !changes) continue;
    bool same = false;
    for (const auto& m : matched) {
      bool eq = m.size() == predicted.size();
      for (size_t k = 0; k < predicted.size() && eq; ++k)
        eq = row_close(predicted[k].o.data(), predicted[k].lse, m[k], r.otol, r.ltol, true);
      same = same || eq;
    }
    if (same) continue;
    matched.push_back(predicted);
    out.push_back({hy.id, hy.text});
  }
  return out;
}

// Is row `row` of got a constant times row `other` of want? Returns the factor, or 0.
double row_factor(const std::vector<double>& got, size_t row, const std::vector<double>& want, size_t other, int d) {
  double ratio = 0;
  int used = 0;
  for (int x = 0; x < d; ++x) {
    const double g = got[row * d + x], w = want[other * d + x];
    if (!std::isfinite(g)) return 0;
    if (std::fabs(w) < 0.05) continue;  // too small to read a ratio from
    const double q = g / w;
    if (ratio == 0) ratio = q;
    else if (std::fabs(q - ratio) > 0.02 * std::fabs(ratio)) return 0;
    ++used;
  }
  return used >= std::min(d, 4) ? ratio : 0;
}

}  // namespace

std::vector<Hint> forward_hints(const ForwardRun& r) {
  const Case& c = r.c;
  const Problem p = c.reference_problem();
  const int d = c.head_dim;
  const std::vector<RowId> ids = row_ids(c, p);
  const size_t rows = r.want_lse.size();
  if (ids.size() != rows || r.o.size() != rows * d) return {};
  std::vector<char> bad_o(rows, 0), bad_lse(rows, 0);
  size_t n_bad_o = 0, n_bad_lse = 0, nan_lse = 0;
  for (size_t row = 0; row < rows; ++row) {
    for (int x = 0; x < d; ++x)
      if (!within(r.o[row * d + x], r.want_o[row * d + x], r.otol)) bad_o[row] = 1;
    bad_lse[row] = !within(r.lse[row], r.want_lse[row], r.ltol);
    n_bad_o += bad_o[row];
    n_bad_lse += bad_lse[row];
    nan_lse += std::isnan(r.lse[row]);
  }
  std::vector<size_t> bad;
  for (size_t row = 0; row < rows; ++row)
    if (bad_o[row] || bad_lse[row]) bad.push_back(row);
  if (bad.empty()) return {};

  // NaN patterns first: they need no what-if.
  int masked = 0, masked_nan = 0, nan_rows = 0;
  for (size_t row = 0; row < rows; ++row) {
    bool row_nan = std::isnan(r.lse[row]);
    for (int x = 0; x < d && !row_nan; ++x) row_nan = std::isnan(r.o[row * d + x]);
    nan_rows += row_nan;
    if (std::isinf(r.want_lse[row])) {
      ++masked;
      masked_nan += row_nan;
    }
  }
  if (masked > 0 && masked_nan == masked && nan_rows == masked)
    return {{"inf-guard", "only the rows that see no key are NaN: such a row must end with O = 0 and LSE = +inf; its m "
                          "must start at -inf and stay there, and exp(m - m_new) needs a guard when both are -inf "
                          "(-inf - -inf is NaN)"}};
  if (nan_rows > 0 && c.pattern == Pattern::kLargePositive)
    return {{"no-max-subtraction", "NaN or inf with logits around +80: subtract the running max before exp (exp(89) overflows fp32)"}};
  if (nan_lse == rows && n_bad_o == 0)
    return {{"lse-not-written", "O is right but every LSE is still NaN, the poison written before the run: the LSE is never stored"}};
  if (c.pattern == Pattern::kLargeNegative && nan_rows == 0) {
    int empty = 0;
    for (size_t row : bad) empty += std::isinf(r.lse[row]) && std::isfinite(r.want_lse[row]);
    if (empty > 0)
      return {{"max-starts-at-zero",
               "rows with logits around -150 look empty (LSE = inf): does the running max start at 0 instead of -inf?"}};
  }
  // The LSE in base 2: LSE ~ log2(e) * the natural one on most finite rows.
  {
    int base2 = 0, finite = 0;
    for (size_t row = 0; row < rows; ++row)
      if (std::isfinite(r.want_lse[row]) && std::fabs(r.want_lse[row]) > 0.5) {
        ++finite;
        base2 += std::fabs(r.lse[row] / r.want_lse[row] - kLog2e) < 1e-3;
      }
    if (finite > 0 && base2 > finite / 2 && n_bad_o == 0)
      return {{"lse-base2", "the LSE is log2(e) times too large: it looks like base 2; multiply it by ln(2)"}};
  }

  // The what-ifs, on up to 96 wrong rows and 32 right ones, spread over all of them.
  auto spread = [](const std::vector<size_t>& all, size_t n) {
    std::vector<size_t> some;
    const size_t step = std::max<size_t>(1, all.size() / n);
    for (size_t k = 0; k < all.size(); k += step) some.push_back(all[k]);
    return some;
  };
  std::vector<size_t> good;
  for (size_t row = 0; row < rows; ++row)
    if (!bad_o[row] && !bad_lse[row]) good.push_back(row);
  std::vector<Hint> found = what_if(r, ids, spread(bad, 96), spread(good, 32));
  if (!found.empty()) return found;

  // Rows that should see keys came out empty (O = 0, LSE = +inf).
  {
    bool all_empty = true;
    for (size_t row : bad) {
      bool zero = std::isinf(r.lse[row]) && r.lse[row] > 0 && std::isfinite(r.want_lse[row]);
      for (int x = 0; x < d && zero; ++x) zero = r.o[row * d + x] == 0.0;
      all_empty = all_empty && zero;
    }
    if (all_empty)
      return {{"inf-guard", "rows that see keys came out empty (O = 0, LSE = +inf): a key tile the row sees nothing of "
                            "(its max is -inf) was merged anyway, or l ended at 0; guard the merge where m = -inf"}};
  }

  // Patterns of the wrong rows.
  // O right, the LSE off by far more than rounding somewhere (not the 1e-3 of a sum kept in fp32).
  bool lse_far = false;
  for (size_t row : bad) lse_far = lse_far || !(std::fabs(r.lse[row] - r.want_lse[row]) <= 0.05);
  if (n_bad_o == 0 && n_bad_lse > 0 && lse_far)
    return {{"lse-wrong", "O is right but the LSE is not: store m + log(l) per row, in natural log, with m the max of the "
                          "scores as the softmax used them (whatever was subtracted from every score of the row is added back)"}};
  // A constant factor per wrong row with the LSE off by -log(factor): l itself. (The factor l with
  // the LSE right, O never divided by l, is a what-if above.)
  {
    bool all_scaled = true, lse_follows = true;
    for (size_t row : bad) {
      if (std::isinf(r.want_lse[row])) { all_scaled = false; break; }
      const double f = row_factor(r.o, row, r.want_o, row, d);
      if (f == 0 || std::fabs(f - 1) < 0.01) { all_scaled = false; break; }
      lse_follows = lse_follows && std::fabs(r.lse[row] - r.want_lse[row] + std::log(std::fabs(f))) < 1e-3;
    }
    if (all_scaled && lse_follows)
      return {{"l-wrong",
               "each wrong row of O is the right row times c and its LSE is off by -log(c): the running sum l is wrong; rescale "
               "it by exp(m_old - m_new) when the max grows, and merge partial sums at a common max"}};
  }
  if (n_bad_lse == 0)
    return {{"pv-wrong", "m and l are right (the LSE matches) but O is not: what P V accumulates is wrong: P's or V's "
                         "layout or fragments, the accumulator's rescale by exp(m_old - m_new), or an accumulator not "
                         "cleared between tiles"}};
  return {};
}

// ---- Backward --------------------------------------------------------------------------------

namespace {

// The gradients of the whole case under a what-if, in fp64: P from the given LSE, D from the
// given O, the pairs (i, j) in `seen`, D scaled by d_factor, and dK/dV summed over the query heads
// `counts(h)` allows.
struct BackwardWhatIf {
  std::function<bool(int i, int j, int lq, int lk)> seen;
  double d_factor = 1;
  std::function<bool(int h)> counts = [](int) { return true; };
  bool dq_of_counted_only = false;  // dQ of the heads `counts` leaves out stays 0
};

ref::Gradients gradients(const BackwardRun& r, const BackwardWhatIf& w) {
  const Case& c = r.c;
  const Problem p = c.reference_problem();
  const Layout qs{p, true}, ks{p, false};
  const int d = c.head_dim, group = c.heads_q / c.heads_kv;
  const double scale = p.softmax_scale();
  ref::Gradients g;
  g.dq.assign(r.values.q.size(), 0.0);
  g.dk.assign(r.values.k.size(), 0.0);
  g.dv.assign(r.values.v.size(), 0.0);
  for (int b = 0; b < p.sequences(); ++b)
    for (int h = 0; h < c.heads_q; ++h) {
      const int hk = h / group, lq = p.len_q(b), lk = p.len_k(b);
      const std::vector<double> q = head_rows(r.values.q, qs, b, h, lq), k = head_rows(r.values.k, ks, b, hk, lk),
                                v = head_rows(r.values.v, ks, b, hk, lk), dO = head_rows(r.dout, qs, b, h, lq),
                                o = head_rows(r.o, qs, b, h, lq);
      for (int i = 0; i < lq; ++i) {
        const double lse = r.lse[vec_at(p, true, b, h, i)];
        double D = 0;
        for (int x = 0; x < d; ++x) D += dO[size_t(i) * d + x] * o[size_t(i) * d + x];
        D *= w.d_factor;
        for (int j = 0; j < lk; ++j) {
          if (!w.seen(i, j, lq, lk) || std::isinf(lse)) continue;
          double s = 0, dp = 0;
          for (int x = 0; x < d; ++x) {
            s += q[size_t(i) * d + x] * k[size_t(j) * d + x];
            dp += dO[size_t(i) * d + x] * v[size_t(j) * d + x];
          }
          const double P = std::exp(scale * s - lse), dS = P * (dp - D);
          for (int x = 0; x < d; ++x) {
            if (!w.dq_of_counted_only || w.counts(h)) g.dq[qs.at(b, h, i, x)] += scale * dS * k[size_t(j) * d + x];
            if (w.counts(h)) {
              g.dk[ks.at(b, hk, j, x)] += scale * dS * q[size_t(i) * d + x];
              g.dv[ks.at(b, hk, j, x)] += P * dO[size_t(i) * d + x];
            }
          }
        }
      }
    }
  return g;
}

// ||a - b|| / ||b||: how far a what-if's gradients are from another's, as a whole.
double relative(const std::vector<double>& a, const std::vector<double>& b) {
  double e2 = 0, b2 = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const double diff = std::isnan(a[k]) ? INFINITY : a[k] - b[k];
    e2 += diff * diff;
    b2 += b[k] * b[k];
  }
  return b2 > 0 ? std::sqrt(e2 / b2) : (e2 > 0 ? INFINITY : 0.0);
}

bool close_to(const Case& c, const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& mag) {
  if (got.size() != want.size()) return false;
  const std::vector<double> atol = terms_atol(c.dtype, mag);
  const Tolerance t = gradient_terms_tolerance(c.dtype);
  for (size_t e = 0; e < got.size(); ++e)
    if (std::isnan(got[e]) || std::fabs(got[e] - want[e]) > t.atol + atol[e] + t.rtol * std::fabs(want[e])) return false;
  return true;
}

}  // namespace

std::vector<Hint> backward_hints(const BackwardRun& r) {
  const Case& c = r.c;
  const Problem p = c.reference_problem();
  std::vector<Hint> out;
  // A wrong constant factor (the softmax scale applied twice or not at all) leaves got = f * want.
  auto factor = [&](const std::vector<double>& got, const std::vector<double>& want) {
    double dot = 0, ref2 = 0;
    for (size_t e = 0; e < got.size(); ++e) {
      dot += got[e] * want[e];
      ref2 += want[e] * want[e];
    }
    if (ref2 == 0 || !std::isfinite(dot)) return 0.0;
    const double f = dot / ref2;
    double res2 = 0;
    for (size_t e = 0; e < got.size(); ++e) res2 += (got[e] - f * want[e]) * (got[e] - f * want[e]);
    return std::fabs(f - 1) > 0.01 && res2 < 1e-4 * f * f * ref2 ? f : 0.0;
  };
  {
    std::ostringstream os;
    os.precision(4);
    bool any = false;
    auto scaled = [&](const char* what, bool failed, const std::vector<double>& got, const std::vector<double>& want) {
      if (!failed) return;
      const double f = factor(got, want);
      if (f == 0) return;
      os << (any ? "; " : "") << what << " is the right gradient times " << f;
      any = true;
    };
    scaled("dQ", r.failed_dq, r.got.dq, r.want.dq);
    scaled("dK", r.failed_dk, r.got.dk, r.want.dk);
    scaled("dV", r.failed_dv, r.got.dv, r.want.dv);
    if (any) {
      os << " (the softmax scale is " << p.softmax_scale() << "): is the scale applied twice, or not at all?";
      return {{"grad-scale", os.str()}};
    }
  }
  // dg = dG: the gradient with respect to G = cumsum(g), the reverse cumsum forgotten.
  if (c.gate && r.failed_dg && !r.failed_dq && !r.failed_dk && !r.failed_dv) {
    std::vector<double> dG(r.want.dg.size());
    for (int b = 0; b < p.sequences(); ++b)
      for (int h = 0; h < c.heads_q; ++h)
        for (int t = 0; t < p.len_k(b); ++t) {
          const double next = t + 1 < p.len_k(b) ? r.want.dg[vec_at(p, false, b, h, t + 1)] : 0.0;
          dG[vec_at(p, false, b, h, t)] = r.want.dg[vec_at(p, false, b, h, t)] - next;
        }
    if (close_to(c, r.got.dg, dG, r.mag.dg) && !close_to(c, dG, r.want.dg, r.mag.dg))
      return {{"dg-reverse-cumsum",
               "dg matches dG, the gradient with respect to G = cumsum(g): g's gradient is the reverse cumsum of dG"}};
  }
  // What-ifs over the whole case (small cases only: each costs a full fp64 backward).
  const double work = double(p.total_q()) * c.heads_q * std::max(1, c.seqlen_k) * c.head_dim;
  if (!c.gate && !c.rope() && work <= 4e7) {
    struct Named {
      std::string id, text;
      BackwardWhatIf w;
    };
    std::vector<Named> whatifs;
    const bool causal = c.causal;
    auto right = [causal](int i, int j, int lq, int lk) { return !causal || j <= i + lk - lq; };
    {
      BackwardWhatIf w;
      w.seen = right;
      w.d_factor = 0;
      whatifs.push_back({"ds-without-d",
                         "dQ and dK match dS = P * dP, without D: dS = P * (dP - D) with D_i = rowsum(dO_i * O_i)", w});
    }
    if (causal) {
      BackwardWhatIf w;
      w.seen = [](int, int, int, int) { return true; };
      whatifs.push_back({"bwd-mask-missing", "the gradients match P without the causal mask: mask the keys past the diagonal "
                                             "(j > i + seqlen_k - seqlen_q) in the backward too",
                         w});
      for (int tq : {16, 32, 64, 128})
        for (int tk : {16, 32, 64, 128}) {
          BackwardWhatIf t;
          t.seen = [tq, tk](int i, int j, int lq, int lk) {
            const int i_last = std::min(lq - 1, (i / tq + 1) * tq - 1);
            return (j / tk) * tk <= i_last + lk - lq;
          };
          whatifs.push_back({"bwd-mask-missing",
                             "the gradients match P unmasked inside the tiles the loop visits (" + std::to_string(tq) + " x " +
                                 std::to_string(tk) + "): the early start and stop skip whole tiles, the diagonal tiles "
                                                      "still need the mask j <= i + seqlen_k - seqlen_q",
                             t});
        }
    }
    if (c.heads_q != c.heads_kv) {
      const int group = c.heads_q / c.heads_kv;
      BackwardWhatIf w;
      w.seen = right;
      w.counts = [group](int h) { return h % group == 0; };
      const std::string text = "dK and dV hold the terms of the first query head of each group only: sum over all "
                               "heads_q / heads_kv query heads that share the K/V head";
      whatifs.push_back({"gqa-group-sum", text, w});
      w.dq_of_counted_only = true;  // dQ accumulated by the same blocks: the other heads' dQ is never written
      whatifs.push_back({"gqa-group-sum", text, w});
    }
    for (const Named& n : whatifs) {
      if (std::any_of(out.begin(), out.end(), [&](const Hint& h) { return h.id == n.id; })) continue;
      const ref::Gradients g = gradients(r, n.w);
      bool all = true, changes = false;
      // The wrong gradients must be this computation's, as a whole (within 1%: the kernel's own
      // rounding of numbers that may be far larger than the right ones), and it must differ from
      // the right one.
      auto test = [&](bool failed, const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& what,
                      const std::vector<double>& mag) {
        if (!failed) return;
        all = all && (close_to(c, got, what, mag) || relative(got, what) <= 0.01);
        changes = changes || relative(what, want) > 0.05;
      };
      test(r.failed_dq, r.got.dq, r.want.dq, g.dq, r.mag.dq);
      test(r.failed_dk, r.got.dk, r.want.dk, g.dk, r.mag.dk);
      test(r.failed_dv, r.got.dv, r.want.dv, g.dv, r.mag.dv);
      if (all && changes) out.push_back({n.id, n.text});
    }
    if (!out.empty()) return out;
  }
  // Close, but not within the tolerance: errors of the size of 16-bit rounding.
  {
    const double u = gradient_unit(c.dtype);
    bool any = false, all_small = true;
    std::string names;
    auto small = [&](const char* what, bool failed, const std::vector<double>& got, const std::vector<double>& want) {
      if (!failed) return;
      double err2 = 0, ref2 = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        const double diff = std::isnan(got[e]) ? INFINITY : got[e] - want[e];
        err2 += diff * diff;
        ref2 += want[e] * want[e];
      }
      const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : INFINITY;
      all_small = all_small && rel < 16 * u;
      names += std::string(any ? ", " : "") + what;
      any = true;
    };
    small("dQ", r.failed_dq, r.got.dq, r.want.dq);
    small("dK", r.failed_dk, r.got.dk, r.want.dk);
    small("dV", r.failed_dv, r.got.dv, r.want.dv);
    if (any && all_small && !r.failed_dg)
      return {{"precision", names + " are off by only a few units of 16-bit rounding, yet more than a kernel that sums in fp32: "
                                    "is a running sum kept (or rounded) in fp16/bf16? Accumulate in fp32 and round once, at "
                                    "the end"}};
  }
  return {};
}

}  // namespace fa::test
