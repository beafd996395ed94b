// Input validation: every rule a call must obey, checked on the host before any launch, with a
// message that names the lesson and the problem. Nothing is silently truncated or clamped.
#include <climits>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <sstream>
#include <tuple>
#include <vector>

#include "fa/params.hpp"

namespace fa {
namespace {

class Checker {
 public:
  explicit Checker(const LessonInfo& l) : lesson_(l) {}
  template <class... A> [[noreturn]] void fail(const A&... parts) const {
    std::ostringstream os;
    os << "lesson " << lesson_.id << ": ";
    (os << ... << parts);
    throw InvalidArgument(os.str());
  }
  void need(bool feature, const char* what) const {
    if (!feature) fail("does not support ", what, " (the request needs it)");
  }
  void positive(int v, const char* name) const {
    if (v < 1) fail(name, " must be >= 1, got ", v);
  }
  void pointer(const void* ptr, const char* name) const {
    if (ptr == nullptr) fail(name, " is a null pointer");
    const int a = lesson_.features.alignment_bytes;
    if (reinterpret_cast<uintptr_t>(ptr) % a != 0)
      fail(name, " must be aligned to ", a, " bytes, got address ", ptr);
  }
  // Largest element offset of a (batch, heads, rows, head_dim) view must fit in 32 bits unless
  // the lesson indexes with 64 bits; row strides must keep every row aligned.
  void view(const Strides& s, int batch, int heads, int rows, int dim, const char* name) const {
    if (s.row < 1 || s.head < 0 || s.batch < 0)
      fail(name, " has invalid strides (batch ", s.batch, ", head ", s.head, ", row ", s.row, ")");
    const int per = lesson_.features.alignment_bytes / 2;
    if (per > 1 && (s.row % per || s.head % per || s.batch % per))
      fail(name, " strides must be multiples of ", per, " elements for ", lesson_.features.alignment_bytes,
           "-byte aligned rows, got (", s.batch, ", ", s.head, ", ", s.row, ")");
    const int64_t last = int64_t(batch - 1) * s.batch + int64_t(heads - 1) * s.head +
                         int64_t(rows - 1) * s.row + (dim - 1);
    if (last > INT32_MAX && !lesson_.features.index64)
      fail(name, " has offsets up to ", last, ", beyond 32-bit indexing (2^31 - 1); this lesson indexes with int");
  }
  void contiguous(const Strides& s, const Strides& want, const char* name) const {
    if (lesson_.features.any_strides) return;
    if (s.row != want.row || s.head != want.head || (want.batch != 0 && s.batch != want.batch))
      fail(name, " must be contiguous for this lesson: strides (batch, head, row) should be (", want.batch, ", ",
           want.head, ", ", want.row, "), got (", s.batch, ", ", s.head, ", ", s.row, ")");
  }

