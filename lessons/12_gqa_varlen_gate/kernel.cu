// Your copy of this lesson, generated from solutions/12_gqa_varlen_gate/kernel.cu by fa-skeleton.
// Lesson 12: grouped-query heads, packed variable-length batches and the log-decay gate, forward
// and backward. Built on the course's fastest kernels: lesson 08's forward (cp.async ring,
// swizzled tiles, mma.sync; its tiles.hpp and choice of tiles) and lesson 11's backward (dK/dV
// per key tile with dQ by fp32 atomics, or the deterministic dQ pass; its tiles.hpp). Added here:
//   GQA     query head h reads K/V head h / (heads_q / heads_kv); the backward's dK/dV block of a
//           kv head visits the query tiles of every head of its group (as lesson 11 does);
//   varlen  sequences packed into (total_tokens, heads, head_dim) with cu_seqlens; tiles never
//           cross a sequence boundary. plan_kernel builds the tile map on the device, heaviest
//           tile first (a counting sort by work); the grid is an upper bound, spare blocks exit;
//   gate    s_ij += G_i - G_j, G = cumsum(g) per sequence and head, computed by scan_kernel in
//           fp64; the kernels add fp32 differences from a per-tile anchor, never G itself;
//   dg      dG_t = -(column sum of dS over the query rows that see key t) (the row sums of dS are
//           0), summed in the dK/dV kernel; dg = the reverse cumsum of dG, by scan_kernel again.
// The files: sequences.cuh (the sequences, the tile map's plan kernel, the gate's scan, a block's
// work; TODOs 11-14), forward.cuh (the query tiles lesson 08's kernel runs over; TODOs 15-16),
// backward.cuh (TODOs 17-21), plan.hpp (the plan's index math, host and device; TODOs 1-3),
// model.cpp (the CPU model; TODOs 4-10), and this file: the scratch, launches and entry points.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson12
//   lessons/12_gqa_varlen_gate/profile.sh
// The lesson's variants (fa-bench --variant): natural runs the forward's tiles in packed order
// instead of heaviest first; pass times the backward's deterministic dQ pass in the default mode.
#include <climits>
#include <cstdint>
#include <string>

#include "../08_pipelining/tiles.hpp"
#include "../11_fast_backward/tiles.hpp"
#include "backward.cuh"
#include "fa/cuda_check.hpp"
#include "fa/params.hpp"
#include "forward.cuh"
#include "plan.hpp"
#include "sequences.cuh"

