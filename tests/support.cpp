#include "support.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "fa/buffer.hpp"
#include "fa/compare.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/random.hpp"
#include "fa/rope.hpp"

namespace fa::test {

const char* name(Pattern p) {
  switch (p) {
    case Pattern::kRandn: return "randn";
    case Pattern::kLargePositive: return "large positive logits";
    case Pattern::kLargeNegative: return "large negative logits";
    case Pattern::kMaxInLastTile: return "row max in the last key tile";
    case Pattern::kAllEqual: return "all-equal scores";
  }
  return "?";
}

std::string Case::describe() const {
  std::ostringstream os;
  os << "[" << fa::name(dtype) << (causal ? " causal" : " non-causal") << " batch=" << batch << " heads_q=" << heads_q
     << " heads_kv=" << heads_kv << " seqlen_q=" << seqlen_q << " seqlen_k=" << seqlen_k << " head_dim=" << head_dim
     << " inputs=" << name(pattern) << (bshd ? " layout=(batch, seqlen, heads, dim)" : "") << (rope ? " rope" : "")
     << (sample_rows.empty() ? "" : " sampled rows") << " seed=" << base_seed() << "]";
  return os.str();
}

ref::Problem Case::problem() const {
  ref::Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = head_dim;
  p.causal = causal;
  return p;
}

namespace {

constexpr double kLog2eHost = 1.4426950408889634;

size_t at(int b, int h, int s, int d, int heads, int seqlen, int dim) {
  return ((size_t(b) * heads + h) * seqlen + s) * dim + d;
}

// A random unit vector per (batch, kv head): the direction the adversarial logits are built on.
std::vector<double> unit(Rng& rng, int dim) {
  std::vector<double> u(dim);
  double n2 = 0;
  for (double& x : u) n2 += (x = rng.normal()) * x;
  for (double& x : u) x /= std::sqrt(n2);
  return u;
}

void round_to(DType t, const std::vector<double>& raw, std::vector<uint16_t>& bits, std::vector<double>& values) {
  bits.resize(raw.size());
  values.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    bits[i] = to_storage(t, raw[i]);
    values[i] = from_storage(t, bits[i]);
  }
}

// (batch, heads, seqlen, dim) <-> (batch, seqlen, heads, dim)
template <class T>
std::vector<T> to_bshd(const std::vector<T>& x, int batch, int heads, int seqlen, int dim, bool back = false) {
  std::vector<T> y(x.size());
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int s = 0; s < seqlen; ++s)
        for (int d = 0; d < dim; ++d) {
          const size_t bhsd = at(b, h, s, d, heads, seqlen, dim);
          const size_t bshd = ((size_t(b) * seqlen + s) * heads + h) * dim + d;
          if (back) y[bhsd] = x[bshd]; else y[bshd] = x[bhsd];
        }
  return y;
}

// The buffers of one run in the lesson's memory, with the params that point into them.
struct Run {
  Buffer q, k, v, o, lse;
  Buffer rope_cos, rope_sin;  // only for RoPE cases
  RopeTables rope;            // their host copy, for the reference
  AttnParams p;
};

Run prepare(const LessonInfo& lesson, const Case& c, const Inputs& in) {
  Run r;
  const size_t nq = in.q.size() * 2, nk = in.k.size() * 2;
  r.q = Buffer(lesson.memory, nq, "q");
  r.k = Buffer(lesson.memory, nk, "k");
  r.v = Buffer(lesson.memory, nk, "v");
  r.o = Buffer(lesson.memory, nq, "o");
  r.lse = Buffer(lesson.memory, size_t(c.batch) * c.heads_q * c.seqlen_q * 4, "lse");
  if (c.bshd) {
    r.q.upload(to_bshd(in.q, c.batch, c.heads_q, c.seqlen_q, c.head_dim).data(), nq);
    r.k.upload(to_bshd(in.k, c.batch, c.heads_kv, c.seqlen_k, c.head_dim).data(), nk);
    r.v.upload(to_bshd(in.v, c.batch, c.heads_kv, c.seqlen_k, c.head_dim).data(), nk);
  } else {
    r.q.upload(in.q.data(), nq);
    r.k.upload(in.k.data(), nk);
    r.v.upload(in.v.data(), nk);
  }
  AttnParams& p = r.p;
  p.batch = c.batch;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.head_dim = c.head_dim;
  p.dtype = c.dtype;
  p.causal = c.causal;
  p.scale = static_cast<float>(default_scale(c.head_dim));
  p.q = r.q.data();
  p.k = r.k.data();
  p.v = r.v.data();
  p.o = r.o.data();
  p.lse = static_cast<float*>(r.lse.data());
  set_contiguous_strides(p);
  if (c.rope) {
    const RopeTables& t = r.rope = rope_tables(c.seqlen_k, c.head_dim);
    r.rope_cos = Buffer(lesson.memory, t.cos.size() * 4, "rope_cos");
    r.rope_sin = Buffer(lesson.memory, t.sin.size() * 4, "rope_sin");
    r.rope_cos.upload(t.cos.data(), t.cos.size() * 4);
    r.rope_sin.upload(t.sin.data(), t.sin.size() * 4);
    p.rope_cos = static_cast<const float*>(r.rope_cos.data());
    p.rope_sin = static_cast<const float*>(r.rope_sin.data());
    p.rope_positions = t.positions;
  }
  if (c.bshd) {
    auto bshd = [&](int heads, int seqlen) {
      return Strides{int64_t(seqlen) * heads * c.head_dim, c.head_dim, int64_t(heads) * c.head_dim};
    };
    p.q_stride = p.o_stride = bshd(c.heads_q, c.seqlen_q);
    p.k_stride = p.v_stride = bshd(c.heads_kv, c.seqlen_k);
  }
  return r;
}