 private:
  const LessonInfo& lesson_;
};

// The contents of cu_seqlens: they start at 0, never decrease, end at total_q / total_k, and no
// sequence is longer than seqlen_q / seqlen_k (the longest, which sizes the kernels' grids). On
// a GPU lesson they live in device memory: one small synchronous copy, the price of checking
// before any launch (a caller that trusts its cu_seqlens calls the lesson's entry directly).
void check_cu_seqlens(const Checker& c, const LessonInfo& lesson, const AttnParams& p) {
  std::vector<int> q(size_t(p.batch) + 1), k(size_t(p.batch) + 1);
  const size_t bytes = q.size() * sizeof(int);
  if (lesson.memory == Memory::kDevice) {
    const cudaError_t eq = cudaMemcpy(q.data(), p.cu_seqlens_q, bytes, cudaMemcpyDeviceToHost);
    const cudaError_t ek = cudaMemcpy(k.data(), p.cu_seqlens_k, bytes, cudaMemcpyDeviceToHost);
    if (eq != cudaSuccess || ek != cudaSuccess)
      c.fail("cannot read cu_seqlens_q/k (batch + 1 = ", p.batch + 1, " int32 each, device memory): ",
             cudaGetErrorString(eq != cudaSuccess ? eq : ek));
  } else {
    std::copy(p.cu_seqlens_q, p.cu_seqlens_q + q.size(), q.begin());
    std::copy(p.cu_seqlens_k, p.cu_seqlens_k + k.size(), k.begin());
  }
  struct Side {
    const std::vector<int>* cu;
    const char *name, *total_name, *longest_name;
    int64_t total;
    int longest;
  };
  for (auto [cu, name, total_name, longest_name, total, longest] :
       {Side{&q, "cu_seqlens_q", "total_q", "seqlen_q", p.total_q, p.seqlen_q},
        Side{&k, "cu_seqlens_k", "total_k", "seqlen_k", p.total_k, p.seqlen_k}}) {
    if ((*cu)[0] != 0) c.fail(name, "[0] must be 0, got ", (*cu)[0]);
    for (int b = 0; b < p.batch; ++b) {
      const int len = (*cu)[b + 1] - (*cu)[b];
      if (len < 0) c.fail(name, " must not decrease: entry ", b + 1, " is ", (*cu)[b + 1], " after ", (*cu)[b]);
      if (len > longest)
        c.fail("sequence ", b, " has ", len, " tokens in ", name, ", more than the longest given (",
               longest_name, " = ", longest, ")");
    }
    if ((*cu)[p.batch] != total)
      c.fail(name, "[batch] must equal ", total_name, " (", total, "), got ", (*cu)[p.batch]);
  }
}

// "a, b, c": the names of the lesson's variants.
std::string variant_names(const LessonInfo& lesson) {
  std::string names;
  for (const Variant& v : lesson.variants) names += (names.empty() ? "" : ", ") + v.name;
  return names.empty() ? "none" : names;
}

// p.variant names one of the lesson's variants, of this entry point and head dim.
void check_variant(const Checker& c, const LessonInfo& lesson, const AttnParams& p, Variant::Pass pass) {
  const int n = static_cast<int>(lesson.variants.size());
  if (p.variant == 0 && n == 0) return;  // one way only: variant 0
  if (p.variant < 0 || p.variant >= n) c.fail("has no variant ", p.variant, " (its variants, from 0: ", variant_names(lesson), ")");
  const Variant& v = lesson.variants[p.variant];
  if (v.pass != Variant::Pass::kBoth && v.pass != pass)
    c.fail("variant ", v.name, " is a variant of the ", name(v.pass), ", not of the ", name(pass));
  if (v.head_dim != 0 && v.head_dim != p.head_dim)
    c.fail("variant ", v.name, " runs head_dim ", v.head_dim, " only, got ", p.head_dim);
}

// The forward's rules, which the backward's include: `pass` says which entry point is called.
void validate_call(const LessonInfo& lesson, const AttnParams& p, Variant::Pass pass) {
  const Checker c(lesson);
  const Features& f = lesson.features;
  c.positive(p.batch, "batch");
  c.positive(p.heads_q, "heads_q");
  c.positive(p.heads_kv, "heads_kv");
  c.positive(p.seqlen_q, "seqlen_q");
  c.positive(p.seqlen_k, "seqlen_k");
  c.positive(p.head_dim, "head_dim");
  if (p.heads_q % p.heads_kv != 0)
    c.fail("heads_q (", p.heads_q, ") must be a multiple of heads_kv (", p.heads_kv, ")");
  if (p.heads_q != p.heads_kv) c.need(f.gqa, "grouped-query heads (heads_q != heads_kv)");
  if (p.dtype == DType::kF16) c.need(f.fp16, "fp16");
  if (p.dtype == DType::kBF16) c.need(f.bf16, "bf16");
  if (f.head_dims.empty()) {
    if (p.head_dim > 256) c.fail("head_dim must be at most 256, got ", p.head_dim);
  } else {
    bool ok = false;
    std::ostringstream list;
    for (size_t i = 0; i < f.head_dims.size(); ++i) {
      ok = ok || f.head_dims[i] == p.head_dim;
      list << (i ? ", " : "") << f.head_dims[i];
    }
    if (!ok) c.fail("head_dim must be one of {", list.str(), "}, got ", p.head_dim);
  }
  if (p.causal) c.need(f.causal, "causal masking");
  check_variant(c, lesson, p, pass);
  if (lesson.max_batch_heads > 0 && int64_t(p.batch) * p.heads_q > lesson.max_batch_heads)
    c.fail("batch * heads_q must be at most ", lesson.max_batch_heads, " (",
           lesson.max_batch_heads == 65535 ? "the grid's y or z" : "the launch's 32-bit coordinates", "), got ",
           int64_t(p.batch) * p.heads_q);
  if (!std::isfinite(p.scale) || p.scale <= 0.f)
    c.fail("scale must be finite and > 0, got ", p.scale, " (use fa::default_scale(head_dim))");
  for (auto [ptr, name] : {std::pair<const void*, const char*>{p.q, "q"}, {p.k, "k"}, {p.v, "v"}, {p.o, "o"}})
    c.pointer(ptr, name);
  if (p.lse == nullptr) c.fail("lse is a null pointer (every lesson writes the LSE)");
  if (reinterpret_cast<uintptr_t>(p.lse) % 4 != 0) c.fail("lse must be 4-byte aligned");

  if (p.is_varlen() || p.cu_seqlens_k != nullptr) {
    c.need(f.varlen, "variable-length batches (cu_seqlens)");
    if (p.cu_seqlens_q == nullptr || p.cu_seqlens_k == nullptr)
      c.fail("varlen needs both cu_seqlens_q and cu_seqlens_k");
    c.positive(p.total_q, "total_q");
    c.positive(p.total_k, "total_k");
    c.view(p.q_stride, 1, p.heads_q, p.total_q, p.head_dim, "q");
    c.view(p.o_stride, 1, p.heads_q, p.total_q, p.head_dim, "o");
    c.view(p.k_stride, 1, p.heads_kv, p.total_k, p.head_dim, "k");
    c.view(p.v_stride, 1, p.heads_kv, p.total_k, p.head_dim, "v");
    if (int64_t(p.heads_q) * p.total_q > INT32_MAX && !f.index64) c.fail("lse has more than 2^31 - 1 elements");
    check_cu_seqlens(c, lesson, p);
  } else {
    if (p.seqlen_q != p.seqlen_k) c.need(f.seqlen_q_ne_k, "seqlen_q != seqlen_k");
    const Strides want_q{int64_t(p.heads_q) * p.seqlen_q * p.head_dim, int64_t(p.seqlen_q) * p.head_dim, p.head_dim};
    const Strides want_k{int64_t(p.heads_kv) * p.seqlen_k * p.head_dim, int64_t(p.seqlen_k) * p.head_dim, p.head_dim};
    c.contiguous(p.q_stride, want_q, "q");
    c.contiguous(p.o_stride, want_q, "o");
    c.contiguous(p.k_stride, want_k, "k");
    c.contiguous(p.v_stride, want_k, "v");
    c.view(p.q_stride, p.batch, p.heads_q, p.seqlen_q, p.head_dim, "q");
    c.view(p.o_stride, p.batch, p.heads_q, p.seqlen_q, p.head_dim, "o");
    c.view(p.k_stride, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, "k");
    c.view(p.v_stride, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, "v");
    if (int64_t(p.batch) * p.heads_q * p.seqlen_q > INT32_MAX && !f.index64)
      c.fail("lse has more than 2^31 - 1 elements");
  }

  if (p.rope_cos != nullptr || p.rope_sin != nullptr) {
    c.need(f.rope, "RoPE");
    if (p.rope_cos == nullptr || p.rope_sin == nullptr) c.fail("RoPE needs both rope_cos and rope_sin");
    c.pointer(p.rope_cos, "rope_cos");  // the kernels read the tables 16 bytes at a time
    c.pointer(p.rope_sin, "rope_sin");
    if (p.head_dim % 2 != 0) c.fail("RoPE needs an even head_dim, got ", p.head_dim);
    if (p.seqlen_q > p.seqlen_k)
      c.fail("RoPE needs seqlen_q <= seqlen_k (query i sits at position i + seqlen_k - seqlen_q), got ",
             p.seqlen_q, " > ", p.seqlen_k);
    if (p.rope_positions < p.seqlen_k)
      c.fail("RoPE tables cover ", p.rope_positions, " positions, need ", p.seqlen_k);
  }
  if (p.gate != nullptr) {
    c.need(f.gate, "the log-decay gate");
    if (!p.causal) c.fail("the log-decay gate is defined for causal attention only");
    if (reinterpret_cast<uintptr_t>(p.gate) % 4 != 0) c.fail("gate must be 4-byte aligned (fp32)");
  }
}

}  // namespace

void validate_forward(const LessonInfo& lesson, const AttnParams& p) { validate_call(lesson, p, Variant::Pass::kForward); }

int find_variant(const LessonInfo& lesson, const std::string& name) {
  if (name.empty() || name == "default") return 0;
  for (size_t i = 0; i < lesson.variants.size(); ++i)
    if (lesson.variants[i].name == name) return static_cast<int>(i);
  return -1;
}

int variant_index(const LessonInfo& lesson, const std::string& name) {
  const int v = find_variant(lesson, name);
  if (v < 0) Checker(lesson).fail("has no variant '", name, "' (its variants: ", variant_names(lesson), ")");
  return v;
}

bool variant_applies(const LessonInfo& lesson, int v, Variant::Pass pass, int head_dim) {
  if (lesson.variants.empty()) return v == 0;
  if (v < 0 || v >= static_cast<int>(lesson.variants.size())) return false;
  const Variant& x = lesson.variants[v];
  return (x.pass == Variant::Pass::kBoth || x.pass == pass) && (x.head_dim == 0 || x.head_dim == head_dim);
}

void validate_backward(const LessonInfo& lesson, const AttnParams& p) {
  const Checker c(lesson);
  if (lesson.backward == nullptr) c.fail("has no backward entry point (backward starts at lesson 10)");
  validate_call(lesson, p, Variant::Pass::kBackward);  // the shapes, q, k, v, o (now an input) and lse
  for (auto [ptr, name] : {std::pair<const void*, const char*>{p.dout, "dout"}, {p.dq, "dq"}, {p.dk, "dk"}, {p.dv, "dv"}})
    c.pointer(ptr, name);
  if (p.is_varlen()) {
    c.view(p.do_stride, 1, p.heads_q, p.total_q, p.head_dim, "dout");
    c.view(p.dq_stride, 1, p.heads_q, p.total_q, p.head_dim, "dq");
    c.view(p.dk_stride, 1, p.heads_kv, p.total_k, p.head_dim, "dk");
    c.view(p.dv_stride, 1, p.heads_kv, p.total_k, p.head_dim, "dv");
  } else {
    const Strides want_q{int64_t(p.heads_q) * p.seqlen_q * p.head_dim, int64_t(p.seqlen_q) * p.head_dim, p.head_dim};
    const Strides want_k{int64_t(p.heads_kv) * p.seqlen_k * p.head_dim, int64_t(p.seqlen_k) * p.head_dim, p.head_dim};
    c.view(p.do_stride, p.batch, p.heads_q, p.seqlen_q, p.head_dim, "dout");
    c.view(p.dq_stride, p.batch, p.heads_q, p.seqlen_q, p.head_dim, "dq");
    c.view(p.dk_stride, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, "dk");
    c.view(p.dv_stride, p.batch, p.heads_kv, p.seqlen_k, p.head_dim, "dv");
    c.contiguous(p.do_stride, want_q, "dout");
    c.contiguous(p.dq_stride, want_q, "dq");
    c.contiguous(p.dk_stride, want_k, "dk");
    c.contiguous(p.dv_stride, want_k, "dv");
  }
  if (p.gate != nullptr && p.dgate == nullptr) c.fail("dgate is a null pointer (the gate's gradient is an output)");
  if (p.gate == nullptr && p.dgate != nullptr) c.fail("dgate is given without a gate");
  if (reinterpret_cast<uintptr_t>(p.dgate) % 4 != 0) c.fail("dgate must be 4-byte aligned (fp32)");
}

}  // namespace fa
