#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "fa/buffer.hpp"
#include "fa/compare.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/random.hpp"
#include "fa/rope.hpp"
#include "hints.hpp"
#include "layout.hpp"

namespace fa::test {

int& failures_in_test_case() {
  static int failures = 0;
  return failures;
}

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

void Case::set_lengths(const std::vector<int>& q, const std::vector<int>& k) {
  lens_q = q;
  lens_k = k;
  batch = static_cast<int>(q.size());
  seqlen_q = std::max(1, q.empty() ? 0 : *std::max_element(q.begin(), q.end()));
  seqlen_k = std::max(1, k.empty() ? 0 : *std::max_element(k.begin(), k.end()));
}

std::string Case::describe() const {
  auto list = [](const std::vector<int>& x) {
    std::string s;
    for (int n : x) s += (s.empty() ? "{" : ",") + std::to_string(n);
    return s + "}";
  };
  std::ostringstream os;
  os << "[" << fa::name(dtype) << (causal ? " causal" : " non-causal");
  if (varlen())
    os << " varlen lens_q=" << list(lens_q) << " lens_k=" << list(lens_k) << " heads_q=" << heads_q << " heads_kv=" << heads_kv;
  else
    os << " batch=" << batch << " heads_q=" << heads_q << " heads_kv=" << heads_kv << " seqlen_q=" << seqlen_q
       << " seqlen_k=" << seqlen_k;
  os << " head_dim=" << head_dim << " inputs=" << name(pattern) << (bshd ? " layout=(batch, seqlen, heads, dim)" : "")
     << (rope ? " rope" : "") << (gate ? " gate" : "") << (sample_rows.empty() ? "" : " sampled rows")
     << (variant.empty() ? "" : " variant=" + variant) << " seed=" << base_seed() << "]";
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
  p.gate = gate;
  if (varlen()) {
    auto prefix_sums = [](const std::vector<int>& lens) {
      std::vector<int> cu{0};
      for (int n : lens) cu.push_back(cu.back() + n);
      return cu;
    };
    p.cu_seqlens_q = prefix_sums(lens_q);
    p.cu_seqlens_k = prefix_sums(lens_k);
  }
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
  const Variant::Pass pass = dir == Direction::kForward ? Variant::Pass::kForward : Variant::Pass::kBackward;
  return variant_applies(lesson, v, pass, c.head_dim) ? v : 0;
}

std::vector<int> variants_for(const LessonInfo& lesson, Direction dir, int head_dim) {
  const Variant::Pass pass = dir == Direction::kForward ? Variant::Pass::kForward : Variant::Pass::kBackward;
  std::vector<int> out;
  for (int v = 0; v < std::max<int>(1, static_cast<int>(lesson.variants.size())); ++v)
    if (variant_applies(lesson, v, pass, head_dim)) out.push_back(v);
  return out;
}

namespace {

constexpr double kLog2eHost = 1.4426950408889634;

// A tensor's dimensions and their names, for the reports: (b, h, i or j, d) dense, (t, h, d)
// varlen; the LSE, g and dg: (b, h, i or j) dense, (h, t) varlen.
struct Shape {
  std::vector<int> dims;
  std::vector<std::string> names;
};
Shape tensor_shape(const Case& c, bool q_side) {
  const int heads = q_side ? c.heads_q : c.heads_kv;
  if (c.varlen()) {
    const ref::Problem p = c.problem();
    return {{q_side ? p.total_q() : p.total_k(), heads, c.head_dim}, {"t", "h", "d"}};
  }
  return {{c.batch, heads, q_side ? c.seqlen_q : c.seqlen_k, c.head_dim}, {"b", "h", q_side ? "i" : "j", "d"}};
}
Shape vector_shape(const Case& c, bool q_side) {
  if (c.varlen()) {
    const ref::Problem p = c.problem();
    return {{c.heads_q, q_side ? p.total_q() : p.total_k()}, {"h", "t"}};
  }
  return {{c.batch, c.heads_q, q_side ? c.seqlen_q : c.seqlen_k}, {"b", "h", q_side ? "i" : "j"}};
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
  Buffer dout, dq, dk, dv;    // only for backward runs
  Buffer rope_cos, rope_sin;  // only for RoPE cases
  Buffer cu_q, cu_k;          // only for varlen cases: cu_seqlens_q and cu_seqlens_k, int32
  Buffer gate, dgate;         // only for gated cases (dgate: backward runs)
  RopeTables rope;            // their host copy, for the reference
  AttnParams p;

  // Every buffer of the run (their guards are checked after each run).
  std::vector<const Buffer*> buffers() const {
    std::vector<const Buffer*> all;
    for (const Buffer* b : {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &rope_cos, &rope_sin, &cu_q, &cu_k, &gate, &dgate})
      if (b->bytes() > 0) all.push_back(b);
    return all;
  }
};

// What a pass writes: the buffers poisoned before it runs.
std::vector<Buffer*> outputs(Run& r, Direction pass) {
  if (pass == Direction::kForward) return {&r.o, &r.lse};
  std::vector<Buffer*> out{&r.dq, &r.dk, &r.dv};
  if (r.dgate.bytes() > 0) out.push_back(&r.dgate);
  return out;
}

Run prepare(const LessonInfo& lesson, const Case& c, const Inputs& in) {
  if (c.varlen() && (c.bshd || c.rope || !c.sample_rows.empty()))
    throw std::invalid_argument("test case error: bshd, rope and sampled rows are for dense cases, not varlen");
  const ref::Problem prob = c.problem();
  Run r;
  const size_t nq = in.q.size() * 2, nk = in.k.size() * 2;
  r.q = Buffer(lesson.memory, nq, "q");
  r.k = Buffer(lesson.memory, nk, "k");
  r.v = Buffer(lesson.memory, nk, "v");
  r.o = Buffer(lesson.memory, nq, "o");
  r.lse = Buffer(lesson.memory, size_t(prob.total_q()) * c.heads_q * 4, "lse");
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
  p.variant = variant_of(lesson, c, Direction::kForward);
  p.q = r.q.data();
  p.k = r.k.data();
  p.v = r.v.data();
  p.o = r.o.data();
  p.lse = static_cast<float*>(r.lse.data());
  if (c.varlen()) {  // before set_contiguous_strides: the strides of packed tensors
    r.cu_q = Buffer(lesson.memory, prob.cu_seqlens_q.size() * 4, "cu_seqlens_q");
    r.cu_k = Buffer(lesson.memory, prob.cu_seqlens_k.size() * 4, "cu_seqlens_k");
    r.cu_q.upload(prob.cu_seqlens_q.data(), r.cu_q.bytes());
    r.cu_k.upload(prob.cu_seqlens_k.data(), r.cu_k.bytes());
    p.cu_seqlens_q = static_cast<const int*>(r.cu_q.data());
    p.cu_seqlens_k = static_cast<const int*>(r.cu_k.data());
    p.total_q = prob.total_q();
    p.total_k = prob.total_k();
  }
  set_contiguous_strides(p);
  if (c.gate) {
    r.gate = Buffer(lesson.memory, in.g.size() * 4, "gate");
    r.gate.upload(in.g.data(), r.gate.bytes());
    p.gate = static_cast<const float*>(r.gate.data());
  }
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
void execute(const LessonInfo& lesson, Run& r, Direction pass = Direction::kForward) {
  for (Buffer* b : outputs(r, pass)) b->poison();
  sync(lesson);
  if (pass == Direction::kForward) run_forward(lesson, r.p);
  else run_backward(lesson, r.p);
  sync(lesson);
  for (const Buffer* b : r.buffers()) b->check_guards();
}

// A 16-bit tensor read back in the reference's layout (bshd cases back from their strides), as
// storage bits and as values.
std::vector<uint16_t> read_bits(const Case& c, const Buffer& buf, bool q_side) {
  std::vector<uint16_t> bits = buf.to_host<uint16_t>();
  if (c.bshd) bits = to_bshd(bits, c.batch, q_side ? c.heads_q : c.heads_kv, q_side ? c.seqlen_q : c.seqlen_k, c.head_dim, true);
  return bits;
}
std::vector<double> read_values(const Case& c, const Buffer& buf, bool q_side) {
  const std::vector<uint16_t> bits = read_bits(c, buf, q_side);
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = from_storage(c.dtype, bits[i]);
  return out;
}

// The inputs must come back untouched: "" if they did, else the name of the first one that changed.
std::string changed_input(const Case& c, const Run& r, const Inputs& in) {
  if (read_bits(c, r.q, true) != in.q) return r.q.name();
  if (read_bits(c, r.k, false) != in.k) return r.k.name();
  if (read_bits(c, r.v, false) != in.v) return r.v.name();
  if (c.gate && r.gate.to_host<float>() != in.g) return r.gate.name();
  return "";
}

// What the reference is given. With RoPE, Q and K rotated and rounded to the storage type: every
// kernel rounds the rotated values to 16 bits before its tensor-core products, so the reference
// runs on those rounded values (docs/conventions.md: the reference runs on the same rounded inputs the kernel multiplies).
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

// A varlen O, (total, heads, dim), as (heads, total, dim): the order of its LSE, for hints().
std::vector<double> heads_first(const Case& c, const std::vector<double>& o) {
  const int heads = c.heads_q, d = c.head_dim, total = static_cast<int>(o.size() / (size_t(heads) * d));
  std::vector<double> out(o.size());
  for (int t = 0; t < total; ++t)
    for (int h = 0; h < heads; ++h)
      for (int x = 0; x < d; ++x) out[(size_t(h) * total + t) * d + x] = o[(size_t(t) * heads + h) * d + x];
  return out;
}

Outcome fail(const Case& c, const std::string& what) {
  return {false, false, c.describe() + "\n  " + what, 0, c.describe() + ": " + what.substr(0, what.find('\n'))};
}

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


// ---- Backward ------------------------------------------------------------------------------
// A backward run's inputs besides q, k, v: the forward's outputs from the fp64 reference (O
// rounded to the storage type, the LSE in fp32: what a correct forward stores) and a random dO.
// Taking them from the reference, not from a lesson's forward, keeps a backward failure the
// backward's own; the forward suites check the forward.
struct BackwardInputs {
  std::vector<uint16_t> o, dout;  // storage bits, in the layout of q
  std::vector<float> lse;
  std::vector<double> dout_values;
  BackwardInputs(const Case& c, const Inputs& in) {
    const ref::Forward f = ref::forward(c.problem(), in.values);
    std::vector<double> unused;
    round_to(c.dtype, f.o, o, unused);
    lse.assign(f.lse.begin(), f.lse.end());
    Rng rng(seed_for(c.describe() + " dout"));
    std::vector<double> raw(f.o.size());
    for (double& x : raw) x = rng.normal();
    round_to(c.dtype, raw, dout, dout_values);
  }
};

Run prepare_backward(const LessonInfo& lesson, const Case& c, const Inputs& in, const BackwardInputs& bi) {
  Run r = prepare(lesson, c, in);
  r.p.variant = variant_of(lesson, c, Direction::kBackward);
  const size_t nq = in.q.size() * 2, nk = in.k.size() * 2;
  r.dout = Buffer(lesson.memory, nq, "dout");
  r.dq = Buffer(lesson.memory, nq, "dq");
  r.dk = Buffer(lesson.memory, nk, "dk");
  r.dv = Buffer(lesson.memory, nk, "dv");
  if (c.gate) r.dgate = Buffer(lesson.memory, in.g.size() * 4, "dgate");
  auto layout = [&](const std::vector<uint16_t>& x) {
    return c.bshd ? to_bshd(x, c.batch, c.heads_q, c.seqlen_q, c.head_dim) : x;
  };
  r.o.upload(layout(bi.o).data(), nq);
  r.dout.upload(layout(bi.dout).data(), nq);
  r.lse.upload(bi.lse.data(), bi.lse.size() * 4);
  AttnParams& p = r.p;
  p.dout = r.dout.data();
  p.dq = r.dq.data();
  p.dk = r.dk.data();
  p.dv = r.dv.data();
  if (c.gate) p.dgate = static_cast<float*>(r.dgate.data());
  p.do_stride = p.dq_stride = p.q_stride;
  p.dk_stride = p.dv_stride = p.k_stride;
  return r;
}

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
  const ref::Problem prob = c.problem();
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

Inputs make_inputs(const Case& c, uint64_t seed) {
  if (c.varlen() && c.pattern != Pattern::kRandn)
    throw std::invalid_argument("test case error: the adversarial input patterns are for dense cases, not varlen");
  Rng rng(seed);
  const ref::Problem prob = c.problem();
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

Outcome check_forward(const LessonInfo& lesson, const Case& c) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare(lesson, c, in);
    execute(lesson, r);
    const std::string changed = changed_input(c, r, in);
    if (!changed.empty()) return fail(c, "the lesson modified its input " + changed);
    std::vector<double> o = read_values(c, r.o, true);
    const std::vector<float> lse32 = r.lse.to_host<float>();
    std::vector<double> lse(lse32.begin(), lse32.end());

    const ref::Problem prob = c.problem();
    const Tolerance otol = output_tolerance(c.dtype), ltol = lse_tolerance();
    Shape so = tensor_shape(c, true), sl = vector_shape(c, true);
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
      so.dims[2] = sl.dims[2] = n;
      so.names[2] = sl.names[2] = "sampled row";
    }
    const ref::Forward want = ref::forward(prob, reference_inputs(c, in, r.rope), c.sample_rows.empty() ? nullptr : &c.sample_rows);
    const CompareReport ro = compare("O", o, want.o, otol, so.dims, so.names);
    const CompareReport rl = compare("LSE", lse, want.lse, ltol, sl.dims, sl.names);
    const bool ok = ro.ok && rl.ok;
    std::string why;
    if (!ok && hints_wanted()) {
      const ref::Inputs rotated = reference_inputs(c, in, r.rope);
      const std::vector<double> o_rows = c.varlen() ? heads_first(c, o) : o, want_rows = c.varlen() ? heads_first(c, want.o) : want.o;
      why = format_hints(forward_hints({c, in.values, rotated, c.rope ? &r.rope : nullptr, o_rows, lse, want_rows, want.lse, otol, ltol}));
    }
    return Outcome{ok, false, c.describe() + "\n  " + ro.text + "\n  " + rl.text + why, ro.max_abs_err,
                   c.describe() + ": " + (ro.ok ? "" : ro.brief) + (ro.ok || rl.ok ? "" : "; ") + (rl.ok ? "" : rl.brief)};
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
                       const std::string& expect, Direction dir) {
  try {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = dir == Direction::kForward ? prepare(lesson, c, in) : prepare_backward(lesson, c, in, BackwardInputs(c, in));
    const std::vector<Buffer*> written = outputs(r, dir);
    for (Buffer* b : written) b->poison();
    break_it(r.p);
    try {
      if (dir == Direction::kForward) run_forward(lesson, r.p);
      else run_backward(lesson, r.p);
      sync(lesson);
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      sync(lesson);
      if (msg.find(lesson.id) == std::string::npos || msg.find(expect) == std::string::npos)
        return fail(c, "rejected, but the message should name the lesson and say '" + expect + "': " + msg);
      bool untouched = true;
      for (const Buffer* b : written) untouched = untouched && all_bytes(*b, Buffer::kPoisonByte);
      if (!untouched)
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

Outcome check_feature_rejected(const LessonInfo& lesson, const Case& c, const std::string& expect, Direction dir) {
  Case plain;
  plain.seqlen_q = plain.seqlen_k = 17;
  plain.head_dim = c.head_dim;
  plain.dtype = c.dtype;
  plain.causal = c.causal;
  const Outcome ran = guarded(plain, [&]() -> Outcome {
    const Inputs in = make_inputs(plain, seed_for(plain.describe()));
    Run r = dir == Direction::kForward ? prepare(lesson, plain, in) : prepare_backward(lesson, plain, in, BackwardInputs(plain, in));
    execute(lesson, r, dir);
    return {true, false, ""};
  });
  if (!ran.ok) return ran.not_implemented ? ran : fail(c, "its plain neighbour failed first: " + ran.text);
  return check_rejected(lesson, c, [](AttnParams&) {}, expect, dir);
}

Outcome check_backward(const LessonInfo& lesson, const Case& c, bool deterministic) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    const BackwardInputs bi(c, in);
    Run r = prepare_backward(lesson, c, in, bi);
    r.p.deterministic = deterministic;
    execute(lesson, r, Direction::kBackward);
    const std::string changed = changed_input(c, r, in);
    if (!changed.empty()) return fail(c, "the lesson modified its input " + changed);
    const ref::Gradients want = ref::backward(c.problem(), in.values, bi.dout_values);
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

Outcome check_tile_counts(const LessonInfo& lesson, const Case& c, Direction dir) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = dir == Direction::kForward ? prepare(lesson, c, in) : prepare_backward(lesson, c, in, BackwardInputs(c, in));
    const int64_t records = (int64_t(std::max(c.seqlen_q, c.seqlen_k)) / 16 + 2) * c.batch * c.heads_q;
    Buffer counts(lesson.memory, size_t(records) * kTileRecord * 4, "tile_counts");
    const std::vector<int> zeros(size_t(records) * kTileRecord, 0);
    counts.upload(zeros.data(), counts.bytes());
    r.p.tile_counts = static_cast<int*>(counts.data());
    execute(lesson, r, dir);
    counts.check_guards();
    const std::vector<int> rec = counts.to_host<int>();
    const int sq = c.seqlen_q, sk = c.seqlen_k, off = sk - sq, group = c.heads_q / c.heads_kv;
    int64_t written = 0, visited = 0, needed = 0;
    std::string first_bad;
    for (int64_t w = 0; w < records; ++w) {
      const int* x = &rec[size_t(w) * kTileRecord];
      if (x[2] <= 0) continue;  // no work tile of this number
      ++written;
      const bool keys_owned = x[3] >= kKeysOwned;
      const int tile = keys_owned ? x[3] - kKeysOwned : x[3], first = x[1], length = x[2];
      if (tile <= 0) return fail(c, "test error: tile record " + std::to_string(w) + " has tile size " + std::to_string(tile));
      int want = 0;
      if (!keys_owned) {  // rows first .. first + length - 1 visit key tiles of `tile` keys
        const int last = std::min(first + length, sq) - 1;
        const int k_end = first >= sq ? 0 : c.causal ? std::min(sk, last + off + 1) : sk;
        want = k_end > 0 ? (k_end + tile - 1) / tile : 0;
      } else {  // keys first .. first + length - 1 visit query tiles of `tile` rows, for each head of the group
        const int q_first = c.causal ? std::max(0, first - off) : 0, n_qtiles = (sq + tile - 1) / tile;
        want = first >= sk || q_first >= sq ? 0 : (n_qtiles - q_first / tile) * group;
      }
      visited += x[0];
      needed += want;
      if (x[0] != want && first_bad.empty())
        first_bad = std::string("work tile ") + std::to_string(w) + (keys_owned ? " (keys " : " (rows ") + std::to_string(first) +
                    " .. " + std::to_string(first + length - 1) + ") visited " + std::to_string(x[0]) + " tiles of " +
                    std::to_string(tile) + (keys_owned ? " query rows" : " keys") + "; the ones its " +
                    (keys_owned ? "keys are seen from" : "rows see") + " are " + std::to_string(want);
    }
    if (written == 0)
      return fail(c, "MISMATCH: no work tile recorded its tiles: is the lesson built with FA_COUNT_TILES (cmake: TILE_COUNTS), "
                     "and does it call fa::tile_count_begin?");
    if (!first_bad.empty()) {
      std::string text = "MISMATCH: " + first_bad + " (all work tiles: " + std::to_string(visited) + " tiles visited, " +
                         std::to_string(needed) + " needed)";
      if (visited > needed)
        text += format_hints({{"extra-tiles", "the output can be right and the kernel still slow: it visits tiles that hold no "
                                              "pair its rows see; stop at the last key the block's last row sees (j <= i + "
                                              "seqlen_k - seqlen_q), or start at the first query tile that sees the block's first key"}});
      return fail(c, text);
    }
    return {true, false, c.describe() + ": " + std::to_string(written) + " work tiles visited exactly the " +
                             std::to_string(needed) + " tiles their rows see"};
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
