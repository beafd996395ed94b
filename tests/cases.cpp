// The suites' cases and inputs: a case's description and problem, its seeded inputs rounded to the
// storage type, its variant, and what the lesson under test must support.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "fa/half.hpp"
#include "fa/random.hpp"
#include "run.hpp"

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
  auto list = [](const std::vector<int>& x) {
    std::string s;
    for (int n : x) s += (s.empty() ? "{" : ",") + std::to_string(n);
    return s + "}";
  };
  std::ostringstream os;
  os << "[" << fa::name(dtype) << (causal ? " causal" : " non-causal");
  if (varlen()) {
    std::vector<int> lq, lk;
    for (int b = 0; b < sequences(); ++b) {
      lq.push_back(len_q(b));
      lk.push_back(len_k(b));
    }
    os << " varlen lens_q=" << list(lq) << " lens_k=" << list(lk) << " heads_q=" << heads_q << " heads_kv=" << heads_kv;
  }
  else
    os << " batch=" << batch << " heads_q=" << heads_q << " heads_kv=" << heads_kv << " seqlen_q=" << seqlen_q
       << " seqlen_k=" << seqlen_k;
  os << " head_dim=" << head_dim << " inputs=" << name(pattern) << (bshd ? " layout=(batch, seqlen, heads, dim)" : "")
     << (rope() ? " rope" : "") << (gate ? " gate" : "") << (sample_rows.empty() ? "" : " sampled rows")
     << (variant.empty() ? "" : " variant=" + variant) << " seed=" << base_seed() << "]";
  return os.str();
}

Problem Case::reference_problem() const {
  Problem p = *this;
  p.rope_base = 0;
  return p;
}

Case dense_case(int seqlen_q, int seqlen_k, int head_dim, DType t, bool causal, int heads_q, int heads_kv, int batch) {
  Case c;
  c.batch = batch;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  c.head_dim = head_dim;
  c.dtype = t;
  c.causal = causal;
  return c;
}

namespace {
Variant::Pass pass_of(Direction dir) { return dir == Direction::kForward ? Variant::Pass::kForward : Variant::Pass::kBackward; }
}  // namespace

std::string test_variant() {
  const char* v = std::getenv("FA_TEST_VARIANT");
  return v == nullptr ? "" : v;
}

int variant_of(const LessonInfo& lesson, const Case& c, Direction dir) {
  if (!c.variant.empty()) return variant_index(lesson, c.variant);
  const std::string env = test_variant();
  // A lesson without variants (a CPU model beside its kernel) runs its one way; in one with
  // variants, a name it lacks is an error (a typo must not run the default quietly).
  if (env.empty() || lesson.variants.empty()) return 0;
  const int v = variant_index(lesson, env);
  return variant_applies(lesson, v, pass_of(dir), c.head_dim) ? v : 0;
}

std::vector<int> variants_for(const LessonInfo& lesson, Direction dir, int head_dim) {
  std::vector<int> out;
  for (int v = 0; v < std::max<int>(1, static_cast<int>(lesson.variants.size())); ++v)
    if (variant_applies(lesson, v, pass_of(dir), head_dim)) out.push_back(v);
  return out;
}

Shape tensor_shape(const Case& c, bool q_side) {
  const int heads = q_side ? c.heads_q : c.heads_kv;
  if (c.varlen()) {
    const Problem p = c.reference_problem();
    return {{q_side ? p.total_q() : p.total_k(), heads, c.head_dim}, {"t", "h", "d"}};
  }
  return {{c.batch, heads, q_side ? c.seqlen_q : c.seqlen_k, c.head_dim}, {"b", "h", q_side ? "i" : "j", "d"}};
}
Shape vector_shape(const Case& c, bool q_side) {
  if (c.varlen()) {
    const Problem p = c.reference_problem();
    return {{c.heads_q, q_side ? p.total_q() : p.total_k()}, {"h", "t"}};
  }
  return {{c.batch, c.heads_q, q_side ? c.seqlen_q : c.seqlen_k}, {"b", "h", q_side ? "i" : "j"}};
}

void round_to(DType t, const std::vector<double>& raw, std::vector<uint16_t>& bits, std::vector<double>& values) {
  bits.resize(raw.size());
  values.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    bits[i] = to_storage(t, raw[i]);
    values[i] = from_storage(t, bits[i]);
  }
}

namespace {

// A random unit vector per (batch, kv head): the direction the adversarial logits are built on.
std::vector<double> unit(Rng& rng, int dim) {
  std::vector<double> u(dim);
  double n2 = 0;
  for (double& x : u) n2 += (x = rng.normal()) * x;
  for (double& x : u) x /= std::sqrt(n2);
  return u;
}

}  // namespace

Inputs make_inputs(const Case& c, uint64_t seed) {
  if (c.varlen() && c.pattern != Pattern::kRandn)
    throw std::invalid_argument("test case error: the adversarial input patterns are for dense cases, not varlen");
  Rng rng(seed);
  const Problem prob = c.reference_problem();
  const int D = c.head_dim;
  const size_t nq = size_t(prob.total_q()) * c.heads_q * D;
  const size_t nk = size_t(prob.total_k()) * c.heads_kv * D;
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
  if (c.gate) {
    // g = c_h log(sigmoid(x)) = -c_h log(1 + exp(-x)) <= 0: with c = 1 a key's weight falls by
    // e^-0.8 per token on average, with c = 0.01 by e^-0.8 per hundred; c = 0 is no decay at all.
    const double magnitude[] = {1.0, 0.1, 0.01, 0.0};
    const size_t per_head = c.varlen() ? prob.total_k() : c.seqlen_k;  // g is (..., heads_q, per_head)
    in.g.resize(size_t(c.heads_q) * prob.total_k());
    for (size_t e = 0; e < in.g.size(); ++e) {
      const double x = rng.normal();
      in.g[e] = static_cast<float>(-magnitude[(e / per_head) % c.heads_q % 4] * std::log1p(std::exp(-x)));
    }
    in.values.g.assign(in.g.begin(), in.g.end());
  }
  return in;
}

Requirements requirements_of(const LessonInfo& declared) {
  Requirements r;
  r.features = declared.features;
  r.head_dims = declared.features.head_dims;
  if (r.head_dims.empty()) r.head_dims = {64, 128};  // any head dim: the suites run the course's two (and probe one more)
  return r;
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

std::string rejection_expected(const LessonInfo& lesson, const Requirements& req, const Case& c) {
  const Features &have = lesson.features, &need = req.features;
  if (c.heads_q != c.heads_kv && !need.gqa && !have.gqa) return "grouped-query";
  if (c.varlen() && !need.varlen && !have.varlen) return "variable-length";
  if (c.gate && !need.gate && !have.gate) return "log-decay gate";
  return "";
}

bool supports_head_dim(const LessonInfo& lesson, int d) {
  const std::vector<int>& dims = lesson.features.head_dims;
  if (dims.empty()) return d >= 1 && d <= 256;
  for (int x : dims)
    if (x == d) return true;
  return false;
}

}  // namespace fa::test
