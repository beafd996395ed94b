// The harness the suites stand on: rounding, comparison, validation, buffers, seeds, the
// "not implemented yet" message and the skeleton generator. CPU only.
#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "fa/buffer.hpp"
#include "fa/compare.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/params.hpp"
#include "fa/random.hpp"
#include "skeleton.hpp"
#include "trace_host.hpp"
#include "support.hpp"

TEST_CASE("harness: fp16 rounding") {
  CHECK(fa::float_to_f16(1.0f) == 0x3c00);
  CHECK(fa::float_to_f16(-2.0f) == 0xc000);
  CHECK(fa::float_to_f16(65504.0f) == 0x7bff);            // the largest half
  CHECK(fa::float_to_f16(65519.0f) == 0x7bff);            // still rounds down
  CHECK(fa::float_to_f16(65520.0f) == 0x7c00);            // rounds to inf
  CHECK(fa::float_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(fa::float_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // a tie: to even (zero)
  CHECK(fa::float_to_f16(std::ldexp(3.0f, -25)) == 0x0002);  // a tie: to even (2)
  CHECK(fa::float_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie: to even
  CHECK(fa::float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie: to even
  CHECK(fa::float_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(std::isnan(fa::f16_to_float(fa::float_to_f16(NAN))));
  // Every half converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fa::f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(fa::float_to_f16(f) == h);
  }
  CHECK(fa::f16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fa::f16_to_float(0x3555) == 0.333251953125f);
}

TEST_CASE("harness: bf16 rounding") {
  CHECK(fa::float_to_bf16(1.0f) == 0x3f80);
  CHECK(fa::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie: to even
  CHECK(fa::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie: to even
  CHECK(fa::float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -16)) == 0x3f81);
  CHECK(std::isnan(fa::bf16_to_float(fa::float_to_bf16(NAN))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = fa::bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    REQUIRE(fa::float_to_bf16(f) == b);
  }
}

TEST_CASE("harness: poison is NaN in every storage type") {
  fa::Buffer b(fa::Memory::kHost, 64, "out");
  b.poison();
  const auto h = b.to_host<uint16_t>();
  const auto f = b.to_host<float>();
  CHECK(std::isnan(fa::f16_to_float(h[0])));
  CHECK(std::isnan(fa::bf16_to_float(h[0])));
  CHECK(std::isnan(f[0]));
}

TEST_CASE("harness: host buffer guards catch out-of-bounds writes") {
  fa::Buffer b(fa::Memory::kHost, 100, "o");
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % 256 == 0);
  CHECK_NOTHROW(b.check_guards());
  static_cast<uint8_t*>(b.data())[99] = 1;  // the last payload byte is fine
  CHECK_NOTHROW(b.check_guards());
  static_cast<uint8_t*>(b.data())[100] = 1;  // one past the end is not
  CHECK_THROWS_WITH_AS(b.check_guards(), doctest::Contains("after o: byte 0 past the end"), fa::Error);
  fa::Buffer c(fa::Memory::kHost, 100, "lse");
  static_cast<uint8_t*>(c.data())[-2] = 0;
  CHECK_THROWS_WITH_AS(c.check_guards(), doctest::Contains("before lse: byte 2 before the start"), fa::Error);
}

TEST_CASE("harness: the scratch's pieces are sized 256 bytes at a time, and a grid past 2^31 - 1 blocks is refused") {
  fa::Carver sizing(nullptr);  // the sizing pass: no memory, only the count
  CHECK(sizing.take<double>(3) == nullptr);
  CHECK(sizing.take<int>(0) == nullptr);
  CHECK(sizing.take<float>(64) == nullptr);
  CHECK(sizing.used() == 256 + 0 + 256);
  sizing.take<char>(257);
  CHECK(sizing.used() == 512 + 512);
  CHECK(fa::grid_blocks(INT32_MAX, "test") == unsigned(INT32_MAX));
  CHECK_THROWS_WITH_AS(fa::grid_blocks(int64_t(INT32_MAX) + 1, "lesson 99"), doctest::Contains("lesson 99: the grid needs 2147483648 blocks"),
                       fa::InvalidArgument);
}

TEST_CASE("harness: compare names the worst element and counts NaN and inf") {
  const fa::Tolerance tol{1e-3, 1e-3, "test"};
  std::vector<double> want(2 * 3 * 4, 1.0), got = want;
  got[1 * 12 + 2 * 4 + 3] = 1.5;  // (b=1, h=2, d=3) in a (2, 3, 4) tensor
  got[0] = 1.0025;                // also bad (allowed 2e-3), but less so
  got[5] = NAN;
  fa::CompareReport r = fa::compare("O", got, want, tol, {2, 3, 4}, {"b", "h", "d"});
  CHECK_FALSE(r.ok);
  CHECK(r.n_bad == 3);
  CHECK(r.n_nan == 1);
  CHECK(r.text.find("MISMATCH") != std::string::npos);
  CHECK(r.text.find("(b=0, h=1, d=1)") != std::string::npos);  // the NaN is the worst
  got[5] = 1.0;
  r = fa::compare("O", got, want, tol, {2, 3, 4}, {"b", "h", "d"});
  CHECK(r.n_bad == 2);
  CHECK(r.text.find("(b=1, h=2, d=3): got 1.5, want 1") != std::string::npos);
  CHECK(r.max_abs_err == doctest::Approx(0.5));
  // Within atol + rtol * |want|: 1e-3 + 1e-3 * 1 = 2e-3.
  got = want;
  got[3] = 1.0019;
  CHECK(fa::compare("O", got, want, tol, {24}, {"i"}).ok);
  got[3] = 1.0021;
  CHECK_FALSE(fa::compare("O", got, want, tol, {24}, {"i"}).ok);
  // An infinite LSE (fully masked row) must be matched exactly, and never by NaN or -inf.
  std::vector<double> lw{INFINITY, 2.0}, lg{INFINITY, 2.0};
  CHECK(fa::compare("LSE", lg, lw, tol, {2}, {"i"}).ok);
  lg[0] = -INFINITY;
  CHECK_FALSE(fa::compare("LSE", lg, lw, tol, {2}, {"i"}).ok);
  lg[0] = 1e30;
  CHECK_FALSE(fa::compare("LSE", lg, lw, tol, {2}, {"i"}).ok);
  lg = {NAN, NAN};
  r = fa::compare("LSE", lg, lw, tol, {2}, {"i"});
  CHECK(r.text.find("never written") != std::string::npos);
}

TEST_CASE("harness: tolerances come from the storage precision") {
  const fa::Tolerance h = fa::output_tolerance(fa::DType::kF16), b = fa::output_tolerance(fa::DType::kBF16);
  CHECK(h.atol == 1e-3);             // the common lab bar
  CHECK(h.rtol == std::ldexp(1.0, -10));  // two fp16 half-ulps
  CHECK(b.rtol == std::ldexp(1.0, -7));   // two bf16 half-ulps
  CHECK(b.atol == 8e-3);
  CHECK(std::string(h.reason).size() > 10);
}

namespace {
int g_launches = 0;
void count_launch(const fa::AttnParams&, cudaStream_t) { ++g_launches; }

fa::LessonInfo fake_lesson() {
  fa::LessonInfo l;
  l.id = "99_fake";
  l.memory = fa::Memory::kHost;
  l.features.fp16 = true;
  l.features.head_dims = {64, 128};
  l.features.alignment_bytes = 16;
  l.forward = &count_launch;
  return l;
}

alignas(256) uint16_t g_storage[4096];

fa::AttnParams valid_params() {
  fa::AttnParams p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seqlen_q = p.seqlen_k = 8;
  p.head_dim = 64;
  p.scale = 0.125f;
  p.q = p.k = p.v = g_storage;
  p.o = g_storage + 1024;
  p.lse = reinterpret_cast<float*>(g_storage + 2048);
  fa::set_contiguous_strides(p);
  return p;
}
}  // namespace

TEST_CASE("harness: the shared reference comparisons pass the reference's own answer and name what is wrong") {
  // fa-bench's checks go through these (tests/sampled.cpp): they must accept the right answer and
  // reject one wrong element of each tensor, naming it.
  fa::Problem one;
  one.head_dim = 8;
  one.seqlen_q = one.seqlen_k = 12;
  one.causal = one.gate = true;
  fa::Rng rng(7);
  auto randn = [&](size_t n) {
    std::vector<double> x(n);
    for (double& e : x) e = rng.normal();
    return x;
  };
  fa::ref::Inputs in{randn(96), randn(96), randn(96), std::vector<double>(12, -0.05)};
  const fa::ref::Forward f = fa::ref::forward(one, in);
  const std::vector<int> rows = {0, 5, 11};
  std::vector<double> o, lse;
  for (int r : rows) {
    lse.push_back(f.lse[size_t(r)]);
    for (int d = 0; d < 8; ++d) o.push_back(f.o[size_t(r) * 8 + d]);
  }
  const std::vector<int> od = {3, 8}, ld = {3};
  const std::vector<std::string> on = {"sampled row", "d"}, ln = {"sampled row"};
  CHECK(fa::test::compare_forward(one, in, &rows, o, lse, od, on, ld, ln).ok());
  o[9] += 0.05;
  const fa::test::ForwardCheck bad = fa::test::compare_forward(one, in, &rows, o, lse, od, on, ld, ln);
  CHECK_FALSE(bad.o.ok);
  CHECK(bad.lse.ok);

  const std::vector<double> dout = randn(96);
  const fa::ref::SampledGradients want = fa::ref::backward_rows(one, in, dout, f.o, f.lse, rows, rows, 4);
  double err = 0;
  CHECK(fa::test::compare_sampled_gradients(one, want, want, 3, 3, &err).empty());
  for (const char* t : {"dQ", "dK", "dV", "dg"}) {
    fa::ref::SampledGradients got = want;
    std::vector<double>& x = std::string(t) == "dQ" ? got.dq : std::string(t) == "dK" ? got.dk : std::string(t) == "dV" ? got.dv : got.dg;
    x[1] += 0.05 + 0.05 * std::fabs(x[1]);
    const std::string report = fa::test::compare_sampled_gradients(one, got, want, 3, 3, &err);
    INFO(t, ": ", report);
    CHECK(report.find(t) != std::string::npos);
    CHECK(report.find("MISMATCH") != std::string::npos);
  }
}

TEST_CASE("harness: a one-token causal sequence's gradients (dS = 0 exactly) allow the fp32 rounding that cancels in dS") {
  // Row 0 sees key 0 alone: P = 1, dP = D, so dQ and dK are 0, and max|want| is 0. A kernel's dP
  // and D are fp32 dot products in different orders: its dQ and dK are rounding-sized, not 0.
  fa::Problem one;
  one.head_dim = 128;
  one.seqlen_q = one.seqlen_k = 1;
  one.causal = true;
  fa::Rng rng(11);
  auto randn = [&](size_t n) {
    std::vector<double> x(n);
    for (double& e : x) e = rng.normal();
    return x;
  };
  const fa::ref::Inputs in{randn(128), randn(128), randn(128), {}};
  const fa::ref::Forward f = fa::ref::forward(one, in);
  const fa::ref::SampledGradients want = fa::ref::backward_rows(one, in, randn(128), f.o, f.lse, {0}, {0});
  for (double x : want.dq) REQUIRE(std::fabs(x) < 1e-12);
  double err = 0;
  fa::ref::SampledGradients got = want;
  got.dq[3] = got.dk[7] = 2.98e-7;  // what an H200 gave for such a sequence
  CHECK(fa::test::compare_sampled_gradients(one, got, want, 1, 1, &err).empty());
  got.dq[3] = 1e-3;  // far past any rounding
  CHECK(fa::test::compare_sampled_gradients(one, got, want, 1, 1, &err).find("dQ MISMATCH") != std::string::npos);
  got.dq[3] = 0;
  got.dk[7] = -1e-3;
  CHECK(fa::test::compare_sampled_gradients(one, got, want, 1, 1, &err).find("dK MISMATCH") != std::string::npos);
}

TEST_CASE("harness: validation rejects bad input before any launch") {
  const fa::LessonInfo lesson = fake_lesson();
  g_launches = 0;
  CHECK_NOTHROW(fa::run_forward(lesson, valid_params()));
  CHECK(g_launches == 1);
  struct Bad {
    const char* expect;
    void (*change)(fa::AttnParams&);
  };
  const Bad bad[] = {
      {"head_dim must be one of {64, 128}, got 96", [](fa::AttnParams& p) { p.head_dim = 96; }},
      {"does not support bf16", [](fa::AttnParams& p) { p.dtype = fa::DType::kBF16; }},
      {"does not support causal masking", [](fa::AttnParams& p) { p.causal = true; }},
      {"does not support seqlen_q != seqlen_k", [](fa::AttnParams& p) { p.seqlen_k = 9; }},
      {"does not support grouped-query heads", [](fa::AttnParams& p) { p.heads_q = 2; }},
      {"heads_q (1) must be a multiple of heads_kv (2)", [](fa::AttnParams& p) { p.heads_kv = 2; }},
      {"batch must be >= 1, got 0", [](fa::AttnParams& p) { p.batch = 0; }},
      {"seqlen_q must be >= 1, got -3", [](fa::AttnParams& p) { p.seqlen_q = -3; }},
      {"k is a null pointer", [](fa::AttnParams& p) { p.k = nullptr; }},
      {"lse is a null pointer", [](fa::AttnParams& p) { p.lse = nullptr; }},
      {"v must be aligned to 16 bytes", [](fa::AttnParams& p) { p.v = g_storage + 1; }},
      {"scale must be finite and > 0", [](fa::AttnParams& p) { p.scale = NAN; }},
      {"q must be contiguous", [](fa::AttnParams& p) { p.q_stride.row = 128; }},
      {"beyond 32-bit indexing", [](fa::AttnParams& p) {
         p.batch = 40000;  // 40000 * 8 * 64 * 128 heads... exceeds 2^31 elements
         p.heads_q = p.heads_kv = 128;
         fa::set_contiguous_strides(p);
       }},
      {"does not support RoPE", [](fa::AttnParams& p) { p.rope_cos = p.rope_sin = reinterpret_cast<const float*>(g_storage); }},
      {"does not support the log-decay gate", [](fa::AttnParams& p) { p.gate = reinterpret_cast<const float*>(g_storage); }},
      {"does not support variable-length batches", [](fa::AttnParams& p) {
         static const int cu[2] = {0, 8};
         p.cu_seqlens_q = p.cu_seqlens_k = cu;
       }},
  };
  for (const Bad& b : bad) {
    fa::AttnParams p = valid_params();
    b.change(p);
    g_launches = 0;
    CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains(b.expect), fa::InvalidArgument);
    CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains("lesson 99_fake: "), fa::InvalidArgument);
    CHECK_MESSAGE(g_launches == 0, "launched despite: ", b.expect);
  }
}

TEST_CASE("harness: rules that hold whatever the lesson supports") {
  fa::LessonInfo lesson = fake_lesson();
  lesson.features.rope = lesson.features.gate = lesson.features.causal = lesson.features.seqlen_q_ne_k = true;
  fa::AttnParams p = valid_params();
  p.gate = reinterpret_cast<const float*>(g_storage);
  CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains("causal attention only"), fa::InvalidArgument);
  p = valid_params();
  p.rope_cos = p.rope_sin = reinterpret_cast<const float*>(g_storage);
  p.rope_positions = 8;
  p.seqlen_q = 9;
  fa::set_contiguous_strides(p);
  CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains("seqlen_q <= seqlen_k"), fa::InvalidArgument);
  p.seqlen_q = 8;
  fa::set_contiguous_strides(p);
  p.rope_positions = 4;
  CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains("cover 4 positions, need 8"), fa::InvalidArgument);
  p.rope_positions = 8;
  g_launches = 0;
  CHECK_NOTHROW(fa::run_forward(lesson, p));
  CHECK(g_launches == 1);
}

