// fa-bench: times the course's lessons over a grid of shapes, after checking each one.
//
//   fa-bench [--lessons 01,04|all] [--seqlens 512,1024,...] [--head-dims 64,128] [--causal 0,1]
//            [--dtypes fp16,bf16] [--tokens 16384] [--width 2048] [--reps 20] [--max-seconds 20] [--pause-ms 0]
//            [--csv FILE] [--tour] [--once] [--rope] [--label NAME] [--bwd] [--deterministic]
//            [--gqa G] [--varlen L1,L2,... [--padded]] [--gate] [--variant NAME,...] [--list-variants]
//            [--trace FILE [--trace-events N] [--trace-sms N]]
//
// The default grid is FlashAttention's: batch * seqlen = 16k tokens, heads * head_dim = 2048,
// seqlen 512 .. 16k. For each case it first validates sampled rows of two heads against the fp64
// reference (the course tolerance, through the suites' own comparison: tests/sampled.cpp), then times it with CUDA events: warm-up, the L2 flushed
// before every repetition, the median reported (--pause-ms N: the GPU idle N ms before each case's
// timed runs, so that a case does not start right on the heels of a long one). TFLOP/s counts 4 * head_dim FLOPs per visible
// (query, key) pair (4BHN^2D, about half when causal). Each lesson is read against the ceiling
// of its instructions, measured here: the FP32 FMA peak for the CUDA-core lessons (01-06, 10), the
// mma.sync peak for the tensor-core lessons (07-12), a cuBLAS fp16 GEMM (wgmma) for lesson 13. --tour runs every lesson at one shape. --once runs each case once,
// validated but not timed (for profilers: one kernel launch per case). --rope adds RoPE (fp32
// tables from fa::rope_tables) to every case and runs only the lessons that support it; its FLOPs
// are still the attention's (the rotation's few FLOPs per element are not counted). --label names
// the rows in place of the lesson id (lesson 09's experiment times one lesson two ways). --bwd
// times the backward of the lessons that have one (10 on): O and the LSE come from lesson 08's
// forward (with --gqa, --varlen or --gate, from the lesson's own forward when it has one, as lesson
// 12 does: lesson 08 has no varlen and no gate), dO is random; every element of dQ, dK and dV (and
// dg) must be written (they are poisoned first), sampled rows of two heads are checked against the
// fp64 gradients computed from the same O and LSE (ref::backward_rows; dK and dV of a K/V head sum
// its group's query heads; dg at the last 16 key positions of the sequence, within 4u of the sum of
// its terms' sizes, since it cancels), and TFLOP/s count 2.5x the forward's FLOPs. --deterministic
// sets the backward's deterministic mode. --gqa G gives G query heads to each K/V head (heads_kv =
// heads / G; lessons without GQA are skipped). --varlen L1,L2,... runs one packed batch of those
// sequence lengths (cu_seqlens; seqlen_q = seqlen_k per sequence; --seqlens and --tokens are
// ignored) on the lessons with varlen; with --padded, the same batch padded to its longest sequence
// on the dense path of every lesson (causal only: there padding is exact on the real rows; forward
// only: the padded rows' dO would reach the real keys' gradients). Both count TFLOP/s from the
// visible pairs of the real sequences, so their ratio is the inverse ratio of the times. --gate
// adds the log-decay gate g (fp32, (batch, heads, seqlen), or (heads, total) packed) to the lessons
// that have one (the others are skipped), causal cases only (the gate is defined for causal
// attention; the non-causal rows say so): g = log sigmoid(x), x uniform in [2.25, 4.6], so g lies
// in [-0.1, -0.01], a key's weight falling by 1-10% a token; its FLOPs are not counted (a few per
// score). --variant NAME,... times those variants of each lesson (LessonInfo::variants: a tile
// configuration, a dQ strategy, a step of a schedule; the rows are named "<lesson> <variant>"), a
// lesson without one of them, or one that does not apply to the pass or head dim, says so in its
// row; --list-variants prints every lesson's variants. --trace FILE runs one case (one lesson,
// dtype, head dim, mask and length), validated, through the lesson's traced build (fa::Tracer:
// lessons 13 and 14, --bwd for 14) instead of timing it, and writes the records of the blocks that
// ran on SMs 0 .. --trace-sms - 1 (default 2) to FILE as CSV, at most --trace-events records a
// recording thread (default the lesson's): plots/plot.py --timeline and --phases draw them. Exit 1
// if any case is wrong.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_device.hpp"
#include "support.hpp"  // the suites' reference comparisons (tests/sampled.cpp)
#include "fa/buffer.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/params.hpp"
#include "fa/random.hpp"
#include "fa/rope.hpp"
#include "reference.hpp"
#include "trace_host.hpp"