void sync(const LessonInfo& lesson) {
  if (lesson.memory == Memory::kDevice) FA_CUDA_CHECK(cudaDeviceSynchronize());
}

// Poison the outputs, run through the one entry point, and check the guards of every buffer.
void execute(const LessonInfo& lesson, Run& r) {
  r.o.poison();
  r.lse.poison();
  sync(lesson);
  run_forward(lesson, r.p);
  sync(lesson);
  for (const Buffer* b : {&r.q, &r.k, &r.v, &r.o, &r.lse}) b->check_guards();
  if (r.p.rope_cos != nullptr) r.rope_cos.check_guards(), r.rope_sin.check_guards();
}

// What the reference is given. With RoPE, Q and K rotated and rounded to the storage type: every
// kernel rounds the rotated values to 16 bits before its tensor-core products, so the reference
// runs on those rounded values (COURSE.md, Tests: the same rounded inputs the kernel multiplies).
// The rotation is the course's definition, bit for bit (fa::rope_rotate_rounded). Rotated in fp64
// instead, about one value in 4000 rounds to the neighbouring 16-bit value, and a
// 1-ulp change of one element moves a score by up to ~1e-4: the whole LSE tolerance.
ref::Inputs reference_inputs(const Case& c, const Inputs& in, const RopeTables& t) {
  ref::Inputs r = in.values;
  if (!c.rope) return r;
  rope_rotate_rounded(r.q, c.head_dim, c.seqlen_q, c.seqlen_k - c.seqlen_q, t, c.dtype);
  rope_rotate_rounded(r.k, c.head_dim, c.seqlen_k, 0, t, c.dtype);
  return r;
}

bool all_bytes(const Buffer& b, uint8_t value) {
  const std::vector<uint8_t> bytes = b.to_host<uint8_t>();
  for (uint8_t x : bytes)
    if (x != value) return false;
  return true;
}

