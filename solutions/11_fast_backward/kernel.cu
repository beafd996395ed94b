// Lesson 11: the backward pass on the tensor cores. Lesson 10 computes the gradients clearly on
// the CUDA cores; here the same algorithm runs on mma.sync with lesson 08's machinery:
//   1. preprocess_kernel (dkdv.cuh): D_i = rowsum(dO_i * O_i) and the LSE in base 2, per query row;
//   2. dkdv_kernel: one block per key tile; K and V stay in shared memory, the query tiles (Q, dO,
//      LSE, D) stream past through a two-buffer cp.async ring. Each warp owns 16 keys: it
//      recomputes S^T = K Q^T and dP^T = V dO^T, turns them into P^T and dS^T in registers, and
//      accumulates dV += P^T dO and dK += dS^T Q in registers, without a trip through memory;
//   3. dQ = dS K needs a sum over every key tile, which no single block owns. Two strategies:
//      atomic (default): each block adds its share of dQ to an fp32 buffer with atomics (dS^T goes
//        through shared memory to change hands between warps), then convert_kernel scales and rounds;
//      pass (p.deterministic): dq_kernel, one block per query tile, recomputes S and dP and sums
//        dS K over the key tiles in a fixed order: no atomics, bitwise reproducible, ~1.4x the math.
// The kernels are in dkdv.cuh, written once for any source of tiles, which lesson 12 runs too over
// its packed sequences. Here: this lesson's sources (DenseKeys, the key tiles of the dK/dV kernel;
// DenseRows, the query tiles of the preprocess and the dQ pass), the launches and the variants.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson11
//   lessons/11_fast_backward/profile.sh
#include <string>

#include "../08_pipelining/tiles.hpp"
#include "dkdv.cuh"
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "tiles.hpp"

