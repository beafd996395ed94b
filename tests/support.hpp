// What the shared suites are made of: cases (shape, dtype, causal, input pattern), seeded inputs
// rounded to the storage type, and runs of a lesson with poisoned outputs, guard regions and an
// fp64 reference comparison. One interface, used by every lesson's suite and by the mutants, written
// by job: the cases and their inputs (cases.cpp), a run of one call (run.cpp, run.hpp), the
// forward's verdicts (verdict.cpp) and the backward's (gradients.cpp), and the reference
// comparisons fa-bench shares (sampled.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fa/compare.hpp"
#include "fa/params.hpp"
#include "reference.hpp"

namespace fa::test {

// Inputs randn never produces, each with the mutant it exists to catch.
enum class Pattern {
  kRandn,
  kLargePositive,   // logits ~ +80: exp without the max subtracted overflows fp32 (inf/inf = NaN)
  kLargeNegative,   // logits ~ -150: a running max started at 0 instead of -inf underflows l to 0
  kMaxInLastTile,   // logits grow with the key index: a missing rescale of the accumulator shows
  kAllEqual,        // every key equal: P is uniform over the visible keys, so an off-by-one mask shows
};
const char* name(Pattern p);

// A case: a problem (fa/problem.hpp: shape, dtype, mask, varlen lengths, RoPE, gate, layout) and
// how the suite runs it. RoPE is the course's (rope_base = kRopeBase, fp32 tables of seqlen_k
// positions); the suite gives the reference the rotated inputs (reference_problem). Varlen: set the
// lengths with set_lengths (one per sequence, 0: an empty sequence), which keeps batch and
// seqlen_q/k in step; the tensors are then packed (total, heads, head_dim) with cu_seqlens.
struct Case : Problem {
  Pattern pattern = Pattern::kRandn;  // the adversarial patterns are for dense cases
  std::vector<int> sample_rows;       // compare only these query rows (large problems, dense only); empty: all
  // The lesson's variant to run, by name (LessonInfo::variants); "": FA_TEST_VARIANT's where it
  // applies to the case's pass and head dim, else the lesson's default.
  std::string variant;