TEST_CASE("harness: variants are checked by index, pass and head dim, and found by name") {
  fa::LessonInfo lesson = fake_lesson();
  fa::AttnParams p = valid_params();
  // A lesson without variants runs variant 0 only.
  p.variant = 1;
  g_launches = 0;
  CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains("lesson 99_fake: has no variant 1 (its variants, from 0: none)"),
                       fa::InvalidArgument);
  lesson.variants = {{"auto", "the lesson's choice"},
                     {"config0", "a tile shape of head dim 64", fa::Variant::Pass::kBoth, 64},
                     {"pass", "a variant of the backward", fa::Variant::Pass::kBackward}};
  CHECK(fa::variant_index(lesson, "") == 0);
  CHECK(fa::variant_index(lesson, "default") == 0);
  CHECK(fa::variant_index(lesson, "config0") == 1);
  CHECK_THROWS_WITH_AS(fa::variant_index(lesson, "config9"),
                       "lesson 99_fake: has no variant 'config9' (its variants: auto, config0, pass)", fa::InvalidArgument);
  CHECK(fa::variant_applies(lesson, 1, fa::Variant::Pass::kForward, 64));
  CHECK_FALSE(fa::variant_applies(lesson, 1, fa::Variant::Pass::kForward, 128));
  CHECK_FALSE(fa::variant_applies(lesson, 2, fa::Variant::Pass::kForward, 64));
  CHECK(fa::variant_applies(lesson, 2, fa::Variant::Pass::kBackward, 128));
  CHECK_FALSE(fa::variant_applies(lesson, 3, fa::Variant::Pass::kForward, 64));
  for (auto [v, d, expect] : {std::tuple{-1, 64, "has no variant -1"}, std::tuple{3, 64, "has no variant 3 (its variants, from 0: auto, config0, pass)"},
                              std::tuple{1, 128, "variant config0 runs head_dim 64 only, got 128"},
                              std::tuple{2, 64, "variant pass is a variant of the backward, not of the forward"}}) {
    p = valid_params();
    p.variant = v;
    p.head_dim = d;
    fa::set_contiguous_strides(p);
    CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p), doctest::Contains(expect), fa::InvalidArgument);
  }
  CHECK(g_launches == 0);
  for (int v : {0, 1}) {
    p = valid_params();
    p.variant = v;
    CHECK_NOTHROW(fa::run_forward(lesson, p));
  }
  CHECK(g_launches == 2);
}