namespace {

// ---- Host side ---------------------------------------------------------------------------------
// The scratch beside the outputs (the maps, G, the backward's statistics, dG, the fp32 dQ sums)
// is the process's device scratch (fa::device_scratch, README, Caveats), carved into 256-byte
// aligned pieces.
struct Carver {
  char* at;  // nullptr on the sizing pass: then `at` ends as the bytes needed
  template <class X>
  X* take(size_t count) {
    X* x = reinterpret_cast<X*>(at);
    at += (count * sizeof(X) + 255) / 256 * 256;
    return x;
  }
};

// A tile map: varlen, the plan's outputs and the grid's upper bound of entries; dense, the number
// of (sequence, tile) entries (the kernels compute them from the block index).
struct Map {
  int* tile_start = nullptr;
  int2* order = nullptr;
  int* count = nullptr;
  int64_t entries = 0;
};
Map take_map(Carver& c, const fa::AttnParams& p, int tile, bool query_tiles) {
  Map m;
  if (!p.is_varlen()) {
    m.entries = int64_t(fa::ceil_div(query_tiles ? p.seqlen_q : p.seqlen_k, tile)) * p.batch;
    return m;
  }
  // sum over sequences of ceil(len / tile) <= total / tile + batch
  m.entries = int64_t(query_tiles ? p.total_q : p.total_k) / tile + p.batch;
  m.tile_start = c.take<int>(p.batch + 1);
  m.order = c.take<int2>(m.entries);
  m.count = c.take<int>(1);
  return m;
}
void launch_plan(const Map& m, const fa::AttnParams& p, int tile, int other_tile, bool query_tiles, cudaStream_t stream,
                 bool heaviest_first = true) {
  if (!p.is_varlen()) return;
  plan_kernel<<<1, kPlanThreads, 0, stream>>>(query_tiles ? p.cu_seqlens_q : p.cu_seqlens_k,
                                              query_tiles ? p.cu_seqlens_k : p.cu_seqlens_q, p.batch, tile, other_tile,
                                              p.causal, query_tiles, heaviest_first, m.tile_start, m.order, m.count);
  FA_CHECK_LAUNCH();
}
int64_t gate_elements(const fa::AttnParams& p) {
  return p.is_varlen() ? int64_t(p.heads_q) * p.total_k : int64_t(p.batch) * p.heads_q * p.seqlen_k;
}
template <class In, class Out, bool kReverse>
void launch_scan(const fa::AttnParams& p, const In* in, const In* in2, Out* out, cudaStream_t stream) {
  const int64_t warps = int64_t(p.batch) * p.heads_q;
  scan_kernel<kReverse><<<static_cast<unsigned>((warps + 7) / 8), 256, 0, stream>>>(p, in, in2, out);
  FA_CHECK_LAUNCH();
}
unsigned grid_of(int64_t blocks) {
  if (blocks > INT32_MAX) throw fa::InvalidArgument("lesson 12_gqa_varlen_gate: the grid needs " + std::to_string(blocks) + " blocks, more than 2^31 - 1");
  return static_cast<unsigned>(blocks);
}
void check_started() {
  lesson08::throw_if_copy_todos_left("12_gqa_varlen_gate (it copies tiles with lesson 08's tiles.hpp and load_tile.cuh)");
  fa::throw_if_todos_left("12_gqa_varlen_gate (its backward's tiles come from lesson 11's tiles.hpp)", lesson11::kTilesTodosLeft);
  fa::throw_if_todos_left("08_pipelining", lesson08::kAttentionTodosLeft);  // lesson 08's kernel (attention.cuh), which its forward runs
  fa::throw_if_todos_left("11_fast_backward", lesson11::kDkdvTodosLeft);  // lesson 11's kernels (dkdv.cuh), which it runs
  // This lesson's lists as one: the TODO named is the lowest left in any of its files.
  fa::throw_if_todos_left("12_gqa_varlen_gate", {&lesson12::kPlanTodosLeft, &kSequencesTodosLeft, &kForwardTodosLeft, &kBackwardTodosLeft});
}

// The forward with lesson 08's configuration kIndex: G (with the gate), the map (varlen), then the
// attention kernel, one block per (map entry, query head), its tiles heaviest first or in packed order.
template <class T, int kIndex, bool kGate>
void forward_config(const fa::AttnParams& p, bool heaviest_first, cudaStream_t stream) {
  constexpr lesson08::Config c = lesson08::kConfigs[kIndex];
  static_assert(lesson08::well_formed(c), "a configuration of lesson 08's tiles.hpp is not well formed");
  auto carve = [&](Carver& cv, double*& G) {
    G = kGate ? cv.take<double>(gate_elements(p)) : nullptr;
    return take_map(cv, p, c.rows, true);
  };
  Carver sizing{nullptr};
  double* G = nullptr;
  carve(sizing, G);
  Carver cv{static_cast<char*>(fa::device_scratch(reinterpret_cast<size_t>(sizing.at)))};
  const Map map = carve(cv, G);
  if constexpr (kGate) launch_scan<float, double, false>(p, p.gate, nullptr, G, stream);
  launch_plan(map, p, c.rows, c.keys, true, stream, heaviest_first);
  constexpr int smem = lesson08::smem_bytes(c);
  using Tiles = PackedTiles<kGate>;
  auto kernel = lesson08::pipelined_kernel<T, c.head_dim, c.rows, c.keys, c.sub, c.warps, c.stages, c.blocks,
                                           lesson08::PlainLoads, Tiles>;
  fa::allow_smem(kernel, smem);
  kernel<<<grid_of(map.entries * p.heads_q), c.warps * 32, smem, stream>>>(p, typename Tiles::Args{map.order, map.count, G, heaviest_first});
  FA_CHECK_LAUNCH();
}

// The configurations lesson 08 chooses (sm_90 and sm_8x), the only ones compiled here.
constexpr int kFwd64 = lesson08::config_for(90, 64), kFwd128 = lesson08::config_for(90, 128);
constexpr int kFwd64Small = lesson08::config_for(86, 64), kFwd128Small = lesson08::config_for(86, 128);

// With the gate, the sm_90 configurations' S tile does not fit beside the gate's registers
// (ptxas spills): the gated kernel takes lesson 08's configurations with half as many keys a step.
using lesson12::kFwdGate64;  // plan.hpp
using lesson12::kFwdGate128;
static_assert(lesson08::kConfigs[kFwdGate64].head_dim == 64 && lesson08::kConfigs[kFwdGate128].head_dim == 128 &&
                  lesson08::kConfigs[kFwdGate64].sub * 2 == lesson08::kConfigs[kFwd64].sub &&
                  lesson08::kConfigs[kFwdGate128].sub * 2 == lesson08::kConfigs[kFwd128].sub,
              "the gated configurations are the sm_90 ones with half the keys a step");

template <class T, bool kGate>
void forward_dispatch(const fa::AttnParams& p, int index, bool heaviest_first, cudaStream_t stream) {
  if (index == kFwd64) forward_config<T, kGate ? kFwdGate64 : kFwd64, kGate>(p, heaviest_first, stream);
  else if (index == kFwd128) forward_config<T, kGate ? kFwdGate128 : kFwd128, kGate>(p, heaviest_first, stream);
  else if (index == kFwd64Small) forward_config<T, kFwd64Small, kGate>(p, heaviest_first, stream);
  else if (index == kFwd128Small) forward_config<T, kFwd128Small, kGate>(p, heaviest_first, stream);
  else throw fa::InvalidArgument("lesson 12_gqa_varlen_gate: no forward configuration for head_dim " + std::to_string(p.head_dim));
}

// The variants (fa_lesson_12 below): 0 the default, 1 "natural" (the forward's blocks take their
// query tiles in packed order, (sequence, tile) ascending, instead of heaviest first: the varlen map
// sorted by work, a dense causal batch's last tile first; README, question 4), 2 "pass" (the
// backward's dQ by the deterministic second pass in the default mode too, as lesson 11).
enum Variant { kDefault, kNatural, kPass };

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  check_started();
  const int index = lesson08::config_for(fa::current_device().sm, p.head_dim);
  const bool heaviest_first = p.variant != kNatural;
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.gate != nullptr) forward_dispatch<T, true>(p, index, heaviest_first, stream);
    else forward_dispatch<T, false>(p, index, heaviest_first, stream);
  });
}