std::vector<const fa::LessonInfo*> fa_all_lessons();  // generated by CMake: every lesson built

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}
// `x` parsed whole by `parse` (std::stoi, std::stod: they return the value and how many characters
// they read), or `what` as the error: nothing accepted is only a prefix ("4k", "1.5" as an int, "").
template <class Parse>
auto parse_all(const std::string& x, Parse parse, const std::string& what) {
  size_t used = 0;
  decltype(parse(x, &used)) v{};
  try {
    v = parse(x, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != x.size()) throw std::invalid_argument(what);
  return v;
}
// The whole number `x` given to option `opt`; a clear error for anything else ("4k", "", "1.5").
int to_int(const std::string& opt, const std::string& x) {
  return parse_all(x, [](const std::string& s, size_t* used) { return std::stoi(s, used); },
                   opt + " takes whole numbers, got '" + x + "'");
}
std::vector<int> ints(const std::string& opt, const std::string& s) {
  std::vector<int> v;
  for (const auto& x : split(s)) v.push_back(to_int(opt, x));
  if (v.empty()) throw std::invalid_argument(opt + " needs at least one number");
  return v;
}

// A throughput roof, measured on this GPU.
struct Ceiling {
  std::string name;
  double tflops = 0;
};

// "08" for lesson 08_pipelining.
std::string lesson_number(const fa::LessonInfo& l) { return std::string(l.id).substr(0, 2); }

// The roof each lesson is read against, by the instructions it computes with: lesson 13 on wgmma
// (a cuBLAS GEMM), lessons 07-12 on mma.sync except lesson 10 (the clear backward, on the CUDA
// cores), the others on the FP32 FMA pipes.
enum class Roof { kFma, kMmaSync, kGemm };
Roof roof_of(const fa::LessonInfo& l) {
  const std::string nn = lesson_number(l);
  if (nn >= "13") return Roof::kGemm;  // the Hopper lessons (wgmma): the cuBLAS GEMM's roof
  return nn >= "07" && nn != "10" ? Roof::kMmaSync : Roof::kFma;
}

struct Options {
  std::vector<std::string> lessons{"all"};
  std::vector<int> seqlens{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> head_dims{64, 128};
  std::vector<int> causal{0, 1};
  std::vector<fa::DType> dtypes{fa::DType::kF16};
  int tokens = 16384, width = 2048, reps = 20;
  double max_seconds = 20;  // per case: stop timing after this long (at least 3 timed runs)
  int pause_ms = 0;         // per case: the GPU idle this long before its timed runs
  std::string csv;
  bool tour = false;
  bool once = false;
  bool rope = false;
  bool bwd = false;            // time the backward
  bool deterministic = false;  // the backward's deterministic mode
  std::string label;  // replaces the lesson id in the output when set
  int gqa = 1;               // query heads per K/V head
  std::vector<int> varlen;   // one packed batch of these lengths; empty: dense batches
  bool padded = false;       // the varlen batch padded to its longest sequence, on the dense path
  bool gate = false;         // the log-decay gate g
  std::vector<std::string> variants{""};  // the variants to time by name ("": the lesson's default)
  bool list_variants = false;
  std::string trace;      // --trace FILE: the one case's records, through the lesson's traced build
  int trace_events = 0;   // records a recording thread holds (0: the lesson's default)
  int trace_sms = 2;      // the SMs whose blocks' records are written
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--lessons") o.lessons = split(value());
    else if (a == "--seqlens") o.seqlens = ints(a, value());
    else if (a == "--head-dims") o.head_dims = ints(a, value());
    else if (a == "--causal") o.causal = ints(a, value());
    else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const auto& t : split(value())) {
        if (t != "fp16" && t != "bf16") throw std::invalid_argument("--dtypes takes fp16 and/or bf16, got " + t);
        o.dtypes.push_back(t == "fp16" ? fa::DType::kF16 : fa::DType::kBF16);
      }
    } else if (a == "--tokens") o.tokens = to_int(a, value());
    else if (a == "--width") o.width = to_int(a, value());
    else if (a == "--reps") o.reps = to_int(a, value());
    else if (a == "--max-seconds") {
      const std::string x = value();
      o.max_seconds = parse_all(x, [](const std::string& t, size_t* used) { return std::stod(t, used); },
                                "--max-seconds takes a number of seconds, got '" + x + "'");
    }
    else if (a == "--pause-ms") {
      o.pause_ms = to_int(a, value());
      if (o.pause_ms < 0) throw std::invalid_argument("--pause-ms takes milliseconds >= 0");
    }
    else if (a == "--csv") o.csv = value();
    else if (a == "--tour") o.tour = true;
    else if (a == "--once") o.once = true;
    else if (a == "--rope") o.rope = true;
    else if (a == "--label") o.label = value();
    else if (a == "--bwd") o.bwd = true;
    else if (a == "--deterministic") o.deterministic = true;
    else if (a == "--gqa") o.gqa = to_int(a, value());
    else if (a == "--varlen") o.varlen = ints(a, value());
    else if (a == "--padded") o.padded = true;
    else if (a == "--gate") o.gate = true;
    else if (a == "--variant") {
      o.variants = split(value());
      if (o.variants.empty()) throw std::invalid_argument("--variant needs a variant's name (--list-variants lists them)");
    } else if (a == "--list-variants") o.list_variants = true;
    else if (a == "--trace") o.trace = value();
    else if (a == "--trace-events") o.trace_events = to_int(a, value());
    else if (a == "--trace-sms") o.trace_sms = to_int(a, value());
    else if (a == "--help" || a == "-h") {
      std::printf("usage: fa-bench [--lessons 01,04|all] [--seqlens ...] [--head-dims 64,128] [--causal 0,1]\n"
                  "                [--dtypes fp16,bf16] [--tokens 16384] [--width 2048] [--reps 20] [--max-seconds 20] [--pause-ms 0] [--csv FILE] [--tour] [--once]\n"
                  "                [--rope] [--label NAME] [--bwd] [--deterministic] [--gqa G] [--varlen L1,L2,... [--padded]] [--gate]\n"
                  "                [--variant NAME,...] [--list-variants] [--trace FILE [--trace-events N] [--trace-sms N]]\n");
      std::exit(0);
    } else throw std::invalid_argument("unknown option " + a + " (try --help)");
  }
  for (int c : o.causal)
    if (c != 0 && c != 1) throw std::invalid_argument("--causal takes 0 and/or 1, got " + std::to_string(c));
  if (o.gqa < 1) throw std::invalid_argument("--gqa takes a number of query heads per K/V head >= 1");
  for (int len : o.varlen)
    if (len < 1) throw std::invalid_argument("--varlen takes sequence lengths >= 1, got " + std::to_string(len));
  if (o.padded && o.varlen.empty()) throw std::invalid_argument("--padded pads a --varlen batch: give --varlen too");
  if (o.bwd && o.padded)
    throw std::invalid_argument("--padded times the forward only (in a backward, the padded rows' dO would reach the real keys' gradients)");
  if (!o.varlen.empty()) o.seqlens = {*std::max_element(o.varlen.begin(), o.varlen.end())};
  if (o.trace_events < 0 || o.trace_sms < 1) throw std::invalid_argument("--trace-events takes a number >= 1 (0: the lesson's), --trace-sms >= 1");
  if (!o.trace.empty()) {
    if (o.tour) throw std::invalid_argument("--trace traces one case, --tour times every lesson: give one of them");
    if (o.lessons.size() != 1 || o.lessons.front() == "all" || o.dtypes.size() != 1 || o.head_dims.size() != 1 || o.causal.size() != 1 ||
        o.seqlens.size() != 1 || o.variants.size() != 1)
      throw std::invalid_argument("--trace writes one case's records: give one lesson, and one value each of --dtypes, --head-dims, "
                                  "--causal, --seqlens and --variant");
    o.once = true;  // nothing is timed
  }
  if (o.tour) {
    o.seqlens = {1024};
    o.head_dims = {64};
    o.causal = {0, 1};
    o.reps = std::min(o.reps, 10);
  }
  return o;
}