TEST_CASE("harness: a case runs its own variant, else FA_TEST_VARIANT's where it applies, else the default") {
  fa::LessonInfo lesson = fake_lesson();
  lesson.variants = {{"auto", ""}, {"config0", "", fa::Variant::Pass::kBoth, 64}, {"pass", "", fa::Variant::Pass::kBackward}};
  using fa::test::Direction;
  fa::test::Case c;
  c.head_dim = 128;
  unsetenv("FA_TEST_VARIANT");
  CHECK(fa::test::variant_of(lesson, c, Direction::kForward) == 0);
  CHECK(fa::test::variants_for(lesson, Direction::kForward, 64) == std::vector<int>{0, 1});
  CHECK(fa::test::variants_for(lesson, Direction::kForward, 128) == std::vector<int>{0});
  CHECK(fa::test::variants_for(lesson, Direction::kBackward, 128) == std::vector<int>{0, 2});
  CHECK(fa::test::variants_for(fake_lesson(), Direction::kBackward, 64) == std::vector<int>{0});
  c.variant = "pass";
  CHECK(fa::test::variant_of(lesson, c, Direction::kForward) == 2);  // the case's own, even where it is refused
  CHECK(c.describe().find(" variant=pass ") != std::string::npos);
  c.variant = "";
  setenv("FA_TEST_VARIANT", "config0", 1);
  CHECK(fa::test::variant_of(lesson, c, Direction::kForward) == 0);  // head dim 128: not config0's
  c.head_dim = 64;
  CHECK(fa::test::variant_of(lesson, c, Direction::kForward) == 1);
  CHECK(fa::test::variant_of(fake_lesson(), c, Direction::kForward) == 0);  // no variants: its one way
  setenv("FA_TEST_VARIANT", "pass", 1);
  CHECK(fa::test::variant_of(lesson, c, Direction::kForward) == 0);
  CHECK(fa::test::variant_of(lesson, c, Direction::kBackward) == 2);
  setenv("FA_TEST_VARIANT", "passs", 1);
  CHECK_THROWS_WITH_AS(fa::test::variant_of(lesson, c, Direction::kForward), doctest::Contains("has no variant 'passs'"),
                       fa::InvalidArgument);
  unsetenv("FA_TEST_VARIANT");
}

