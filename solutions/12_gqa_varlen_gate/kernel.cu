// Lesson 12: grouped-query heads (GQA), packed variable-length batches (varlen) and the log-decay
// gate, forward and backward, run by lesson 08's forward and lesson 11's backward kernels (README,
// "The idea"). plan.hpp: the index math (TODOs 1-3); model.cpp: the CPU model (4-10);
// sequences.cuh: a sequence, the plan, the gate's scan, a block's work (11-14); forward.cuh (15-16);
// backward.cuh (17-21); this file: the scratch, the launches and the entry points.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson12
//   lessons/12_gqa_varlen_gate/profile.sh
#include <cstdint>
#include <string>
#include <utility>

#include "../08_pipelining/tiles.hpp"
#include "backward.cuh"
#include "fa/cuda_check.hpp"
#include "forward.cuh"

namespace {

// The scratch beside the outputs (the maps, G, the backward's statistics, dG, the fp32 dQ sums) is
// the process's device scratch, carved into pieces (fa::carve_scratch; README, Caveats).

// The map of the query (or key) tiles of `tile` rows: varlen, planned on the device (plan); dense,
// only its size, the kernels computing their (sequence, tile) entries from the block index.
fa::TileMap take_map(fa::Carver& c, const fa::AttnParams& p, int tile, bool query_tiles) {
  if (p.is_varlen()) return fa::take_tile_map(c, p.batch, query_tiles ? p.total_q : p.total_k, tile);
  fa::TileMap m;
  m.entries = int64_t(fa::ceil_div(query_tiles ? p.seqlen_q : p.seqlen_k, tile)) * p.batch;
  return m;
}
void plan(const fa::TileMap& m, const fa::AttnParams& p, int tile, int other_tile, bool query_tiles, cudaStream_t stream,
          bool heaviest_first = true) {
  if (!p.is_varlen()) return;
  const int *cu_q = p.cu_seqlens_q, *cu_k = p.cu_seqlens_k;
  plan_kernel<<<1, fa::kPlanThreads, 0, stream>>>(query_tiles ? cu_q : cu_k, query_tiles ? cu_k : cu_q, p.batch, tile,
                                                  other_tile, p.causal, query_tiles, heaviest_first, m);
  FA_CHECK_LAUNCH();
}
int64_t gate_elements(const fa::AttnParams& p) {
  return p.is_varlen() ? int64_t(p.heads_q) * p.total_k : int64_t(p.batch) * p.heads_q * p.seqlen_k;
}
template <bool kReverse, class In, class Out>  // one warp per (sequence, head)
void scan(const fa::AttnParams& p, const In* in, const In* in2, Out* out, cudaStream_t stream) {
  scan_kernel<kReverse><<<static_cast<unsigned>((int64_t(p.batch) * p.heads_q + 7) / 8), 256, 0, stream>>>(p, in, in2, out);
  FA_CHECK_LAUNCH();
}
unsigned grid_of(int64_t blocks) { return fa::grid_blocks(blocks, "lesson 12_gqa_varlen_gate"); }
void check_started() {
  lesson08::throw_if_copy_todos_left("12_gqa_varlen_gate (it copies tiles with lesson 08's tiles.hpp and load_tile.cuh)");
  fa::throw_if_todos_left("12_gqa_varlen_gate (its backward's tiles come from lesson 11's tiles.hpp)", lesson11::kTilesTodosLeft);
  fa::throw_if_todos_left("08_pipelining", lesson08::kAttentionTodosLeft);  // lesson 08's kernel, which its forward runs
  fa::throw_if_todos_left("11_fast_backward", lesson11::kDkdvTodosLeft);  // lesson 11's kernels, which it runs
  // This lesson's lists as one: the TODO named is the lowest left in any of its files.
  fa::throw_if_todos_left("12_gqa_varlen_gate", {&lesson12::kPlanTodosLeft, &kSequencesTodosLeft, &kForwardTodosLeft, &kBackwardTodosLeft});
}

// The forward with lesson 08's configuration kIndex: G (with the gate), the map (varlen), then the
// attention kernel, one block per (map entry, query head), its tiles heaviest first or in packed order.
template <class T, int kIndex, bool kGate>
void forward_config(const fa::AttnParams& p, bool heaviest_first, cudaStream_t stream) {
  constexpr lesson08::Config c = lesson08::kConfigs[kIndex];
  double* G = nullptr;
  fa::TileMap map;
  fa::carve_scratch([&](fa::Carver& cv) {
    G = kGate ? cv.take<double>(gate_elements(p)) : nullptr;
    map = take_map(cv, p, c.rows, true);
  });
  const unsigned blocks = grid_of(map.entries * p.heads_q);  // checked before anything is launched
  if constexpr (kGate) scan<false, float, double>(p, p.gate, nullptr, G, stream);
  plan(map, p, c.rows, c.keys, true, stream, heaviest_first);
  const typename PackedTiles<kGate>::Args args{map.order, map.count, G, heaviest_first};
  lesson08::launch<T, kIndex, lesson08::PlainLoads, PackedTiles<kGate>>(p, blocks, args, stream);
}

// The configurations lesson 08 chooses (sm_90 and sm_8x), the only ones compiled here. With the
// gate, the sm_90 ones' S tile does not fit beside the gate's registers (ptxas spills): the gated
// kernel takes plan.hpp's, with half as many keys a step.
constexpr int kFwd64 = lesson08::config_for(90, 64), kFwd128 = lesson08::config_for(90, 128);
using Compiled = std::integer_sequence<int, kFwd64, kFwd128, lesson08::config_for(86, 64), lesson08::config_for(86, 128)>;
constexpr int gated(int i) { return i == kFwd64 ? lesson12::kFwdGate64 : i == kFwd128 ? lesson12::kFwdGate128 : i; }
static_assert(lesson08::kConfigs[gated(kFwd64)].head_dim == 64 && lesson08::kConfigs[gated(kFwd128)].head_dim == 128 &&
                  lesson08::kConfigs[gated(kFwd64)].sub * 2 == lesson08::kConfigs[kFwd64].sub &&
                  lesson08::kConfigs[gated(kFwd128)].sub * 2 == lesson08::kConfigs[kFwd128].sub,
              "the gated configurations are the sm_90 ones with half the keys a step");

template <class T, bool kGate, int... kIndex>  // runs the configuration `index`; false if none is compiled
bool forward_index(const fa::AttnParams& p, int index, bool heaviest_first, cudaStream_t s, std::integer_sequence<int, kIndex...>) {
  return ((index == kIndex && (forward_config<T, kGate ? gated(kIndex) : kIndex, kGate>(p, heaviest_first, s), true)) || ...);
}

// The variants (fa_lesson_12 below): 0 the default, 1 "natural" (the forward's blocks take their
// query tiles in packed order, (sequence, tile) ascending, instead of heaviest first; README,
// question 4), 2 "pass" (the backward's dQ by the deterministic second pass, as lesson 11).
enum Variant { kDefault, kNatural, kPass };

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  check_started();
  const int index = lesson08::config_for(fa::current_device().sm, p.head_dim);
  const bool heaviest_first = p.variant != kNatural;
  bool ran = false;
  FA_DISPATCH_DTYPE(p.dtype, T, {
    ran = p.gate != nullptr ? forward_index<T, true>(p, index, heaviest_first, stream, Compiled{})
                            : forward_index<T, false>(p, index, heaviest_first, stream, Compiled{});
  });
  if (!ran) throw fa::InvalidArgument("lesson 12_gqa_varlen_gate: no forward configuration for head_dim " + std::to_string(p.head_dim));
}