struct Row {
  std::string lesson, status;
  fa::DType dtype;
  int head_dim, causal, batch, heads, seqlen;
  double ms = 0, tflops = 0, pct = 0, max_err = 0;
};

// Head h of sequence b of `prob` alone, `len` rows and keys (the bench's cases have seqlen_q =
// seqlen_k): one dense head, what the validators copy out and give the reference, which is handed
// Q and K rotated already (RoPE off), as the kernel's tensor cores see them.
fa::Problem one_head(const fa::Problem& prob, int len) {
  fa::Problem one = prob;
  one.batch = one.heads_q = one.heads_kv = 1;
  one.seqlen_q = one.seqlen_k = len;
  one.cu_seqlens_q.clear();
  one.cu_seqlens_k.clear();
  one.rope_base = 0;
  return one;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rows [t0, t0 + rows) of head h of a (tokens, heads, head_dim) device tensor, as fp64: a packed
// varlen tensor, or (heads = 1, h = 0) any run of rows of a contiguous one. Only that head's
// columns are copied.
std::vector<double> packed_values(const fa::AttnParams& p, const fa::Buffer& buf, int heads, int h, size_t t0, int rows) {
  const size_t row_elems = size_t(heads) * p.head_dim;
  std::vector<uint16_t> bits(size_t(rows) * p.head_dim);
  FA_CUDA_CHECK(cudaMemcpy2D(bits.data(), p.head_dim * 2, static_cast<const uint16_t*>(buf.data()) + t0 * row_elems + size_t(h) * p.head_dim,
                             row_elems * 2, p.head_dim * 2, rows, cudaMemcpyDeviceToHost));
  std::vector<double> out(bits.size());
  for (size_t e = 0; e < bits.size(); ++e) out[e] = fa::from_storage(p.dtype, bits[e]);
  return out;
}

// The values of head `index` (a (rows x head_dim) block) of a contiguous device tensor, as fp64.
std::vector<double> head_values(const fa::AttnParams& p, const fa::Buffer& buf, size_t index, int rows) {
  return packed_values(p, buf, 1, 0, index * rows, rows);
}

// Sequence b of the bench's batch (seqlen_q = seqlen_k, total_q = total_k): its first row t0 in
// the packed tensors (varlen: cu[b]; dense: batch entry b, from row 0) and its length.
struct Seq {
  int b, t0, len;
};
Seq sequence(const fa::AttnParams& p, const std::vector<int>& cu, int b) {
  return p.is_varlen() ? Seq{b, cu[b], cu[b + 1] - cu[b]} : Seq{b, 0, p.seqlen_q};
}
// Head h (of `heads`) of sequence s of a q-, k- or v-shaped device tensor, as fp64 (len x head_dim).
std::vector<double> seq_values(const fa::AttnParams& p, const fa::Buffer& buf, int heads, const Seq& s, int h) {
  return p.is_varlen() ? packed_values(p, buf, heads, h, s.t0, s.len) : head_values(p, buf, size_t(s.b) * heads + h, s.len);
}
// Where (sequence s, query head h, row 0) is in the fp32 per-row tensors: the LSE, g and dg are
// (batch, heads_q, seqlen) dense and (heads_q, total) varlen.
size_t row_index(const fa::AttnParams& p, const Seq& s, int h) {
  return p.is_varlen() ? size_t(h) * p.total_q + s.t0 : (size_t(s.b) * p.heads_q + h) * p.seqlen_q;
}
// `count` fp32 values of a device tensor from element `at`.
std::vector<double> device_floats(const float* device, size_t at, int count) {
  std::vector<float> f(count);
  FA_CUDA_CHECK(cudaMemcpy(f.data(), device + at, f.size() * 4, cudaMemcpyDeviceToHost));
  return {f.begin(), f.end()};
}
// The gate of (sequence s, query head h) from the host copy of g; empty without the gate.
std::vector<double> seq_gate(const fa::AttnParams& p, const std::vector<float>& g, const Seq& s, int h) {
  if (g.empty()) return {};
  const size_t at = row_index(p, s, h);
  return {g.begin() + at, g.begin() + at + s.len};
}

// Rows to check in a sequence of `len` rows: the first two, the middle, the last, four random ones.
std::vector<int> sampled_rows(int len, const char* what) {
  fa::Rng rng(fa::seed_for(what));
  std::vector<int> rows = {0, std::min(1, len - 1), len / 2, len - 1};
  for (int i = 0; i < 4; ++i) rows.push_back(rng.uniform_int(0, len - 1));
  return rows;
}

// Validates rows of head h of sequence b of the lesson's output against the fp64 reference on the
// same inputs (query head h reads K/V head h / (heads_q / heads_kv); a varlen sequence b is rows
// cu[b] .. cu[b + 1] of the packed tensors; `gate`, the host copy of g, or empty). Returns "" when
// they match, else the comparison's report.
std::string validate_head(const fa::Problem& problem, const fa::AttnParams& p, const fa::Buffer& q, const fa::Buffer& k, const fa::Buffer& v,
                          const fa::Buffer& o, const fa::Buffer& lse, const fa::RopeTables& tables,
                          const std::vector<float>& gate, const std::vector<int>& cu, int b, int h, double* max_err) {
  const Seq s = sequence(p, cu, b);
  const int hk = h / (p.heads_q / p.heads_kv), len = s.len;
  const fa::Problem prob = one_head(problem, len);  // the one head (b, h) copied out below
  fa::ref::Inputs in{seq_values(p, q, p.heads_q, s, h), seq_values(p, k, p.heads_kv, s, hk), seq_values(p, v, p.heads_kv, s, hk),
                     seq_gate(p, gate, s, h)};
  if (p.rope_cos != nullptr) {
    // RoPE: rotated and rounded as the kernel's tensor cores see them (fa::rope_rotate_rounded).
    fa::rope_rotate_rounded(in.q, p.head_dim, p.seqlen_q, p.seqlen_k - p.seqlen_q, tables, p.dtype);
    fa::rope_rotate_rounded(in.k, p.head_dim, p.seqlen_k, 0, tables, p.dtype);
  }
  const std::vector<int> rows = sampled_rows(len, "fa-bench rows");
  const std::vector<double> o_all = seq_values(p, o, p.heads_q, s, h);
  const std::vector<double> lse_all = device_floats(static_cast<const float*>(lse.data()), row_index(p, s, h), len);
  std::vector<double> got_o, got_lse;
  for (int r : rows) {
    got_lse.push_back(lse_all[r]);
    for (int d = 0; d < p.head_dim; ++d) got_o.push_back(o_all[size_t(r) * p.head_dim + d]);
  }
  const int n = static_cast<int>(rows.size());
  const fa::test::ForwardCheck check =
      fa::test::compare_forward(prob, in, &rows, got_o, got_lse, {n, p.head_dim}, {"sampled row", "d"}, {n}, {"sampled row"});
  const fa::CompareReport &ro = check.o, &rl = check.lse;
  *max_err = std::max(*max_err, ro.max_abs_err);
  if (check.ok()) return "";
  return std::string(p.is_varlen() ? "sequence" : "batch") + " " + std::to_string(b) + ", head " + std::to_string(h) + ": " +
         (ro.ok ? "" : ro.text + " ") + (rl.ok ? "" : rl.text);
}

// How many elements of a gradient are NaN or inf (unwritten ones are NaN: the buffer is poisoned).
size_t not_finite(const fa::AttnParams& p, const fa::Buffer& buf) {
  const std::vector<uint16_t> bits = buf.to_host<uint16_t>();
  size_t bad = 0;
  for (uint16_t b : bits) bad += !std::isfinite(fa::from_storage(p.dtype, b));
  return bad;
}
size_t not_finite_fp32(const fa::Buffer& buf) {
  const std::vector<float> x = buf.to_host<float>();
  return static_cast<size_t>(std::count_if(x.begin(), x.end(), [](float f) { return !std::isfinite(f); }));
}

// The key positions at the end of a sequence where dg is checked (ref::backward_rows: only the
// last positions are cheap to compute).
constexpr int kGateCheckPositions = 16;

// The device buffers of a backward call, for its validation.
struct BackwardBuffers {
  const fa::Buffer &q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &dgate;
};

// Checks sampled rows of the gradients of head h of sequence b against the fp64 gradients computed
// from the same inputs and the same O and LSE (ref::backward_rows): dQ of query head h, dK and dV of
// its K/V head (the sum over the query heads of its group), and, with the gate, dg of head h at the
// last kGateCheckPositions keys, each element within 4u of the sum of its terms' sizes (dg cancels;
// below). Returns "" when they match.
std::string validate_backward_head(const fa::Problem& problem, const fa::AttnParams& p, const BackwardBuffers& x, const std::vector<float>& gate,
                                   const std::vector<int>& cu, int b, int h, double* max_err) {
  const Seq s = sequence(p, cu, b);
  const int group = p.heads_q / p.heads_kv, hk = h / group, len = s.len, D = p.head_dim;
  const fa::Problem prob = one_head(problem, len);
  const std::vector<int> qrows = sampled_rows(len, "fa-bench gradient rows"), krows = sampled_rows(len, "fa-bench gradient keys");
  const int dg_last = gate.empty() ? 0 : std::min(kGateCheckPositions, len);
  const std::vector<double> k = seq_values(p, x.k, p.heads_kv, s, hk), v = seq_values(p, x.v, p.heads_kv, s, hk);
  fa::ref::SampledGradients want;
  want.dk.assign(krows.size() * D, 0.0);
  want.dv.assign(krows.size() * D, 0.0);
  want.dk_cancel.assign(krows.size() * D, 0.0);
  for (int h2 = hk * group; h2 < (hk + 1) * group; ++h2) {  // dK and dV: every query head of the group
    const fa::ref::Inputs in{seq_values(p, x.q, p.heads_q, s, h2), k, v, seq_gate(p, gate, s, h2)};
    const bool mine = h2 == h;
    const fa::ref::SampledGradients one = fa::ref::backward_rows(
        prob, in, seq_values(p, x.dout, p.heads_q, s, h2), seq_values(p, x.o, p.heads_q, s, h2),
        device_floats(static_cast<const float*>(x.lse.data()), row_index(p, s, h2), len), mine ? qrows : std::vector<int>{}, krows,
        mine ? dg_last : 0);
    for (size_t e = 0; e < one.dk.size(); ++e) {
      want.dk[e] += one.dk[e];
      want.dv[e] += one.dv[e];
      want.dk_cancel[e] += one.dk_cancel[e];
    }
    if (mine) {
      want.dq = one.dq;
      want.dq_cancel = one.dq_cancel;
      want.dg = one.dg;
      want.dg_terms = one.dg_terms;
    }
  }
  // The kernel's gradients at the same rows, and dg at the last dg_last positions.
  auto rows_of = [&](const fa::Buffer& g, int heads, int head, const std::vector<int>& rows) {
    const std::vector<double> all = seq_values(p, g, heads, s, head);
    std::vector<double> out;
    for (int r : rows)
      for (int d = 0; d < D; ++d) out.push_back(all[size_t(r) * D + d]);
    return out;
  };
  fa::ref::SampledGradients got;
  got.dq = rows_of(x.dq, p.heads_q, h, qrows);
  got.dk = rows_of(x.dk, p.heads_kv, hk, krows);
  got.dv = rows_of(x.dv, p.heads_kv, hk, krows);
  if (dg_last > 0) got.dg = device_floats(static_cast<const float*>(x.dgate.data()), row_index(p, s, h) + (len - dg_last), dg_last);
  const std::string bad =
      fa::test::compare_sampled_gradients(prob, got, want, int(qrows.size()), int(krows.size()), max_err);
  if (bad.empty()) return "";
  return std::string(p.is_varlen() ? "sequence " : "batch ") + std::to_string(b) + ", head " + std::to_string(h) + ": " + bad;
}

// The forward that makes O and the LSE for --bwd: lesson 08's (the course's fastest mma.sync one),
// except with --gqa, --varlen or --gate for a lesson with its own forward (forward_for).
const fa::LessonInfo* g_forward_for_backward = nullptr;

// The forward a case runs: the lesson's own. For --bwd: lesson 08's on plain problems (so backward
// numbers stay comparable across lessons and runs); with --gqa, --varlen or --gate, the lesson's own
// forward when it has one (lesson 08 has no varlen and no gate), else lesson 08's (lessons 10 and
// 11 have GQA and no forward). Null when lesson 08 is needed and this build lacks it.
const fa::LessonInfo* forward_for(const fa::LessonInfo& lesson, const Options& o) {
  if (!o.bwd) return &lesson;
  const bool own = (o.gqa > 1 || !o.varlen.empty() || o.gate) && lesson.forward != nullptr;
  return own ? &lesson : g_forward_for_backward;
}

Row run_case(const fa::LessonInfo& lesson, const std::string& variant, fa::DType t, int d, int causal, int seqlen, const Options& o,
             fa::bench::L2Flusher& flusher, const Ceiling& ceiling) {
  Row row{o.label.empty() ? lesson.id : o.label, "ok", t, d, causal, std::max(1, o.tokens / seqlen), o.width / d, seqlen};
  if (!variant.empty() && (o.label.empty() || o.variants.size() > 1)) row.lesson += " " + variant;
  // --variant: its index, if the lesson has it for this pass and head dim.
  const int variant_index = fa::find_variant(lesson, variant);
  if (!variant.empty()) {
    if (variant_index < 0) {
      row.status = "skipped: no variant " + variant + " in this lesson (fa-bench --list-variants)";
      return row;
    }
    const fa::Variant::Pass pass = o.bwd ? fa::Variant::Pass::kBackward : fa::Variant::Pass::kForward;
    if (!fa::variant_applies(lesson, variant_index, pass, d)) {
      row.status = "skipped: variant " + variant + " is not one of the " + fa::name(pass) + " at head dim " +
                   std::to_string(d) + " (fa-bench --list-variants)";
      return row;
    }
  }
  // --varlen: the batch's prefix sums, for the packed run, and for the pairs both runs count.
  std::vector<int> cu;
  if (!o.varlen.empty()) {
    row.batch = static_cast<int>(o.varlen.size());
    cu = {0};
    for (int len : o.varlen) cu.push_back(cu.back() + len);
    if (o.label.empty()) row.lesson += o.padded ? " padded" : " packed";
  }
  if (o.gqa > 1 && o.label.empty()) row.lesson += " gqa" + std::to_string(o.gqa);
  if (o.gate && o.label.empty()) row.lesson += " gate";
  const bool packed = !o.varlen.empty() && !o.padded;
  if (packed && !lesson.features.varlen) {
    row.status = "skipped: --varlen, and this lesson has no varlen (time it padded with --padded)";
    return row;
  }
  if (o.padded && !causal) {
    row.status = "skipped: --padded without the causal mask (the padded keys would need a key mask)";
    return row;
  }
  if (o.gqa > 1 && !lesson.features.gqa) {
    row.status = "skipped: --gqa, and this lesson has no grouped-query heads";
    return row;
  }
  if (o.gate && !lesson.features.gate) {
    row.status = "skipped: --gate, and this lesson has no decay gate";
    return row;
  }
  if (o.gate && !causal) {
    row.status = "skipped: --gate without the causal mask (the decay gate is defined for causal attention only)";
    return row;
  }
  if (row.heads % o.gqa != 0) {
    row.status = "ERROR: --gqa " + std::to_string(o.gqa) + " does not divide the " + std::to_string(row.heads) + " heads";
    return row;
  }
  if (lesson.memory != fa::Memory::kDevice) {
    row.status = "skipped: a CPU lesson";
    return row;
  }
  if (o.bwd && lesson.backward == nullptr) {
    row.status = "skipped: --bwd, and this lesson has no backward";
    return row;
  }
  if (!o.bwd && lesson.forward == nullptr) {
    row.status = "skipped: a backward lesson (time it with --bwd)";
    return row;
  }
  if (forward_for(lesson, o) == nullptr) {
    row.status = "ERROR: --bwd takes O and the LSE from lesson 08's forward, which this build lacks";
    return row;
  }
  const fa::LessonInfo& fwd = *forward_for(lesson, o);
  if (o.rope && !lesson.features.rope) {
    row.status = "skipped: --rope, and this lesson has no RoPE";
    return row;
  }
  const int64_t scores = int64_t(row.batch) * row.heads * seqlen * seqlen;
  if (lesson.bench_max_scores > 0 && scores > lesson.bench_max_scores) {
    char gb[32];
    std::snprintf(gb, sizeof gb, "%.1f", scores * 4.0 / 1e9);
    row.status = std::string("skipped: ") + std::to_string(scores) + " scores (" + gb + " GB of fp32 S); " +
                 lesson.bench_limit_reason;
    return row;
  }
  // The case (fa/problem.hpp): what the call runs; the validation's reference computes one head of
  // it at a time (one_head), and the TFLOP/s count its visible pairs.
  fa::Problem prob;
  prob.batch = row.batch;
  prob.heads_q = row.heads;
  prob.heads_kv = row.heads / o.gqa;
  prob.seqlen_q = prob.seqlen_k = seqlen;
  prob.head_dim = d;
  prob.dtype = t;
  prob.causal = causal != 0;
  prob.gate = o.gate;
  prob.rope_base = o.rope ? fa::kRopeBase : 0;
  if (packed) prob.cu_seqlens_q = prob.cu_seqlens_k = cu;
  fa::AttnParams p = fa::params_for(prob);
  const size_t tokens = size_t(prob.total_q());  // rows of the tensors
  const size_t n = tokens * p.heads_q * d, nkv = tokens * p.heads_kv * d;
  fa::Buffer q(fa::Memory::kDevice, n * 2, "q"), k(fa::Memory::kDevice, nkv * 2, "k"), v(fa::Memory::kDevice, nkv * 2, "v");
  fa::Buffer out(fa::Memory::kDevice, n * 2, "o"), lse(fa::Memory::kDevice, tokens * p.heads_q * 4, "lse");
  const uint64_t seed = fa::seed_for(std::string(lesson.id) + std::to_string(seqlen) + std::to_string(d));
  fa::bench::fill_randn(q.data(), n, t, seed);
  fa::bench::fill_randn(k.data(), nkv, t, seed + 0x1000000000ull);
  fa::bench::fill_randn(v.data(), nkv, t, seed + 0x2000000000ull);
  fa::Buffer cu_dev;
  if (packed) {
    cu_dev = fa::Buffer(fa::Memory::kDevice, cu.size() * 4, "cu_seqlens");
    cu_dev.upload(cu.data(), cu.size() * 4);
    p.cu_seqlens_q = p.cu_seqlens_k = static_cast<const int*>(cu_dev.data());
  }
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = out.data();
  p.lse = static_cast<float*>(lse.data());
  // --gate: g = log sigmoid(x), x uniform in [2.25, 4.6]: g in [-0.1, -0.01]. Kept on the host
  // too, for the validation.
  std::vector<float> gate;
  fa::Buffer gate_dev, dgate;
  if (o.gate) {
    fa::Rng rng(seed + 0x4000000000ull);
    gate.resize(tokens * p.heads_q);  // (batch, heads_q, seqlen_k) or (heads_q, total_k): one value per token and head
    for (float& g : gate) g = static_cast<float>(-std::log1p(std::exp(-(2.25 + 2.35 * rng.uniform()))));
    gate_dev = fa::Buffer(fa::Memory::kDevice, gate.size() * 4, "gate");
    gate_dev.upload(gate.data(), gate.size() * 4);
    p.gate = static_cast<const float*>(gate_dev.data());
  }
  fa::Buffer rope_cos, rope_sin;
  fa::RopeTables tables;  // host copy of the tables, for validate_head
  if (o.rope) {
    tables = fa::rope_tables(seqlen, d, prob.rope_base);
    rope_cos = fa::Buffer(fa::Memory::kDevice, tables.cos.size() * 4, "rope_cos");
    rope_sin = fa::Buffer(fa::Memory::kDevice, tables.sin.size() * 4, "rope_sin");
    rope_cos.upload(tables.cos.data(), tables.cos.size() * 4);
    rope_sin.upload(tables.sin.data(), tables.sin.size() * 4);
    p.rope_cos = static_cast<const float*>(rope_cos.data());
    p.rope_sin = static_cast<const float*>(rope_sin.data());
    p.rope_positions = seqlen;
  }
  try {
    out.poison();
    lse.poison();
    p.variant = o.bwd ? 0 : variant_index;  // --bwd: the variant is the backward's; O and the LSE come from a default forward
    fa::run_forward(fwd, p);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    for (const fa::Buffer* b : {&q, &k, &v, &out, &lse}) b->check_guards();
    if (o.gate) gate_dev.check_guards();
    std::string bad = validate_head(prob, p, q, k, v, out, lse, tables, gate, cu, 0, 0, &row.max_err);
    if (bad.empty()) bad = validate_head(prob, p, q, k, v, out, lse, tables, gate, cu, p.batch - 1, p.heads_q - 1, &row.max_err);
    if (!bad.empty()) {
      row.status = "WRONG: " + (o.bwd ? "the forward (" + std::string(fwd.id) + ") for --bwd: " : std::string()) + bad;
      return row;
    }
    fa::Buffer dout, dq, dk, dv;
    if (o.bwd) {
      dout = fa::Buffer(fa::Memory::kDevice, n * 2, "dout");
      dq = fa::Buffer(fa::Memory::kDevice, n * 2, "dq");
      dk = fa::Buffer(fa::Memory::kDevice, nkv * 2, "dk");
      dv = fa::Buffer(fa::Memory::kDevice, nkv * 2, "dv");
      fa::bench::fill_randn(dout.data(), n, t, seed + 0x3000000000ull);
      p.dout = dout.data();
      p.dq = dq.data();
      p.dk = dk.data();
      p.dv = dv.data();
      p.deterministic = o.deterministic;
      p.variant = variant_index;
      if (o.gate) {
        dgate = fa::Buffer(fa::Memory::kDevice, gate.size() * 4, "dgate");
        p.dgate = static_cast<float*>(dgate.data());
      }
      for (fa::Buffer* b : {&dq, &dk, &dv}) b->poison();
      if (o.gate) dgate.poison();
      fa::run_backward(lesson, p);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      for (const fa::Buffer* b : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv}) b->check_guards();
      if (o.gate)
        for (const fa::Buffer* b : {&gate_dev, &dgate}) b->check_guards();
      row.max_err = 0;
      for (auto [b, name] : {std::pair<const fa::Buffer*, const char*>{&dq, "dQ"}, {&dk, "dK"}, {&dv, "dV"}})
        if (const size_t nf = not_finite(p, *b)) bad += std::string(name) + ": " + std::to_string(nf) + " elements NaN or inf (unwritten ones stay NaN) ";
      if (o.gate)
        if (const size_t nf = not_finite_fp32(dgate)) bad += "dg: " + std::to_string(nf) + " elements NaN or inf (unwritten ones stay NaN) ";
      const BackwardBuffers bufs{q, k, v, out, lse, dout, dq, dk, dv, dgate};
      if (bad.empty()) bad = validate_backward_head(prob, p, bufs, gate, cu, 0, 0, &row.max_err);
      if (bad.empty()) bad = validate_backward_head(prob, p, bufs, gate, cu, p.batch - 1, p.heads_q - 1, &row.max_err);
      if (!bad.empty()) {
        row.status = "WRONG: " + bad;
        return row;
      }
    }
    if (!o.trace.empty()) {
      const fa::Tracer& tr = lesson.tracer;
      if (tr.run == nullptr) {
        row.status = "ERROR: --trace, and this lesson has no traced build";
        return row;
      }
      if (tr.backward != o.bwd) {
        row.status = std::string("ERROR: --trace: this lesson traces its ") + (tr.backward ? "backward (add --bwd)" : "forward (no --bwd)");
        return row;
      }
      const int events = o.trace_events > 0 ? o.trace_events : tr.events;
      const std::vector<fa::TraceLane> lanes = fa::run_traced(lesson, p, events, "--trace-events", nullptr);
      fa::write_trace_csv(o.trace, lanes, o.trace_sms, tr.label_column, tr.label(p), tr.phase_name);
      row.status = "ok (validated, traced into " + o.trace + ")";
      return row;
    }
    if (o.once) {
      row.status = "ok (validated, not timed)";
      return row;
    }
    cudaEvent_t start, stop;
    FA_CUDA_CHECK(cudaEventCreate(&start));
    FA_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> ms;
    // --pause-ms: a short case timed right after the grid's longest one ran slower than alone
    // (lesson 13's README, "The short lengths alone"); the GPU idles first, the same for every case.
    if (o.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
    const auto wall0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < o.reps + 2; ++rep) {
      flusher.flush(nullptr);
      FA_CUDA_CHECK(cudaEventRecord(start));
      // The lesson's entry point itself: the call was validated above (fa::run_forward), and
      // validation's host work (for varlen, two synchronous copies of cu_seqlens) is not the kernel's.
      if (o.bwd) lesson.backward(p, nullptr);
      else lesson.forward(p, nullptr);
      FA_CUDA_CHECK(cudaEventRecord(stop));
      FA_CUDA_CHECK(cudaEventSynchronize(stop));
      float t_ms = 0;
      FA_CUDA_CHECK(cudaEventElapsedTime(&t_ms, start, stop));
      if (rep >= 2) ms.push_back(t_ms);  // two warm-up runs
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
      if (rep >= 4 && wall > o.max_seconds) break;  // slow lessons: at least 3 timed runs
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    row.ms = median(ms);
    fa::Problem counted = prob;
    counted.cu_seqlens_q = counted.cu_seqlens_k = cu;  // --varlen: the real sequences' pairs, packed or padded
    const double flops = (o.bwd ? 2.5 : 1.0) * 4.0 * d * fa::ref::visible_pairs(counted);
    row.tflops = flops / (row.ms * 1e-3) / 1e12;
    row.pct = ceiling.tflops > 0 ? 100.0 * row.tflops / ceiling.tflops : 0;
  } catch (const fa::Error& e) {
    row.status = std::string("ERROR: ") + e.what();
  }
  return row;
}

}  // namespace