TEST_CASE("harness: launch limits and the GPU a lesson needs are checked once, before the lesson runs") {
  fa::LessonInfo lesson = fake_lesson();
  lesson.max_batch_heads = 65535;
  fa::AttnParams p = valid_params();
  p.batch = 257;
  p.heads_q = p.heads_kv = 255;  // 65535 (batch, head) pairs: the most a grid's y holds
  fa::set_contiguous_strides(p);
  g_launches = 0;
  CHECK_NOTHROW(fa::run_forward(lesson, p));
  CHECK(g_launches == 1);
  p.batch = 258;
  fa::set_contiguous_strides(p);
  CHECK_THROWS_WITH_AS(fa::run_forward(lesson, p),
                       "lesson 99_fake: batch * heads_q must be at most 65535 (the grid's y or z), got 65790", fa::InvalidArgument);
  lesson.max_batch_heads = 0;
  CHECK_NOTHROW(fa::run_forward(lesson, p));
  CHECK(g_launches == 2);
  // A GPU no machine has: refused (on a machine without a GPU, by the device query's error).
  lesson.needs_sm = 1;
  CHECK_THROWS_AS(fa::run_forward(lesson, valid_params()), fa::Error);
  CHECK(g_launches == 2);
  std::string why;
  if (!fa::no_gpu(&why))
    CHECK_THROWS_WITH_AS(fa::run_forward(lesson, valid_params()), doctest::Contains("lesson 99_fake: needs sm_1; this one is sm_"), fa::Error);
}