using lesson11::kDqKeys;  // the dQ pass's tiles (lesson 11's tiles.hpp): 64 rows x 64 keys
using lesson11::kDqWarps;

// The backward with lesson 11's configuration kIndex: G, the maps, the statistics, the dK/dV kernel
// (and dQ by atomics + convert_kernel, or the dQ pass), then dg from dG.
template <class T, int kIndex, bool kGate>
void backward_config(const fa::AttnParams& p, bool atomic_dq, cudaStream_t stream) {
  constexpr lesson11::Config c = lesson11::kConfigs[kIndex];
  constexpr int D = c.head_dim;
  static_assert(lesson11::well_formed(c), "a configuration of lesson 11's tiles.hpp is not well formed");
  constexpr int R = lesson12::kStatRows;
  const bool varlen = p.is_varlen();
  // Rows of statistics per head (varlen: every sequence's tiles stacked) or per (batch, head).
  const int64_t stat_stride = varlen ? (int64_t(p.total_q) / R + p.batch) * R : int64_t(fa::ceil_div(p.seqlen_q, R)) * R;
  const int64_t stats = stat_stride * p.heads_q * (varlen ? 1 : p.batch);
  const int64_t q_rows = varlen ? int64_t(p.heads_q) * p.total_q : int64_t(p.batch) * p.heads_q * p.seqlen_q;
  struct Pieces {
    Map qmap, kmap;
    float *lse2, *delta, *dq_accum, *dG;
    double* G;
  } x{};
  auto carve = [&](Carver& cv) {
    x.qmap = take_map(cv, p, R, true);
    x.kmap = take_map(cv, p, c.keys, false);
    x.lse2 = cv.take<float>(stats);
    x.delta = cv.take<float>(stats);
    x.dq_accum = atomic_dq ? cv.take<float>(q_rows * D) : nullptr;
    x.G = kGate ? cv.take<double>(gate_elements(p)) : nullptr;
    x.dG = kGate ? cv.take<float>(2 * gate_elements(p)) : nullptr;  // the column terms, then the row terms
  };
  Carver sizing{nullptr};
  carve(sizing);
  Carver cv{static_cast<char*>(fa::device_scratch(reinterpret_cast<size_t>(sizing.at)))};
  carve(cv);

  if constexpr (kGate) launch_scan<float, double, false>(p, p.gate, nullptr, x.G, stream);
  launch_plan(x.qmap, p, R, kDqKeys, true, stream);
  launch_plan(x.kmap, p, c.keys, R, false, stream);
  using Rows = PackedRows<kGate>;
  const typename Rows::Args rows{x.lse2, x.delta, x.qmap.order, x.qmap.count, x.qmap.tile_start, stat_stride, x.G,
                                 kGate ? x.dG + gate_elements(p) : nullptr};
  lesson11::preprocess_kernel<T, D, R, Rows><<<grid_of(x.qmap.entries * p.heads_q), R * (D / 8), 0, stream>>>(
      p, rows);
  FA_CHECK_LAUNCH();
  if constexpr (kGate) FA_CUDA_CHECK(cudaMemsetAsync(x.dG, 0, 2 * gate_elements(p) * sizeof(float), stream));
  using Keys = PackedKeys<c.keys, c.rows, kGate>;
  auto keys = [&](float* dq_accum, float* dG_rows) {
    return typename Keys::Args{x.lse2, x.delta, dq_accum, x.kmap.order, x.kmap.count, x.qmap.tile_start, stat_stride, x.G, x.dG, dG_rows};
  };
  constexpr int smem = lesson11::smem_bytes(c);
  const unsigned kv_blocks = grid_of(x.kmap.entries * p.heads_kv);
  if (atomic_dq) {
    FA_CUDA_CHECK(cudaMemsetAsync(x.dq_accum, 0, q_rows * D * sizeof(float), stream));
    auto kernel = lesson11::dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, true, Keys>;
    fa::allow_smem(kernel, smem);
    kernel<<<kv_blocks, lesson11::threads(c), smem, stream>>>(p, keys(x.dq_accum, kGate ? x.dG + gate_elements(p) : nullptr));
    FA_CHECK_LAUNCH();
    lesson11::convert_kernel<T, D><<<grid_of((q_rows * (D / 8) + 255) / 256), 256, 0, stream>>>(
        p, x.dq_accum, varlen ? p.total_q : p.seqlen_q, varlen ? 1 : p.batch);
    FA_CHECK_LAUNCH();
  } else {
    auto kernel = lesson11::dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, false, Keys>;
    fa::allow_smem(kernel, smem);
    kernel<<<kv_blocks, lesson11::threads(c), smem, stream>>>(p, keys(nullptr, nullptr));
    FA_CHECK_LAUNCH();
    constexpr int dq_smem = lesson11::dq_smem_bytes(D);
    static_assert(16 * kDqWarps == R, "the dQ pass's query tiles are the statistics' tiles (kStatRows rows)");
    auto dq = lesson11::dq_kernel<T, D, kDqKeys, kDqWarps, Rows>;
    fa::allow_smem(dq, dq_smem);
    dq<<<grid_of(x.qmap.entries * p.heads_q), kDqWarps * 32, dq_smem, stream>>>(p, rows);
    FA_CHECK_LAUNCH();
  }
  if constexpr (kGate) launch_scan<float, float, true>(p, x.dG, x.dG + gate_elements(p), p.dgate, stream);
}