// The backward with lesson 11's configuration kIndex: G and the maps, then lesson 11's launches
// (dkdv.cuh's launch_backward: the statistics, the dK/dV kernel, dQ), then dg from dG.
template <class T, int kIndex, bool kGate>
void backward_config(const fa::AttnParams& p, bool atomic_dq, cudaStream_t stream) {
  constexpr lesson11::Config c = lesson11::kConfigs[kIndex];
  constexpr int R = lesson12::kStatRows;
  static_assert(16 * lesson11::kDqWarps == R, "the dQ pass's query tiles are the statistics' tiles (kStatRows rows)");
  const bool varlen = p.is_varlen();
  // Rows of statistics per head (varlen: every sequence's tiles stacked) or per (batch, head).
  const int64_t stat_stride = varlen ? (int64_t(p.total_q) / R + p.batch) * R : int64_t(fa::ceil_div(p.seqlen_q, R)) * R;
  const int64_t stats = stat_stride * p.heads_q * (varlen ? 1 : p.batch);
  const int64_t per_head = varlen ? p.total_q : p.seqlen_q, batches = varlen ? 1 : p.batch, ge = gate_elements(p);
  fa::TileMap qmap, kmap;
  float *lse2 = nullptr, *delta = nullptr, *dq_accum = nullptr, *dG = nullptr;
  double* G = nullptr;
  fa::carve_scratch([&](fa::Carver& cv) {
    qmap = take_map(cv, p, R, true);
    kmap = take_map(cv, p, c.keys, false);
    lse2 = cv.take<float>(stats);
    delta = cv.take<float>(stats);
    dq_accum = atomic_dq ? cv.take<float>(per_head * batches * p.heads_q * c.head_dim) : nullptr;
    G = kGate ? cv.take<double>(ge) : nullptr;
    dG = kGate ? cv.take<float>(2 * ge) : nullptr;  // the column terms, then the row terms
  });
  const unsigned q_blocks = grid_of(qmap.entries * p.heads_q), k_blocks = grid_of(kmap.entries * p.heads_kv);  // before any launch
  if constexpr (kGate) {
    scan<false, float, double>(p, p.gate, nullptr, G, stream);
    FA_CUDA_CHECK(cudaMemsetAsync(dG, 0, 2 * ge * sizeof(float), stream));
  }
  plan(qmap, p, R, lesson11::kDqKeys, true, stream);
  plan(kmap, p, c.keys, R, false, stream);
  using Keys = PackedKeys<c.keys, c.rows, kGate>;
  auto keys = [&](float* dq) {
    return typename Keys::Args{lse2, delta, dq, kmap.order, kmap.count, qmap.tile_start, stat_stride, G, dG,
                               kGate && dq != nullptr ? dG + ge : nullptr};
  };
  lesson11::launch_backward<T, kIndex, R, Keys, PackedRows<kGate>>(
      p, {q_blocks, k_blocks, q_blocks},
      {lse2, delta, qmap.order, qmap.count, qmap.tile_start, stat_stride, G, kGate ? dG + ge : nullptr}, keys, atomic_dq,
      dq_accum, per_head, int(batches), stream);
  if constexpr (kGate) scan<true, float, float>(p, dG, dG + ge, p.dgate, stream);
}

template <class T, bool kGate>
void backward_dispatch(const fa::AttnParams& p, bool atomic_dq, cudaStream_t stream) {
  if (p.head_dim == 64) backward_config<T, lesson11::config_for(64), kGate>(p, atomic_dq, stream);
  else if (p.head_dim == 128) backward_config<T, lesson11::config_for(128), kGate>(p, atomic_dq, stream);
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