namespace {
void write_before_o(const fa::AttnParams& p, cudaStream_t) { static_cast<uint16_t*>(p.o)[-1] = 0; }
}  // namespace

TEST_CASE("harness: a lesson that writes before its output fails the case as a mismatch") {
  // A write into a buffer's guard is a wrong result: a MISMATCH, which maintainers/run_mutant.sh
  // counts as the suite's rejection (lesson 13's epilogue storing rows before row 0, for one).
  fa::LessonInfo lesson = fake_lesson();
  lesson.forward = &write_before_o;
  const fa::test::Outcome out = fa::test::check_forward(lesson, fa::test::dense_case(8, 8, 64, fa::DType::kF16, false));
  CHECK_FALSE(out.ok);
  CHECK_MESSAGE(out.text.find("MISMATCH: out-of-bounds write before o: byte 1 before the start") != std::string::npos, out.text);
}

namespace {
const char* fake_phase(int p) { return p == 0 ? "setup" : p == 1 ? "work" : "exit"; }
int64_t fake_lanes(const fa::AttnParams& p) { return int64_t(p.batch) * 2; }
void fake_trace(const fa::AttnParams&, const fa::TraceSink&, cudaStream_t) {}
}  // namespace

TEST_CASE("harness: a traced build's records, refused before any launch, and their CSV") {
  fa::LessonInfo lesson = fake_lesson();
  fa::AttnParams p = valid_params();
  CHECK_THROWS_WITH_AS(fa::run_traced(lesson, p, 16, "--trace-events"), "lesson 99_fake: has no traced build", fa::InvalidArgument);
  lesson.tracer = {&fake_trace, &fake_lanes, 2, &fake_phase, 16, "step", nullptr, false};
  CHECK_THROWS_WITH_AS(fa::run_traced(lesson, p, 0, "--trace-events"), doctest::Contains("a capacity >= 1"), fa::InvalidArgument);
  p.batch = 1 << 20;  // 2^21 lanes x 2^11 events: 2^32 records, more than 32-bit indices reach
  CHECK_THROWS_WITH_AS(fa::run_traced(lesson, p, 1 << 11, "--trace-events"), doctest::Contains("over 2^31 records: trace a smaller problem or lower --trace-events"),
                       fa::InvalidArgument);
  lesson.tracer.roles = 3;  // 2 lanes are not whole blocks of 3
  p.batch = 1;
  CHECK_THROWS_WITH_AS(fa::run_traced(lesson, p, 16, "--trace-events"), doctest::Contains("whole blocks of 3"), fa::InvalidArgument);
  // The CSV: the lanes of SMs below max_sm, one row a record, the phase by name.
  std::vector<fa::TraceLane> lanes(3);
  lanes[0] = {0, 0, 0, {{100, 0, 0}, {150, 1, 7}, {170, 2, 0}}};
  lanes[1] = {0, 1, 1, {{101, 0, 0}, {190, 2, 0}}};
  lanes[2] = {1, 0, 5, {{90, 0, 0}}};  // on SM 5: left out with max_sm 2
  const std::string path = "harness_trace_test.csv";
  fa::write_trace_csv(path, lanes, 2, "step", "4", &fake_phase);
  std::ifstream f(path);
  std::vector<std::string> rows;
  for (std::string line; std::getline(f, line);) rows.push_back(line);
  CHECK(rows == std::vector<std::string>{"step,sm,block,role,clock,phase,key", "4,0,0,0,100,setup,0", "4,0,0,0,150,work,7",
                                         "4,0,0,0,170,exit,0", "4,1,0,1,101,setup,0", "4,1,0,1,190,exit,0"});
  std::remove(path.c_str());
  CHECK_THROWS_AS(fa::write_trace_csv("no/such/folder/trace.csv", lanes, 2, "step", "4", &fake_phase), fa::Error);
}