// When O or the LSE is wrong, look for the patterns a few classic bugs leave and say so.
std::string hints(const Case& c, const std::vector<double>& o, const std::vector<double>& want_o,
                  const std::vector<double>& lse, const std::vector<double>& want_lse, const Tolerance& tol) {
  const int rows = static_cast<int>(want_lse.size()), d = c.head_dim, sq = c.seqlen_q;
  std::vector<char> bad_row(rows, 0);
  for (int r = 0; r < rows; ++r)
    for (int x = 0; x < d; ++x) {
      const double g = o[size_t(r) * d + x], w = want_o[size_t(r) * d + x];
      if (std::isnan(g) || std::fabs(g - w) > tol.atol + tol.rtol * std::fabs(w)) bad_row[r] = 1;
    }
  std::vector<std::string> out;
  int masked = 0, masked_nan = 0, nan_rows = 0;
  for (int r = 0; r < rows; ++r) {
    bool row_nan = std::isnan(lse[r]);
    for (int x = 0; x < d && !row_nan; ++x) row_nan = std::isnan(o[size_t(r) * d + x]);
    nan_rows += row_nan;
    if (std::isinf(want_lse[r])) {
      ++masked;
      masked_nan += row_nan;
    }
  }
  if (masked > 0 && masked_nan == masked && nan_rows == masked)
    out.push_back("only the rows that see no key are NaN: guard m = -inf before exp(m - m_new) (-inf - -inf is NaN)");
  if (nan_rows > 0 && c.pattern == Pattern::kLargePositive)
    out.push_back("NaN or inf with logits around +80: subtract the running max before exp (exp(89) overflows fp32)");
  if (c.pattern == Pattern::kLargeNegative && nan_rows == 0) {
    int zero_rows = 0;
    for (int r = 0; r < rows; ++r) zero_rows += bad_row[r] && std::isinf(lse[r]);
    if (zero_rows > 0) out.push_back("rows with logits around -150 look empty: does the running max start at 0 instead of -inf?");
  }
  // LSE in base 2: LSE ~ log2(e) * the natural one on most finite rows.
  int base2 = 0, finite = 0;
  for (int r = 0; r < rows; ++r)
    if (std::isfinite(want_lse[r]) && std::fabs(want_lse[r]) > 0.5) {
      ++finite;
      base2 += std::fabs(lse[r] / want_lse[r] - kLog2eHost) < 1e-3;
    }
  if (finite > 0 && base2 > finite / 2) out.push_back("the LSE is log2(e) times too large: it looks like base 2; multiply by ln(2)");
  // A constant factor per row: the division by l, or a rescale, went missing.
  int scaled = 0, checked = 0;
  for (int r = 0; r < rows; ++r) {
    if (!bad_row[r] || std::isinf(want_lse[r])) continue;
    double ratio = 0;
    bool same = true;
    for (int x = 0; x < d && same; ++x) {
      const double g = o[size_t(r) * d + x], w = want_o[size_t(r) * d + x];
      if (std::fabs(w) < 0.05) continue;
      const double q = g / w;
      if (ratio == 0) ratio = q;
      same = std::fabs(q - ratio) < 0.02 * std::fabs(ratio);
    }
    ++checked;
    scaled += same && ratio != 0 && std::fabs(ratio - 1) > 0.01;
  }
  if (checked > 0 && scaled == checked) out.push_back("each wrong row of O is the right row times a constant: check the division by l (once, at the end)");
  // Only the last partial tile of query rows.
  int first_bad = -1;
  for (int r = 0; r < rows && first_bad < 0; ++r)
    if (bad_row[r]) first_bad = r % sq;
  bool only_tail = first_bad > 0 && c.sample_rows.empty();
  for (int r = 0; r < rows && only_tail; ++r) only_tail = !bad_row[r] || (r % sq) >= first_bad;
  for (int t : {16, 32, 64, 128})
    if (only_tail && sq % t != 0 && first_bad == sq / t * t) {
      out.push_back("only the last partial tile of query rows (from row " + std::to_string(first_bad) +
                    ") is wrong: check the tail guard on rows");
      break;
    }
  // Only heads other than the first.
  if (c.batch * c.heads_q > 1 && c.sample_rows.empty()) {
    bool first_ok = true, other_bad = false;
    for (int r = 0; r < rows; ++r) {
      if (r < sq) first_ok = first_ok && !bad_row[r];
      else other_bad = other_bad || bad_row[r];
    }
    if (first_ok && other_bad) out.push_back("batch 0, head 0 is right but other heads are not: check the batch and head offsets");
  }
  std::string text;
  for (const auto& h : out) text += "\n  hint: " + h;
  return text;
}

Outcome fail(const Case& c, const std::string& what) { return {false, false, c.describe() + "\n  " + what}; }

// Runs `body`, turning the errors a lesson can raise into an Outcome.
template <class F>
Outcome guarded(const Case& c, F&& body) {
  try {
    return body();
  } catch (const NotImplemented& e) {
    return {false, true, e.what()};
  } catch (const InvalidArgument& e) {
    return fail(c, std::string("rejected a valid call: ") + e.what());
  } catch (const std::exception& e) {
    return fail(c, e.what());
  }
}

}  // namespace

