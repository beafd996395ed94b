// The run of one case: its buffers in the lesson's memory, the params that point into them, the
// call through the one entry point, and what is read back (tests/run.hpp).
#include <stdexcept>

#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/random.hpp"
#include "run.hpp"

namespace fa::test {

// What a pass writes: the buffers poisoned before it runs.
std::vector<Buffer*> outputs(Run& r, Direction pass) {
  if (pass == Direction::kForward) return {&r.o, &r.lse};
  std::vector<Buffer*> out{&r.dq, &r.dk, &r.dv};
  if (r.dgate.bytes() > 0) out.push_back(&r.dgate);
  return out;
}

Run prepare(const LessonInfo& lesson, const Case& c, const Inputs& in) {
  if (c.varlen() && (c.bshd || c.rope() || !c.sample_rows.empty()))
    throw std::invalid_argument("test case error: bshd, rope and sampled rows are for dense cases, not varlen");
  Run r;
  const size_t nq = in.q.size() * 2, nk = in.k.size() * 2;
  r.q = Buffer(lesson.memory, nq, "q");
  r.k = Buffer(lesson.memory, nk, "k");
  r.v = Buffer(lesson.memory, nk, "v");
  r.o = Buffer(lesson.memory, nq, "o");
  r.lse = Buffer(lesson.memory, size_t(c.total_q()) * c.heads_q * 4, "lse");
  if (c.bshd) {
    r.q.upload(to_bshd(in.q, c.batch, c.heads_q, c.seqlen_q, c.head_dim).data(), nq);
    r.k.upload(to_bshd(in.k, c.batch, c.heads_kv, c.seqlen_k, c.head_dim).data(), nk);
    r.v.upload(to_bshd(in.v, c.batch, c.heads_kv, c.seqlen_k, c.head_dim).data(), nk);
  } else {
    r.q.upload(in.q.data(), nq);
    r.k.upload(in.k.data(), nk);
    r.v.upload(in.v.data(), nk);
  }
  AttnParams& p = r.p = params_for(c);  // shapes, scale and strides (bshd or packed too)
  p.variant = variant_of(lesson, c, Direction::kForward);
  p.q = r.q.data();
  p.k = r.k.data();
  p.v = r.v.data();
  p.o = r.o.data();
  p.lse = static_cast<float*>(r.lse.data());
  if (c.varlen()) {
    r.cu_q = Buffer(lesson.memory, c.cu_seqlens_q.size() * 4, "cu_seqlens_q");
    r.cu_k = Buffer(lesson.memory, c.cu_seqlens_k.size() * 4, "cu_seqlens_k");
    r.cu_q.upload(c.cu_seqlens_q.data(), r.cu_q.bytes());
    r.cu_k.upload(c.cu_seqlens_k.data(), r.cu_k.bytes());
    p.cu_seqlens_q = static_cast<const int*>(r.cu_q.data());
    p.cu_seqlens_k = static_cast<const int*>(r.cu_k.data());
  }
  if (c.gate) {
    r.gate = Buffer(lesson.memory, in.g.size() * 4, "gate");
    r.gate.upload(in.g.data(), r.gate.bytes());
    p.gate = static_cast<const float*>(r.gate.data());
  }
  if (c.rope()) {
    const RopeTables& t = r.rope = rope_tables(c.seqlen_k, c.head_dim, c.rope_base);
    r.rope_cos = Buffer(lesson.memory, t.cos.size() * 4, "rope_cos");
    r.rope_sin = Buffer(lesson.memory, t.sin.size() * 4, "rope_sin");
    r.rope_cos.upload(t.cos.data(), t.cos.size() * 4);
    r.rope_sin.upload(t.sin.data(), t.sin.size() * 4);
    p.rope_cos = static_cast<const float*>(r.rope_cos.data());
    p.rope_sin = static_cast<const float*>(r.rope_sin.data());
    p.rope_positions = t.positions;
  }
  return r;
}

void sync(const LessonInfo& lesson) {
  if (lesson.memory == Memory::kDevice) FA_CUDA_CHECK(cudaDeviceSynchronize());
}

// Poison the outputs, run through the one entry point, and check the guards of every buffer. A
// write into a guard is a wrong result like any other, which the suite looks for (the guards are
// filled as the outputs are poisoned): it fails as a MISMATCH, so a mutant that writes past its
// output counts as rejected by the suite's checks (maintainers/run_mutant.sh), not as a crash.
void execute(const LessonInfo& lesson, Run& r, Direction pass) {
  for (Buffer* b : outputs(r, pass)) b->poison();
  sync(lesson);
  if (pass == Direction::kForward) run_forward(lesson, r.p);
  else run_backward(lesson, r.p);
  sync(lesson);
  for (const Buffer* b : r.buffers()) {
    try {
      b->check_guards();
    } catch (const Error& e) {
      throw Error(std::string("MISMATCH: ") + e.what());
    }
  }
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
  if (!c.rope()) return r;
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

BackwardInputs::BackwardInputs(const Case& c, const Inputs& in) {
  const ref::Forward f = ref::forward(c.reference_problem(), in.values);
  std::vector<double> unused;
  round_to(c.dtype, f.o, o, unused);
  lse.assign(f.lse.begin(), f.lse.end());
  Rng rng(seed_for(c.describe() + " dout"));
  std::vector<double> raw(f.o.size());
  for (double& x : raw) x = rng.normal();
  round_to(c.dtype, raw, dout, dout_values);
}

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

Outcome fail(const Case& c, const std::string& what) {
  return {false, false, c.describe() + "\n  " + what, 0, c.describe() + ": " + what.substr(0, what.find('\n'))};
}

}  // namespace fa::test
