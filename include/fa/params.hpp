// The one interface every lesson implements: the parameters of an attention call, the
// features a lesson declares, and the errors the runtime raises. Plain C++ (no Eigen, no
// CUDA device code), so .cu and .cpp files both include it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>  // cudaStream_t

#include "fa/problem.hpp"  // fa::Problem, fa::DType

namespace fa {


// Where a lesson reads and writes its tensors: lesson 00 works on the host, the rest on the GPU.
enum class Memory { kHost, kDevice };

// Strides in elements; the last dimension (head_dim) always has stride 1.
struct Strides {
  int64_t batch = 0, head = 0, row = 0;
};

// One attention call. Tensors are (batch, heads, seqlen, head_dim) described by strides, or,
// for varlen, packed (total_tokens, heads, head_dim) with cu_seqlens (batch = number of sequences).
// Conventions (docs/conventions.md): causal mask bottom-right aligned (key j visible to query i iff
// j <= i + seqlen_k - seqlen_q); LSE in natural log, fp32, (batch, heads_q, seqlen_q) or
// (heads_q, total_q) for varlen; a fully masked row has O = 0 and LSE = +inf.
struct AttnParams {
  int batch = 0, heads_q = 0, heads_kv = 0;
  int seqlen_q = 0, seqlen_k = 0;  // for varlen: the longest sequence (max_seqlen)
  int head_dim = 0;
  DType dtype = DType::kF16;
  float scale = 0.f;  // softmax scale; fill with default_scale(head_dim) unless a lesson adds its own
  bool causal = false;

  const void* q = nullptr;  // inputs, in `dtype`
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;        // output, in `dtype`
  float* lse = nullptr;     // output, fp32
  Strides q_stride, k_stride, v_stride, o_stride;

  // Varlen (lesson 12): int32 prefix sums of length batch + 1; null for padded batches.
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  int total_q = 0, total_k = 0;

  // RoPE (lesson 09): fp32 tables (positions, head_dim / 2) computed in fp64 on the host.
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  int rope_positions = 0;

  // Log-decay gate (lesson 12): fp32 g of shape (batch, heads_q, seqlen_k), or (heads_q, total_k).
  const float* gate = nullptr;

  // Backward (lessons 10-11): dO in, dQ dK dV out (in `dtype`), dg out (fp32, like gate).
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* dgate = nullptr;
  Strides do_stride, dq_stride, dk_stride, dv_stride;
  bool deterministic = false;

  // Which of the lesson's variants runs the call (LessonInfo::variants; 0: the lesson's default).
  int variant = 0;

  // Test builds only (FA_COUNT_TILES, fa/device.cuh): per work tile, the tiles it visited, in
  // records of kTileRecord ints.
  int* tile_counts = nullptr;