Inputs make_inputs(const Case& c, uint64_t seed) {
  Rng rng(seed);
  const int D = c.head_dim;
  const size_t nq = size_t(c.batch) * c.heads_q * c.seqlen_q * D;
  const size_t nk = size_t(c.batch) * c.heads_kv * c.seqlen_k * D;
  std::vector<double> q(nq), k(nk), v(nk);
  for (double& x : q) x = rng.normal();
  for (double& x : k) x = rng.normal();
  for (double& x : v) x = rng.normal();
  const int group = c.heads_q / c.heads_kv;
  const double sqrt_d = std::sqrt(double(D));
  if (c.pattern != Pattern::kRandn) {
    for (int b = 0; b < c.batch; ++b) {
      for (int hk = 0; hk < c.heads_kv; ++hk) {
        const std::vector<double> u = unit(rng, D);
        auto krow = [&](int j) { return &k[at(b, hk, j, 0, c.heads_kv, c.seqlen_k, D)]; };
        auto each_q = [&](auto&& f) {
          for (int g = 0; g < group; ++g)
            for (int i = 0; i < c.seqlen_q; ++i) f(&q[at(b, hk * group + g, i, 0, c.heads_q, c.seqlen_q, D)]);
        };
        switch (c.pattern) {
          case Pattern::kLargePositive:
          case Pattern::kLargeNegative: {
            // q = +-a u + noise, k = a u + noise: scale * q.k ~ +-a^2 / sqrt(D) = the target, +- ~5.
            const double target = c.pattern == Pattern::kLargePositive ? 80.0 : -150.0;
            const double a = std::sqrt(std::fabs(target) * sqrt_d), sign = target > 0 ? 1.0 : -1.0;
            for (int j = 0; j < c.seqlen_k; ++j)
              for (int d = 0; d < D; ++d) krow(j)[d] += a * u[d];
            each_q([&](double* row) { for (int d = 0; d < D; ++d) row[d] += sign * a * u[d]; });
            break;
          }
          case Pattern::kMaxInLastTile: {
            // k_j = alpha (j + 1) / seqlen_k u + small noise, q = 8 u + noise: logits rise by ~30
            // from the first key to the last, so every row's max is among its last visible keys.
            const double alpha = 30.0 * sqrt_d / 8.0;
            for (int j = 0; j < c.seqlen_k; ++j)
              for (int d = 0; d < D; ++d) krow(j)[d] = alpha * (j + 1) / c.seqlen_k * u[d] + 0.1 * krow(j)[d];
            each_q([&](double* row) { for (int d = 0; d < D; ++d) row[d] += 8.0 * u[d]; });
            break;
          }
          case Pattern::kAllEqual:
            for (int j = 1; j < c.seqlen_k; ++j)
              for (int d = 0; d < D; ++d) krow(j)[d] = krow(0)[d];
            break;
          case Pattern::kRandn: break;
        }
      }
    }
  }
  Inputs in;
  round_to(c.dtype, q, in.q, in.values.q);
  round_to(c.dtype, k, in.k, in.values.k);
  round_to(c.dtype, v, in.v, in.values.v);
  return in;
}

Outcome check_forward(const LessonInfo& lesson, const Case& c) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare(lesson, c, in);
    execute(lesson, r);
    // The inputs must come back untouched.
    for (auto [buf, host] : {std::pair<const Buffer*, const std::vector<uint16_t>*>{&r.q, &in.q}, {&r.k, &in.k}, {&r.v, &in.v}}) {
      std::vector<uint16_t> now = buf->to_host<uint16_t>();
      if (c.bshd) now = to_bshd(now, c.batch, buf == &r.q ? c.heads_q : c.heads_kv, buf == &r.q ? c.seqlen_q : c.seqlen_k, c.head_dim, true);
      if (now != *host) return fail(c, "the lesson modified its input " + buf->name());
    }
    std::vector<uint16_t> obits = r.o.to_host<uint16_t>();
    if (c.bshd) obits = to_bshd(obits, c.batch, c.heads_q, c.seqlen_q, c.head_dim, true);
    const std::vector<float> lse32 = r.lse.to_host<float>();
    std::vector<double> o(obits.size()), lse(lse32.begin(), lse32.end());
    for (size_t i = 0; i < o.size(); ++i) o[i] = from_storage(c.dtype, obits[i]);

    const ref::Problem prob = c.problem();
    const Tolerance otol = output_tolerance(c.dtype), ltol = lse_tolerance();
    std::vector<int> dims_o{c.batch, c.heads_q, c.seqlen_q, c.head_dim}, dims_l{c.batch, c.heads_q, c.seqlen_q};
    if (!c.sample_rows.empty()) {
      // Large problems: every element must be written (no NaN left from the poison), and the
      // sampled rows must match the reference.
      size_t nan_o = 0, nan_l = 0;
      for (double x : o) nan_o += std::isnan(x);
      for (double x : lse) nan_l += std::isnan(x);
      if (nan_o || nan_l)
        return fail(c, "MISMATCH: " + std::to_string(nan_o) + " elements of O and " + std::to_string(nan_l) +
                           " of LSE are NaN (unwritten: outputs are poisoned with NaN before the run)");
      const int n = static_cast<int>(c.sample_rows.size());
      std::vector<double> os, ls;
      for (int bh = 0; bh < c.batch * c.heads_q; ++bh)
        for (int r2 : c.sample_rows) {
          ls.push_back(lse[size_t(bh) * c.seqlen_q + r2]);
          for (int d = 0; d < c.head_dim; ++d) os.push_back(o[(size_t(bh) * c.seqlen_q + r2) * c.head_dim + d]);
        }
      o.swap(os);
      lse.swap(ls);
      dims_o[2] = dims_l[2] = n;
    }
    const ref::Forward want = ref::forward(prob, reference_inputs(c, in, r.rope), c.sample_rows.empty() ? nullptr : &c.sample_rows);
    const std::vector<std::string> names_o{"b", "h", c.sample_rows.empty() ? "i" : "sampled row", "d"};
    const CompareReport ro = compare("O", o, want.o, otol, dims_o, names_o);
    const CompareReport rl = compare("LSE", lse, want.lse, ltol, dims_l, {names_o[0], names_o[1], names_o[2]});
    const bool ok = ro.ok && rl.ok;
    return Outcome{ok, false,
                   c.describe() + "\n  " + ro.text + "\n  " + rl.text + (ok ? "" : hints(c, o, want.o, lse, want.lse, otol)),
                   ro.max_abs_err};
  });
}