TEST_CASE("harness: a skeleton says which TODO is next") {
  CHECK_NOTHROW(fa::throw_if_todos_left("07_tensor_cores", {}));
  CHECK_THROWS_WITH_AS(fa::throw_if_todos_left("07_tensor_cores", {"TODO(1): load Q", "TODO(2): mma"}),
                       "lesson 07 not implemented yet: TODO(1): load Q  (1 more TODO(s) after this one; when you have "
                       "written it, delete its line from kTodosLeft)", fa::NotImplemented);
  // The skeleton's form, "TODO(n) in <file>: ...": the message names the file whose list to edit.
  CHECK_THROWS_WITH_AS(fa::throw_if_todos_left("00_reference", {"TODO(4) in attention.cpp: write O"}),
                       "lesson 00 not implemented yet: TODO(4) in attention.cpp: write O  (when you have written it, "
                       "delete its line from kTodosLeft in attention.cpp)", fa::NotImplemented);
  CHECK_THROWS_WITH_AS(fa::throw_if_todos_left("08_pipelining", {"TODO(1) in tiles.hpp: swizzle", "TODO(2) in tiles.hpp: x"}),
                       "lesson 08 not implemented yet: TODO(1) in tiles.hpp: swizzle  (1 more TODO(s) after this one; "
                       "when you have written it, delete its line from the TodosLeft list in tiles.hpp)", fa::NotImplemented);
  // A file lists its TODOs in its own order; the lowest number left is named, in one list or several.
  const fa::TodoList later_first = {"TODO(6) in dkdv.cuh: b", "TODO(4) in dkdv.cuh: a"}, other = {"TODO(5) in kernel.cu: c"};
  CHECK_THROWS_WITH_AS(fa::throw_if_todos_left("11_fast_backward", later_first),
                       "lesson 11 not implemented yet: TODO(4) in dkdv.cuh: a  (1 more TODO(s) after this one; "
                       "when you have written it, delete its line from the TodosLeft list in dkdv.cuh)", fa::NotImplemented);
  CHECK_THROWS_WITH_AS(fa::throw_if_todos_left("11_fast_backward", {&other, &later_first}),
                       "lesson 11 not implemented yet: TODO(4) in dkdv.cuh: a  (2 more TODO(s) after this one; "
                       "when you have written it, delete its line from the TodosLeft list in dkdv.cuh)", fa::NotImplemented);
}

