// Lesson 12: grouped-query heads (GQA), packed variable-length batches (varlen) and the log-decay
// gate on lesson 08's forward and lesson 11's backward kernels (README, "The idea"). The TODOs:
// plan.hpp 1-3 (the index math), model.cpp 4-10 (the CPU model), sequences.cuh 11-14, forward.cuh
// 15-16, backward.cuh 17-21. Here: the scratch, the launches and the entry points.
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

// A tile map is planned on the device. The maps, G, the backward's statistics, dG and the fp32 dQ
// sums are pieces of the process's device scratch (fa::carve_scratch; README, Caveats).
void plan(const fa::TileMap& m, const fa::AttnParams& p, int tile, int other_tile, bool query_tiles, bool heaviest_first, cudaStream_t s) {
  plan_kernel<<<1, fa::kPlanThreads, 0, s>>>(p, tile, other_tile, query_tiles, heaviest_first, m);
  FA_CHECK_LAUNCH();
}
int64_t gate_elements(const fa::AttnParams& p) { return p.heads_q * p.tokens_k(); }
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
  fa::throw_if_todos_left("12_gqa_varlen_gate", {&lesson12::kPlanTodosLeft, &kSequencesTodosLeft, &kForwardTodosLeft, &kBackwardTodosLeft});
}

// The forward with lesson 08's configuration kIndex: G (with the gate), the map, then the
// attention kernel, one block per (map entry, query head), its tiles heaviest first or in packed order.
template <class T, int kIndex, bool kGate>
void forward_config(const fa::AttnParams& p, bool heaviest_first, cudaStream_t stream) {
  constexpr lesson08::Config c = lesson08::kConfigs[kIndex];
  double* G = nullptr;
  fa::TileMap map;
  fa::carve_scratch([&](fa::Carver& cv) {
    G = kGate ? cv.take<double>(gate_elements(p)) : nullptr;
    map = fa::take_tile_map(cv, p.batch, p.tokens_q(), c.rows);
  });
  const unsigned blocks = grid_of(map.entries * p.heads_q);  // checked before anything is launched
  if constexpr (kGate) scan<false, float, double>(p, p.gate, nullptr, G, stream);
  plan(map, p, c.rows, c.keys, /*query_tiles=*/true, heaviest_first, stream);
  const typename PackedTiles<kGate>::Args args{map.order, map.count, G};
  lesson08::launch<T, kIndex, lesson08::PlainLoads, PackedTiles<kGate>>(p, blocks, args, stream);
}

// The configurations lesson 08 chooses (sm_90 and sm_8x), the only ones compiled here. With the
// gate, the sm_90 ones' S tile does not fit beside the gate's registers (ptxas spills): the gated
// kernel takes plan.hpp's, with half as many keys a step.
constexpr int kFwd64 = lesson08::config_for(90, 64), kFwd128 = lesson08::config_for(90, 128);
using FwdCompiled = std::integer_sequence<int, kFwd64, kFwd128, lesson08::config_for(86, 64), lesson08::config_for(86, 128)>;
constexpr int gated(int i) { return i == kFwd64 ? lesson12::kFwdGate64 : i == kFwd128 ? lesson12::kFwdGate128 : i; }
constexpr bool halved(lesson08::Config g, lesson08::Config c) { return g.head_dim == c.head_dim && g.sub * 2 == c.sub; }
static_assert(halved(lesson08::kConfigs[gated(kFwd64)], lesson08::kConfigs[kFwd64]) &&
                  halved(lesson08::kConfigs[gated(kFwd128)], lesson08::kConfigs[kFwd128]),
              "the gated configurations are the sm_90 ones with half the keys a step");

// The variants, in the order of fa_lesson_12's list below ("natural": README, question 4).
enum Variant { kDefault, kNatural, kPass };

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  check_started();
  const int index = lesson08::config_for(fa::current_device().sm, p.head_dim);
  const bool heaviest_first = p.variant != kNatural;
  bool ran = false;
  FA_DISPATCH_DTYPE(p.dtype, T, ran = fa::dispatch_index(index, FwdCompiled{}, [&](auto i) {
    if (p.gate != nullptr) forward_config<T, gated(i), true>(p, heaviest_first, stream);
    else forward_config<T, i, false>(p, heaviest_first, stream);
  }));
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
    qmap = fa::take_tile_map(cv, p.batch, p.tokens_q(), R);
    kmap = fa::take_tile_map(cv, p.batch, p.tokens_k(), c.keys);
    lse2 = cv.take<float>(stats);
    delta = cv.take<float>(stats);
    dq_accum = atomic_dq ? cv.take<float>(p.tokens_q() * p.heads_q * c.head_dim) : nullptr;
    G = kGate ? cv.take<double>(ge) : nullptr;
    dG = kGate ? cv.take<float>(2 * ge) : nullptr;  // the column terms, then the row terms
  });
  const unsigned q_blocks = grid_of(qmap.entries * p.heads_q), k_blocks = grid_of(kmap.entries * p.heads_kv);  // before any launch
  if constexpr (kGate) {
    scan<false, float, double>(p, p.gate, nullptr, G, stream);
    FA_CUDA_CHECK(cudaMemsetAsync(dG, 0, 2 * ge * sizeof(float), stream));
  }
  plan(qmap, p, R, lesson11::kDqKeys, /*query_tiles=*/true, /*heaviest_first=*/true, stream);
  plan(kmap, p, c.keys, R, /*query_tiles=*/false, /*heaviest_first=*/true, stream);
  using Keys = PackedKeys<c.keys, c.rows, kGate>;
  auto keys = [&](float* dq) {
    return typename Keys::Args{{lse2, delta, dq, stat_stride, per_head}, kmap.order, kmap.count, qmap.tile_start, G, dG,
                               kGate && dq != nullptr ? dG + ge : nullptr};
  };
  lesson11::launch_backward<T, kIndex, R, Keys, PackedRows<kGate>>(
      p, {q_blocks, k_blocks, q_blocks},
      {{lse2, delta, stat_stride}, qmap.order, qmap.count, qmap.tile_start, G, kGate ? dG + ge : nullptr}, keys, atomic_dq,
      dq_accum, per_head, int(batches), stream);
  if constexpr (kGate) scan<true, float, float>(p, dG, dG + ge, p.dgate, stream);
}

void backward(const fa::AttnParams& p, cudaStream_t stream) {
  check_started();
  const bool atomic_dq = !p.deterministic && p.variant != kPass;
  bool ran = false;
  using BwdCompiled = std::integer_sequence<int, lesson11::config_for(64), lesson11::config_for(128)>;
  FA_DISPATCH_DTYPE(p.dtype, T, ran = fa::dispatch_index(lesson11::config_for(p.head_dim), BwdCompiled{}, [&](auto i) {
    if (p.gate != nullptr) backward_config<T, i, true>(p, atomic_dq, stream);
    else backward_config<T, i, false>(p, atomic_dq, stream);
  }));
  if (!ran) throw fa::InvalidArgument("lesson 12_gqa_varlen_gate: no backward configuration for head_dim " + std::to_string(p.head_dim));
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
