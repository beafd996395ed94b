// The run of one case, internal to the suites' support (tests/cases.cpp, run.cpp, verdict.cpp and
// gradients.cpp; a test includes support.hpp, not this): the buffers of a call in the lesson's
// memory, the call through the one entry point, what the checks read back, and the reports' shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fa/buffer.hpp"
#include "fa/rope.hpp"
#include "layout.hpp"
#include "support.hpp"

namespace fa::test {

// A tensor's dimensions and their names, for the reports: (b, h, i or j, d) dense, (t, h, d)
// varlen; the LSE, g and dg: (b, h, i or j) dense, (h, t) varlen.
struct Shape {
  std::vector<int> dims;
  std::vector<std::string> names;
};
Shape tensor_shape(const Case& c, bool q_side);
Shape vector_shape(const Case& c, bool q_side);

// Rounds `raw` to the storage type: the storage bits and their values.
void round_to(DType t, const std::vector<double>& raw, std::vector<uint16_t>& bits, std::vector<double>& values);

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
std::vector<Buffer*> outputs(Run& r, Direction pass);
// The case's inputs in the lesson's memory, and the params of a forward call on them (its variant too).
Run prepare(const LessonInfo& lesson, const Case& c, const Inputs& in);
void sync(const LessonInfo& lesson);
// Poison the outputs, run through the one entry point, and check the guards of every buffer (a
// guard written fails as a MISMATCH).
void execute(const LessonInfo& lesson, Run& r, Direction pass = Direction::kForward);
// A 16-bit tensor read back in the reference's layout (bshd cases back from their strides), as
// storage bits and as values.
std::vector<uint16_t> read_bits(const Case& c, const Buffer& buf, bool q_side);
std::vector<double> read_values(const Case& c, const Buffer& buf, bool q_side);
// The inputs must come back untouched: "" if they did, else the name of the first one that changed.
std::string changed_input(const Case& c, const Run& r, const Inputs& in);
// What the reference is given (with RoPE, Q and K rotated and rounded as the kernels see them).
ref::Inputs reference_inputs(const Case& c, const Inputs& in, const RopeTables& t);
bool all_bytes(const Buffer& b, uint8_t value);

// ---- Backward ------------------------------------------------------------------------------
// A backward run's inputs besides q, k, v: the forward's outputs from the fp64 reference (O
// rounded to the storage type, the LSE in fp32: what a correct forward stores) and a random dO.
// Taking them from the reference, not from a lesson's forward, keeps a backward failure the
// backward's own; the forward suites check the forward.
struct BackwardInputs {
  std::vector<uint16_t> o, dout;  // storage bits, in the layout of q
  std::vector<float> lse;
  std::vector<double> dout_values;
  BackwardInputs(const Case& c, const Inputs& in);
};
// The run of a backward call: prepare's, with O, the LSE, dO and the gradients' buffers.
Run prepare_backward(const LessonInfo& lesson, const Case& c, const Inputs& in, const BackwardInputs& bi);

// A failed case: its description and what failed.
Outcome fail(const Case& c, const std::string& what);
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

}  // namespace fa::test