Outcome check_deterministic(const LessonInfo& lesson, const Case& c) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare(lesson, c, in);
    execute(lesson, r);
    const std::vector<uint8_t> o1 = r.o.to_host<uint8_t>(), l1 = r.lse.to_host<uint8_t>();
    execute(lesson, r);
    const std::vector<uint8_t> o2 = r.o.to_host<uint8_t>(), l2 = r.lse.to_host<uint8_t>();
    if (o1 != o2 || l1 != l2)
      return fail(c, std::string("MISMATCH: two runs on the same inputs differ bitwise in ") + (o1 != o2 ? "O" : "") +
                         (o1 != o2 && l1 != l2 ? " and " : "") + (l1 != l2 ? "LSE" : ""));
    return {true, false, c.describe() + " bitwise identical across two runs"};
  });
}

Outcome check_rejected(const LessonInfo& lesson, const Case& c, const std::function<void(AttnParams&)>& break_it,
                       const std::string& expect) {
  try {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare(lesson, c, in);
    r.o.poison();
    r.lse.poison();
    break_it(r.p);
    try {
      run_forward(lesson, r.p);
      sync(lesson);
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      sync(lesson);
      if (msg.find(lesson.id) == std::string::npos || msg.find(expect) == std::string::npos)
        return fail(c, "rejected, but the message should name the lesson and say '" + expect + "': " + msg);
      if (!all_bytes(r.o, Buffer::kPoisonByte) || !all_bytes(r.lse, Buffer::kPoisonByte))
        return fail(c, "rejected, but only after writing the outputs (validate before any launch): " + msg);
      return {true, false, "rejected: " + msg};
    }
    return fail(c, "a bad call was accepted; expected an error saying '" + expect + "'");
  } catch (const NotImplemented& e) {
    return {false, true, e.what()};
  } catch (const std::exception& e) {
    return fail(c, std::string("a bad call failed with the wrong kind of error: ") + e.what());
  }
}

std::string missing_features(const LessonInfo& lesson, const Requirements& req) {
  const Features& have = lesson.features;
  const Features& need = req.features;
  std::string out;
  auto want = [&](bool required, bool present, const char* what) {
    if (required && !present) out += std::string(out.empty() ? "" : ", ") + what;
  };
  want(need.fp16, have.fp16, "fp16");
  want(need.bf16, have.bf16, "bf16");
  want(need.causal, have.causal, "causal");
  want(need.seqlen_q_ne_k, have.seqlen_q_ne_k, "seqlen_q != seqlen_k");
  want(need.gqa, have.gqa, "grouped-query heads");
  want(need.any_strides, have.any_strides, "strided layouts");
  want(need.varlen, have.varlen, "varlen");
  want(need.rope, have.rope, "RoPE");
  want(need.gate, have.gate, "decay gate");
  for (int d : req.head_dims)
    if (!supports_head_dim(lesson, d)) out += std::string(out.empty() ? "" : ", ") + "head_dim " + std::to_string(d);
  return out;
}

bool supports_head_dim(const LessonInfo& lesson, int d) {
  const std::vector<int>& dims = lesson.features.head_dims;
  if (dims.empty()) return d >= 1 && d <= 256;
  for (int x : dims)
    if (x == d) return true;
  return false;
}

}  // namespace fa::test