namespace {

using lesson11::Config;
using lesson11::kConfigs;
// The key tiles of the dK/dV kernel (dkdv.cuh's dkdv_kernel): block (x, y) takes key tile x of
// (batch, kv head) y, and with grouped-query heads visits the query tiles of every head of its
// group. Thread 0 computes its KeyTile once from the block index and the parameters: derived at
// every use, the bounds and where the rows start add integer arithmetic to every step of the loop.
template <int kKeysT, int kRowsT>
struct DenseKeys {
  static constexpr int kKeys = kKeysT, kRows = kRowsT;
  static constexpr bool kGate = false;
  using Args = lesson11::KeyArgs;
  using Block = lesson11::KeyTile;
  struct Sums {};
  __device__ static bool begin(const fa::AttnParams& p, const Args& a, Block& blk) {
    const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv, group = p.heads_q / p.heads_kv;
    const int k0 = blockIdx.x * kKeys, offset = p.seqlen_k - p.seqlen_q;
    // The query tiles the key tile visits, for each head of the group: from the first that sees
    // any of its keys (causal) to the last.
    const int first = lesson11::first_query_tile(k0, offset, kRows, p.causal);
    const int per_head = max(0, fa::ceil_div(p.seqlen_q, kRows) - first);
    blk.iters = make_int4(per_head * group, per_head, first, hk * group);
    blk.bounds = make_int4(p.seqlen_q, p.seqlen_k, offset, k0);
    blk.origin[0] = b * p.q_stride.batch;
    blk.origin[1] = b * p.do_stride.batch;
    blk.origin[2] = int64_t(b) * p.heads_q * a.stat_stride;
    blk.origin[3] = int64_t(b) * p.heads_q * a.accum_stride;
    blk.kv[0] = b * p.k_stride.batch + hk * p.k_stride.head;
    blk.kv[1] = b * p.v_stride.batch + hk * p.v_stride.head;
    blk.grads[0] = b * p.dk_stride.batch + hk * p.dk_stride.head;
    blk.grads[1] = b * p.dv_stride.batch + hk * p.dv_stride.head;
    return true;
  }
};

// The query tiles of the preprocess and of the deterministic dQ pass (dkdv.cuh's kernels): block
// (x, y) takes query tile x of (batch, head) y, causal the heaviest (last) first, and lesson 06's
// bounds of its key loop.
struct DenseRows {
  static constexpr bool kGate = false;
  using Args = lesson11::RowArgs;
  struct Gate {};  // no gate
  struct Keys {};
  __device__ static Keys keys(const Args&, const Gate&) { return {}; }
  __device__ static void begin(const fa::AttnParams& p, const Args& a, int rows, int keys, lesson11::QueryTile& t, Gate&) {
    const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
    const int hk = h / (p.heads_q / p.heads_kv);
    const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest tiles first
    const int q0 = tile * rows, offset = p.seqlen_k - p.seqlen_q;
    int k_end = p.seqlen_k, n_full = p.seqlen_k / keys;
    if (p.causal) {
      k_end = min(p.seqlen_k, min(q0 + rows, p.seqlen_q) + offset);
      n_full = max(0, min(n_full, (q0 + offset + 1) / keys));
    }
    t.k = b * p.k_stride.batch + hk * p.k_stride.head;
    t.v = b * p.v_stride.batch + hk * p.v_stride.head;
    t.q = b * p.q_stride.batch + h * p.q_stride.head;
    t.dout = b * p.do_stride.batch + h * p.do_stride.head;
    t.dq = b * p.dq_stride.batch + h * p.dq_stride.head;
    t.o = b * p.o_stride.batch + h * p.o_stride.head;
    t.lse = int64_t(bh) * p.seqlen_q;
    t.stats = int64_t(bh) * a.stat_stride;
    t.loop = make_int4(k_end > 0 ? fa::ceil_div(k_end, keys) : 0, n_full, p.seqlen_k, q0 + offset);
    t.tile = tile;
    t.len_q = p.seqlen_q;
  }
};

using lesson11::kDqWarps;  // the dQ pass's tiles (tiles.hpp): 16 x kDqWarps rows

// The scratch (the statistics, the fp32 dQ sums), the grids and the launches (dkdv.cuh).
template <class T, int kIndex>
void run(const fa::AttnParams& p, bool atomic_dq, cudaStream_t stream) {
  constexpr Config c = kConfigs[kIndex];
  using Keys = DenseKeys<c.keys, c.rows>;
  const int bh = p.batch * p.heads_q;
  const int padded = fa::ceil_div(p.seqlen_q, 128) * 128;  // a multiple of every kRows
  float *lse2 = nullptr, *delta = nullptr, *dq_accum = nullptr;
  fa::carve_scratch([&](fa::Carver& cv) {
    lse2 = cv.take<float>(size_t(bh) * padded);
    delta = cv.take<float>(size_t(bh) * padded);
    dq_accum = atomic_dq ? cv.take<float>(size_t(bh) * p.seqlen_q * c.head_dim) : nullptr;
  });
  constexpr int kPreRows = 64;  // a divisor of padded's 128
  const lesson11::Grids grids{dim3(padded / kPreRows, bh), dim3(fa::ceil_div(p.seqlen_k, c.keys), p.batch * p.heads_kv),
                              dim3(fa::ceil_div(p.seqlen_q, 16 * kDqWarps), bh)};
  auto keys = [&](float* dq) { return lesson11::KeyArgs{lse2, delta, dq, padded, p.seqlen_q}; };
  lesson11::launch_backward<T, kIndex, kPreRows, Keys, DenseRows>(p, grids, {lse2, delta, padded}, keys, atomic_dq, dq_accum,
                                                                  p.seqlen_q, p.batch, stream);
}

// Runs configuration `index` of kConfigs: a variant's (the runtime checked its head dim) or
// config_for's, checked here (a line added to kConfigs moves the indices config_for names).
void run_config(const fa::AttnParams& p, int index, bool atomic_dq, cudaStream_t stream) {
  lesson08::throw_if_copy_todos_left("11_fast_backward (it copies tiles with lesson 08's tiles.hpp and load_tile.cuh)");
  fa::throw_if_todos_left("11_fast_backward", lesson11::kTilesTodosLeft);
  fa::throw_if_todos_left("11_fast_backward", lesson11::kDkdvTodosLeft);
  if (index < 0 || index >= lesson11::kNumConfigs || kConfigs[index].head_dim != p.head_dim)
    throw fa::InvalidArgument("lesson 11_fast_backward: tiles.hpp has no configuration " + std::to_string(index) +
                              " for head_dim " + std::to_string(p.head_dim));
  FA_DISPATCH_DTYPE(p.dtype, T, fa::dispatch_index(index, std::make_integer_sequence<int, lesson11::kNumConfigs>{}, [&](auto i) {
    run<T, i>(p, atomic_dq, stream);
  }));
}

// The variants (fa_lesson_11 below): 0 "atomic" and 1 "pass" on config_for's configuration, then
// per configuration i of kConfigs "config<i>" (2 + 2 i) and "config<i>-pass" (3 + 2 i). The
// deterministic mode takes the second pass whatever the variant.
void backward(const fa::AttnParams& p, cudaStream_t stream) {
  const int index = p.variant < 2 ? lesson11::config_for(p.head_dim) : (p.variant - 2) / 2;
  const bool atomic_dq = !p.deterministic && p.variant % 2 == 0;
  run_config(p, index, atomic_dq, stream);
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_11_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_11_declared();

const fa::LessonInfo& fa_lesson_11() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_11_declared();
    l.backward = &backward;
    l.variants = {{"atomic", "dQ by fp32 atomics from the dK/dV kernel, on config_for's configuration"},
                  {"pass", "dQ by a second pass (dq_kernel), as the deterministic mode does, on config_for's configuration"}};
    for (int i = 0; i < lesson11::kNumConfigs; ++i) {
      const lesson11::Config& c = kConfigs[i];
      const std::string shape = "d" + std::to_string(c.head_dim) + ": " + std::to_string(c.keys) + " keys x " + std::to_string(c.rows) +
                                " query rows (" + std::to_string(c.sub) + " a step), " + std::to_string(c.warps) + " warps";
      l.variants.push_back({"config" + std::to_string(i), shape + ", dQ by atomics", fa::Variant::Pass::kBoth, c.head_dim});
      l.variants.push_back({"config" + std::to_string(i) + "-pass", shape + ", dQ by a second pass", fa::Variant::Pass::kBoth, c.head_dim});
    }
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