  std::string describe() const;
  // What the reference computes: the problem without RoPE, since the suite hands it Q and K
  // rotated already, as the kernel's tensor cores see them (reference_inputs).
  Problem reference_problem() const;
};

// A dense case: `batch` batches of hq query heads on hkv K/V heads, seqlen_q x seqlen_k, random inputs.
Case dense_case(int seqlen_q, int seqlen_k, int head_dim, DType t, bool causal, int heads_q = 1, int heads_kv = 1, int batch = 1);

struct Inputs {
  std::vector<uint16_t> q, k, v;  // storage bits in the reference's layouts (reference/reference.hpp):
                                  // (batch, heads, seqlen, head_dim), or (total, heads, head_dim) varlen
  std::vector<float> g;           // the gate, fp32, when Case::gate: (batch, heads_q, seqlen_k) or (heads_q, total_k)
  ref::Inputs values;             // the same rounded values in fp64, for the reference
};
// q, k and v are randn (or the case's pattern) rounded to the storage type. The gate is a log
// decay, g = c_h log(sigmoid(x)) with x randn and a magnitude per query head h cycling through
// c = 1, 0.1, 0.01, 0: heads that forget within a few tokens, within a few hundred, hardly, and not at all.
Inputs make_inputs(const Case& c, uint64_t seed);

struct Outcome {
  bool ok = true;
  bool not_implemented = false;  // the lesson threw NotImplemented: stop this test case
  std::string text;              // the full report (the case, the worst elements, hints)
  double max_abs_err = 0;        // of O, over the compared elements (check_forward)
  std::string summary;           // one line: the case and what failed (a test case's later failures)
};

// The failures reported so far in the running doctest test case (tests/check.hpp reports the
// first in full, later ones in a line each; the test main resets it at each test case's start).
int& failures_in_test_case();
// Hints cost a few what-if computations: they are worked out for a test case's first failure only.
inline bool hints_wanted() { return failures_in_test_case() == 0; }

// Runs the lesson once on fresh inputs and compares O and LSE with the reference.
Outcome check_forward(const LessonInfo& lesson, const Case& c);
// Runs the lesson twice on the same inputs; O and LSE must be bitwise identical.
Outcome check_deterministic(const LessonInfo& lesson, const Case& c);
enum class Direction { kForward, kBackward };
// Breaks a valid call with `break_it`; the lesson must throw InvalidArgument whose message names
// the lesson and contains `expect`, and must not write the (poisoned) outputs.
Outcome check_rejected(const LessonInfo& lesson, const Case& c, const std::function<void(AttnParams&)>& break_it,
                       const std::string& expect, Direction dir = Direction::kForward);
// A case with a feature the lesson lacks (grouped-query heads, varlen, the gate, strides): it must
// be rejected with `expect`. That rejection comes from code every skeleton is given (the runtime's
// validation of the declared features), so it alone would earn a skeleton points: the lesson must
// first run the case's plain neighbour (one sequence of 17, one head, the same head dim, dtype and
// masking) in direction `dir`, and "not implemented yet" there stops the test as not started.
Outcome check_feature_rejected(const LessonInfo& lesson, const Case& c, const std::string& expect,
                               Direction dir = Direction::kForward);

// Backward (lessons 10 on). The inputs O and LSE come from the fp64 reference (O rounded to the
// storage type, LSE in fp32), dO is random; dQ, dK and dV (and dg with the gate) are poisoned,
// guarded, and compared with the reference gradients three ways (tests/gradients.cpp,
// check_gradient): elementwise atol + rtol |ref|, the relative error of the whole tensor, and
// FlashAttention-2's rule (at most kNaiveErrorFactor times the error of a naive computation at
// the storage precision).
Outcome check_backward(const LessonInfo& lesson, const Case& c, bool deterministic = false);
// Deterministic mode (p.deterministic): three runs on the same inputs, bitwise identical (dQ, dK,
// dV and dg).
Outcome check_backward_deterministic(const LessonInfo& lesson, const Case& c);

// ---- The reference comparisons themselves (tests/sampled.cpp), shared by the suites and fa-bench.
// The forward: the reference's O and LSE for `prob` (the inputs as the reference takes them: Q and
// K rotated already under RoPE), at `rows` of every (sequence, head) when given (dense problems:
// large cases, fa-bench's sampled rows) or everywhere, compared with got_o and got_lse (in the
// reference's layouts, only those rows when given) under the course tolerances; dims and names
// label the reports.
struct ForwardCheck {
  ref::Forward want;
  CompareReport o, lse;
  bool ok() const { return o.ok && lse.ok; }
};
ForwardCheck compare_forward(const Problem& prob, const ref::Inputs& in, const std::vector<int>* rows, const std::vector<double>& got_o,
                             const std::vector<double>& got_lse, const std::vector<int>& o_dims, const std::vector<std::string>& o_names,
                             const std::vector<int>& lse_dims, const std::vector<std::string>& lse_names);
// The gradients at sampled rows of one head of a dense problem `one` (fa-bench's check of a large
// backward, where the suites' naive computation would not fit): got against want
// (ref::backward_rows; dK and dV summed over the query heads of the group), dQ, dK and dV each
// within gradient_tolerance(dtype, its largest |want|) (dQ and dK, or the fp32 rounding that cancels
// in dS, if more: sampled.cpp), dg at the last got.dg.size() key positions within 4u of the sum of
// its terms' sizes (it cancels). "" when they match, else the reports.
std::string compare_sampled_gradients(const Problem& one, const ref::SampledGradients& got, const ref::SampledGradients& want,
                                      int q_rows, int k_rows, double* max_abs_err);

// A test build of a lesson that skips work (FA_COUNT_TILES, fa/device.cuh) counts the tiles each
// work tile visits: it must visit exactly the tiles that hold a pair its rows see (causal: up to
// the last visible key of its last row; a backward block owning keys: from the first query tile
// that sees any of them, for each query head of its group), no tile more and none less.
Outcome check_tile_counts(const LessonInfo& lesson, const Case& c, Direction dir);

// The variant a case runs in direction `dir` (an index into lesson.variants): the case's own by
// name, else FA_TEST_VARIANT's where it applies (README, "For students"), else 0 (the default).
// A lesson without variants ignores FA_TEST_VARIANT; one with variants but none of that name fails.
int variant_of(const LessonInfo& lesson, const Case& c, Direction dir);
// The variants of `lesson` that run direction `dir` at head dim d, by index (0 alone for a lesson
// without variants): what a test that runs every variant iterates.
std::vector<int> variants_for(const LessonInfo& lesson, Direction dir, int head_dim);
// FA_TEST_VARIANT, or "" when unset.
std::string test_variant();

// The lesson a test executable tests (tests/lesson_binding.cpp, compiled per executable).
const LessonInfo& lesson_under_test();
int lesson_number();

// What the lesson under test must support: what its fa_add_lesson line declares (CMakeLists.txt,
// generated into fa_lesson_NN_declared()), not what its descriptor says, so that a lesson cannot
// dodge a case by declaring less.
struct Requirements {
  Features features;
  std::vector<int> head_dims;  // the head dims the suites run: the declared ones, or 64 and 128 for any
};
const Requirements& required();  // tests/lesson_binding.cpp
Requirements requirements_of(const LessonInfo& declared);
// The features `lesson` lacks among the required ones, as a readable list ("" if none).
std::string missing_features(const LessonInfo& lesson, const Requirements& req);
// Does `lesson` support head_dim d?
bool supports_head_dim(const LessonInfo& lesson, int d);
// The case's first feature (in the order validation checks them) that `lesson` neither must nor
// does support, as a fragment of the clear rejection it must give instead ("grouped-query",
// "variable-length", "log-decay gate"); "" when the whole case must run.
std::string rejection_expected(const LessonInfo& lesson, const Requirements& req, const Case& c);

}  // namespace fa::test
