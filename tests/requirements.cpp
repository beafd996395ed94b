// What each lesson must support. The suites read this, not the lesson's own declaration, so a
// lesson cannot dodge a case by declaring less; a lesson that declares more is tested on that too.
#include <map>
#include <stdexcept>
#include <string>

#include "support.hpp"

namespace fa::test {
namespace {

// Lessons 00-08 (docs/conventions.md, "Inputs and shapes"): causal and not, any N >= 1, seqlen_q != seqlen_k, the LSE,
// fp16 and bf16 storage, head dims 64 and 128.
Requirements core_forward() {
  Requirements r;
  r.features.fp16 = r.features.bf16 = true;
  r.features.causal = true;
  r.features.seqlen_q_ne_k = true;
  r.head_dims = {64, 128};
  return r;
}

// Lesson 09 adds RoPE to the core.
Requirements rope_forward() {
  Requirements r = core_forward();
  r.features.rope = true;
  return r;
}

// Lessons 10-11, the backward: the core's shapes and dtypes, gradients instead of outputs.
Requirements core_backward() { return core_forward(); }

// Lesson 14, the backward on Hopper: the core and grouped-query heads (MQA included).
Requirements gqa_backward() {
  Requirements r = core_backward();
  r.features.gqa = true;
  return r;
}

// Lesson 12, forward and backward: the core, grouped-query heads, packed variable-length batches
// (cu_seqlens) and the log-decay gate.
Requirements gqa_varlen_gate() {
  Requirements r = core_forward();
  r.features.gqa = r.features.varlen = r.features.gate = true;
  return r;
}

}  // namespace

const Requirements& required_for(int lesson) {
  static const std::map<int, Requirements> table = {
      {0, core_forward()},  // the reference exercise in Eigen
      {1, core_forward()},  // naive GPU
      {2, core_forward()},  // online softmax (and its CPU model)
      {3, core_forward()},  // FA1 loop order (and its CPU model)
      {4, core_forward()},  // FA2 loop order (and its CPU model)
      {5, core_forward()},  // exp2
      {6, core_forward()},  // causal early stop
      {7, core_forward()},  // tensor cores (mma.sync)
      {8, core_forward()},  // pipelining (cp.async, swizzle)
      {9, rope_forward()},  // RoPE fused (the forward suite runs without RoPE; lesson09 tests with it)
      {10, core_backward()},  // backward, clear (and its CPU model)
      {11, core_backward()},  // backward, fast (mma.sync)
      {12, gqa_varlen_gate()},  // GQA, varlen and the decay gate, forward and backward
      {13, core_forward()},  // Hopper: TMA, mbarriers, wgmma (sm_90a)
      {14, gqa_backward()},  // Hopper backward: TMA, wgmma, dQ by atomics or in order (sm_90a)
  };
  const auto it = table.find(lesson);
  if (it == table.end())
    throw std::logic_error("tests/requirements.cpp has no requirements for lesson " + std::to_string(lesson));
  return it->second;
}

}  // namespace fa::test