// --list-variants: every lesson's variants, the first its default.
void list_variants() {
  for (const fa::LessonInfo* l : fa_all_lessons()) {
    if (l->variants.empty()) continue;
    std::printf("%s\n", l->id);
    for (size_t i = 0; i < l->variants.size(); ++i) {
      const fa::Variant& v = l->variants[i];
      const std::string pass = v.pass == fa::Variant::Pass::kBoth ? "" : std::string(" (") + fa::name(v.pass) + ")";
      std::printf("  %-16s %s%s%s\n", v.name.c_str(), v.about.c_str(), pass.c_str(), i == 0 ? " [default]" : "");
    }
  }
  std::printf("time one: fa-bench --lessons NN --variant NAME (--bwd for a backward's); test one: FA_TEST_VARIANT=NAME ctest -L lessonNN\n");
}

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.list_variants) {
      list_variants();
      return 0;
    }
    std::string why;
    if (fa::no_gpu(&why)) {
      std::printf("fa-bench: no usable CUDA GPU (%s); the GPU lessons' timings need one.\n", why.c_str());
      return o.tour ? 0 : 2;
    }
    cudaDeviceProp prop{};
    FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::vector<const fa::LessonInfo*> lessons;
    for (const fa::LessonInfo* l : fa_all_lessons()) {
      const std::string nn = lesson_number(*l);
      const bool wanted = o.lessons.front() == "all" || std::find(o.lessons.begin(), o.lessons.end(), nn) != o.lessons.end();
      if (wanted && l->memory == fa::Memory::kDevice) lessons.push_back(l);
      if (nn == "08") g_forward_for_backward = l;
    }
    // --once times nothing, so it measures no ceiling either (under a sanitizer or a profiler those
    // kernels would only cost time).
    const Ceiling fma{"fp32_fma", o.once ? 0 : fa::bench::measure_fp32_fma_tflops()};
    const Ceiling mma{"mma_sync_fp16", o.once ? 0 : fa::bench::measure_mma_sync_tflops()};
    // The wgmma GEMM roof (cuBLAS) is measured only when a lesson needs it and this is a Hopper GPU.
    const bool hopper_lesson = std::any_of(lessons.begin(), lessons.end(), [](const fa::LessonInfo* l) {
      return roof_of(*l) == Roof::kGemm;
    });
    const Ceiling gemm{"cublas_gemm_fp16", hopper_lesson && prop.major == 9 && !o.once ? fa::bench::measure_cublas_gemm_tflops() : 0};
    fa::bench::L2Flusher flusher;
    std::printf("fa-bench on %s (%d SMs, L2 %d MB): ", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    if (o.once) std::printf("ceilings not measured (--once)");
    else std::printf("ceilings measured: FP32 FMA %.1f, mma.sync fp16 %.1f TFLOP/s", fma.tflops, mma.tflops);
    if (gemm.tflops > 0) std::printf(", cuBLAS fp16 GEMM (8192^3) %.1f TFLOP/s", gemm.tflops);
    else if (hopper_lesson && !o.once)
      std::printf(", cuBLAS GEMM not measured (%s): lesson 13's %% column is 0",
                  prop.major == 9 ? "fa-bench built without cuBLAS" : "not a Hopper GPU");
    std::printf("; L2 flushed (%zu MB) before every run; medians of CUDA-event times\n", flusher.bytes() >> 20);
    if (!o.varlen.empty()) {
      long total = 0;
      for (int len : o.varlen) total += len;
      std::printf("one varlen batch: %zu sequences, %ld tokens, lengths", o.varlen.size(), total);
      for (int len : o.varlen) std::printf(" %d", len);
      std::printf(" (%s); TFLOP/s from the real sequences' visible pairs\n",
                  o.padded ? "padded to the longest, dense path" : "packed, cu_seqlens");
    }
    if (o.gqa > 1) std::printf("grouped-query heads: %d query heads per K/V head\n", o.gqa);
    if (o.gate) std::printf("decay gate: g = log sigmoid(x), x uniform in [2.25, 4.6] (g in [-0.1, -0.01]), causal cases only\n");
    if (o.bwd && (o.gqa > 1 || !o.varlen.empty() || o.gate))
      std::printf("--bwd: O and the LSE from each lesson's own forward where it has one (else lesson 08's)\n");
    std::printf("%-16s %-5s %4s %6s %9s %6s %10s %9s %7s %9s  %s\n", "lesson", "dtype", "d", "causal", "batch x h",
                "N", "ms", "TFLOP/s", "% ceil", "max err", "status");
    std::ofstream csv;
    if (!o.csv.empty()) {
      const bool fresh = !std::ifstream(o.csv).good();
      csv.open(o.csv, std::ios::app);
      if (fresh)
        csv << "gpu,lesson,dtype,head_dim,causal,batch,heads,seqlen,ms,tflops,ceiling_name,ceiling_tflops,pct_of_ceiling,max_abs_err,status\n";
    }
    int wrong = 0;
    if (!o.trace.empty()) std::remove(o.trace.c_str());  // a trace file left from before must not pass for this one
    for (const fa::LessonInfo* l : lessons)
      for (fa::DType t : o.dtypes)
        for (int d : o.head_dims)
          for (int causal : o.causal)
            for (int n : o.seqlens)
              for (const std::string& variant : o.variants) {
                const auto& dims = l->features.head_dims;
                if (!dims.empty() && std::find(dims.begin(), dims.end(), d) == dims.end()) continue;
                const Roof roof = roof_of(*l);
                const Ceiling& ceiling = roof == Roof::kGemm ? gemm : roof == Roof::kMmaSync ? mma : fma;
                const Row r = run_case(*l, variant, t, d, causal, n, o, flusher, ceiling);
                if (r.status.rfind("WRONG", 0) == 0 || r.status.rfind("ERROR", 0) == 0) ++wrong;
                const std::string bh = std::to_string(r.batch) + "x" + std::to_string(r.heads);
                if (r.status == "ok" && !o.once)
                  std::printf("%-16s %-5s %4d %6d %9s %6d %10.3f %9.2f %6.1f%% %9.2e  %s\n", r.lesson.c_str(), fa::name(t), d,
                              causal, bh.c_str(), n, r.ms, r.tflops, r.pct, r.max_err, r.status.c_str());
                else
                  std::printf("%-16s %-5s %4d %6d %9s %6d %10s %9s %7s %9s  %s\n", r.lesson.c_str(), fa::name(t), d, causal,
                              bh.c_str(), n, "-", "-", "-", "-", r.status.c_str());
                std::fflush(stdout);
                if (csv.is_open()) {
                  std::string status = r.status;
                  std::replace(status.begin(), status.end(), ',', ';');
                  std::replace(status.begin(), status.end(), '\n', ' ');
                  csv << prop.name << "," << r.lesson << "," << fa::name(t) << "," << d << "," << causal << "," << r.batch << ","
                      << r.heads << "," << n << "," << r.ms << "," << r.tflops << "," << ceiling.name << "," << ceiling.tflops << "," << r.pct << ","
                      << r.max_err << "," << status << "\n";
                }
              }
    if (!o.trace.empty() && !std::ifstream(o.trace).good()) {
      std::printf("--trace: no trace written to %s (see the status column)\n", o.trace.c_str());
      ++wrong;
    }
    if (wrong) std::printf("%d case(s) WRONG or failed: see the status column\n", wrong);
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa-bench: %s\n", e.what());
    return 2;
  }
}