TEST_CASE("harness: seeded random numbers") {
  fa::Rng a(7), b(7), c(8);
  const double x = a.normal();
  CHECK(x == b.normal());
  CHECK(x != c.normal());
  double sum = 0, sum2 = 0;
  fa::Rng r(1);
  for (int i = 0; i < 100000; ++i) {
    const double v = r.normal();
    sum += v;
    sum2 += v * v;
  }
  CHECK(std::fabs(sum / 1e5) < 0.02);
  CHECK(std::fabs(sum2 / 1e5 - 1.0) < 0.02);
  const char* old = std::getenv("FA_TEST_SEED");
  const std::string saved = old ? old : "";
  const uint64_t s1 = fa::seed_for("case");
  CHECK(s1 != fa::seed_for("other case"));
  setenv("FA_TEST_SEED", "12345", 1);
  CHECK(fa::base_seed() == 12345);
  CHECK(fa::seed_for("case") != s1);
  if (old) setenv("FA_TEST_SEED", saved.c_str(), 1); else unsetenv("FA_TEST_SEED");
  CHECK(fa::seed_for("case") == s1);
}

TEST_CASE("skeleton: solution blocks become TODOs") {
  const std::string solution =
      "int f() {\n"
      "const fa::TodoList kTodosLeft = {\n"
      "    // @todos-left\n"
      "};\n"
      "  // TODO(1): return the \"answer\".\n"
      "  //   hint: it is 42\n"
      "  // BEGIN SOLUTION\n"
      "  return 42;\n"
      "  // END SOLUTION\n"
      "  // BEGIN SKELETON\n"
      "  // return 0;\n"
      "  // END SKELETON\n"
      "}\n";
  const std::string skeleton =
      "// Your copy of this lesson, generated from solutions/x.cu by fa-skeleton.\n"
      "int f() {\n"
      "const fa::TodoList kTodosLeft = {\n"
      "    \"TODO(1) in x.cu: return the \\\"answer\\\".\",\n"
      "};\n"
      "  // TODO(1): return the \"answer\".\n"
      "  //   hint: it is 42\n"
      "  return 0;\n"
      "}\n";
  CHECK(fa::skeleton::transform(solution, "solutions/x.cu") == skeleton);
  CHECK_THROWS_WITH_AS(fa::skeleton::transform("// BEGIN SOLUTION\nx\n", "a.cu"), doctest::Contains("a.cu:1: block never closed"),
                       fa::skeleton::Error);
  CHECK_THROWS_WITH_AS(fa::skeleton::transform("// TODO(1): x\n// BEGIN SOLUTION\n// END SOLUTION\n", "a.cu"),
                       doctest::Contains("@todos-left"), fa::skeleton::Error);
  CHECK_THROWS_WITH_AS(fa::skeleton::transform("// END SKELETON\n", "a.cu"), doctest::Contains("a.cu:1: an END marker"),
                       fa::skeleton::Error);
  CHECK(fa::skeleton::is_source("kernel.cu"));
  CHECK_FALSE(fa::skeleton::is_source("README.md"));
}