  bool is_varlen() const { return cu_seqlens_q != nullptr; }
  // The rows of one head on the q side (q, o, dout, dq) and on the k side: batch x seqlen, or packed.
  int64_t tokens_q() const { return is_varlen() ? total_q : int64_t(batch) * seqlen_q; }
  int64_t tokens_k() const { return is_varlen() ? total_k : int64_t(batch) * seqlen_k; }
};

// A tile_counts record: {tiles visited, the work tile's first row (or key), its rows (or keys),
// the size of the tiles it visits (+ kKeysOwned: a backward block owning keys, visiting query tiles)}.
constexpr int kTileRecord = 4;
constexpr int kKeysOwned = 1 << 30;

double default_scale(int head_dim);

// Fills the strides of contiguous (batch, heads, seqlen, head_dim) tensors, or of packed
// (total, heads, head_dim) ones when p.is_varlen().
void set_contiguous_strides(AttnParams& p);

// A kernel call's params for `prob`: its shapes, storage type, mask and scale, total_q and total_k
// (varlen), and the strides of its layout (contiguous, packed when varlen, or (batch, seqlen,
// heads, head_dim) when prob.bshd). The caller adds the pointers (and cu_seqlens, the gate's and
// RoPE's), the variant and the backward's flags.
AttnParams params_for(const Problem& prob);

using ForwardFn = void (*)(const AttnParams&, cudaStream_t);
using BackwardFn = void (*)(const AttnParams&, cudaStream_t);
struct TraceSink;  // fa/trace.hpp

// Another way a lesson runs the same call: a tile configuration, a dQ strategy, a step of a
// schedule. A lesson declares its variants by name (LessonInfo::variants, the first its default)
// and reads AttnParams::variant in its entry points; the runtime checks the index before any
// launch, the lesson's own tests run every variant (fa::test::check_every_variant), fa-bench
// --variant times one, and FA_TEST_VARIANT=<name> runs a lesson's whole suite on one (README, "For
// students", step 6).
struct Variant {
  std::string name;   // what fa-bench --variant and FA_TEST_VARIANT call it: "atomic", "config3"
  std::string about;  // one line: what it changes
  enum class Pass { kBoth, kForward, kBackward };
  Pass pass = Pass::kBoth;  // the entry point it is a variant of
  int head_dim = 0;         // 0: every head dim of the lesson; else this one only (a tile configuration)
};
inline const char* name(Variant::Pass p) {
  return p == Variant::Pass::kForward ? "forward" : p == Variant::Pass::kBackward ? "backward" : "forward and backward";
}

// A lesson's traced build (lessons 13 and 14; fa/trace.hpp): its kernel, instantiated with the
// trace on, records each recording thread's phases into a sink. The lesson only launches it; the
// host side (the sink's buffers, reading the records back, the CSV) is the tools' (tools/trace_host.hpp):
// fa-bench --trace FILE, and the lessons' GPU tests.
struct Tracer {
  // Runs the (validated) call through the traced kernel, writing into `sink`; throws
  // InvalidArgument before any launch for a call the traced build does not take.
  void (*run)(const AttnParams&, const TraceSink& sink, cudaStream_t) = nullptr;
  int64_t (*lanes)(const AttnParams&) = nullptr;  // the call's recording threads, `roles` a block
  int roles = 0;
  const char* (*phase_name)(int) = nullptr;
  int events = 0;                                 // records a lane holds, by default
  const char* label_column = "";                  // the CSV's first column: "step", "head_dim"
  std::string (*label)(const AttnParams&) = nullptr;
  bool backward = false;                          // it traces the backward (else the forward)
};

// What a lesson supports: its fa_add_lesson line in CMakeLists.txt declares it once (generated into
// fa_lesson_NN_declared()), its descriptor starts from it and its tests require it, so a lesson
// cannot dodge a case by declaring less.
struct Features {
  bool fp16 = false, bf16 = false;
  std::vector<int> head_dims;   // supported head dims; empty means any 1..256
  bool causal = false;
  bool seqlen_q_ne_k = false;   // seqlen_q != seqlen_k
  bool gqa = false;             // heads_q a multiple of heads_kv > 1 group
  bool any_strides = false;     // non-contiguous layouts through the strides
  bool varlen = false;
  bool rope = false;
  bool gate = false;
  bool index64 = false;         // offsets beyond 2^31 - 1 elements
  int alignment_bytes = 2;      // base pointers and row strides must be multiples of this
};

struct LessonInfo {
  const char* id = "";          // "00_reference"
  const char* title = "";
  Memory memory = Memory::kDevice;
  Features features;
  ForwardFn forward = nullptr;
  BackwardFn backward = nullptr;  // null before lesson 10
  std::vector<Variant> variants;  // empty: the lesson runs one way; else [0] is its default
  // Launch limits the runtime checks before any call (validate_forward, run_forward), so that no
  // kernel file repeats them: batch * heads_q at most this (0: no limit; 65535 where (batch, head)
  // is a grid's y or z), and the GPU it needs (90: Hopper, sm_90a; 0: any).
  int64_t max_batch_heads = 0;
  int needs_sm = 0;
  Tracer tracer;  // run null: no traced build
  // fa-bench skips cases with more scores (batch * heads * seqlen_q * seqlen_k) than this (0: no
  // limit), printing the reason: the naive lessons' N^2 workspace would take tens of GB at 16k.
  int64_t bench_max_scores = 0;
  const char* bench_limit_reason = "";
};

// The descriptor of a CPU model of a kernel (lessons 02-04 and the tests' mutant model): host
// memory, fp16 and bf16, any head dim, causal, seqlen_q != seqlen_k, GQA, any strides.
LessonInfo cpu_model(const char* id, const char* title, ForwardFn forward);

// Errors. Everything the runtime rejects is an fa::Error with a message that names the lesson
// and the problem; CUDA failures are CudaError with file:line.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct InvalidArgument : Error {
  using Error::Error;
};
struct NotImplemented : Error {
  using Error::Error;
};
struct CudaError : Error {
  using Error::Error;
};

// A skeleton lists the TODOs its student has not written yet; the solution's list is empty.
using TodoList = std::vector<const char*>;
// Throws NotImplemented("lesson NN not implemented yet: <first TODO>  (... when you have written it,
// delete its line from kTodosLeft in <file>)") if `todos` is not empty. The TODO named is the one
// left with the lowest number, whatever the list's order.
void throw_if_todos_left(const char* lesson_id, const TodoList& todos);
// The same over several files' lists of one lesson, whose numbers interleave (kernel.cu's TODOs 4
// and 5, then a header's 6).
void throw_if_todos_left(const char* lesson_id, std::initializer_list<const TodoList*> lists);

// Checks `p` against what `lesson` supports and against the rules every call obeys (shapes,
// pointers, alignment, 32-bit offsets, the variant, the launch limits). Throws InvalidArgument
// naming the lesson and the problem.
void validate_forward(const LessonInfo& lesson, const AttnParams& p);

// The index of `lesson`'s variant called `name` ("" or "default": 0), or -1 if it has none of that
// name; variant_index throws InvalidArgument naming the lesson's variants instead of -1.
int find_variant(const LessonInfo& lesson, const std::string& name);
int variant_index(const LessonInfo& lesson, const std::string& name);
// Does variant v of `lesson` run the given entry point at head dim d?
bool variant_applies(const LessonInfo& lesson, int v, Variant::Pass pass, int head_dim);

// The one way tests and tools call a lesson: validate, check the GPU (LessonInfo::needs_sm), then
// run (no launch on bad input).
void run_forward(const LessonInfo& lesson, const AttnParams& p, cudaStream_t stream = nullptr);

// The backward call (lessons 10 on): q, k, v, o, lse (the forward's outputs) and dout are its
// inputs; dq, dk, dv (and dgate with the gate) its outputs, every one with its own strides.
// validate_backward checks all of them on top of validate_forward's rules; run_backward
// validates, then runs the lesson's backward.
void validate_backward(const LessonInfo& lesson, const AttnParams& p);
void run_backward(const LessonInfo& lesson, const AttnParams& p, cudaStream_t stream = nullptr);

}  // namespace fa