constexpr int kBwd64 = lesson11::config_for(64), kBwd128 = lesson11::config_for(128);

template <class T, bool kGate>
void backward_dispatch(const fa::AttnParams& p, bool atomic_dq, cudaStream_t stream) {
  if (p.head_dim == 64) backward_config<T, kBwd64, kGate>(p, atomic_dq, stream);
  else if (p.head_dim == 128) backward_config<T, kBwd128, kGate>(p, atomic_dq, stream);
  else throw fa::InvalidArgument("lesson 12_gqa_varlen_gate: no backward configuration for head_dim " + std::to_string(p.head_dim));
}

void backward(const fa::AttnParams& p, cudaStream_t stream) {
  check_started();
  const bool atomic_dq = !p.deterministic && p.variant != kPass;
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.gate != nullptr) backward_dispatch<T, true>(p, atomic_dq, stream);
    else backward_dispatch<T, false>(p, atomic_dq, stream);
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_12_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_12_declared();

const fa::LessonInfo& fa_lesson_12() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_12_declared();
    l.forward = &forward;
    l.backward = &backward;
    l.variants = {{"default", "the forward's query tiles heaviest first; the backward's dQ by atomics"},
                  {"natural", "the forward's query tiles in packed order, (sequence, tile) ascending", fa::Variant::Pass::kForward},
                  {"pass", "the backward's dQ by a second pass, as the deterministic mode does", fa::Variant::Pass::kBackward}};
    return l;
  }();
  return info;
}
