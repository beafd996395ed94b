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
// The dK/dV kernel is here; the steps of one tile it calls (the products on fragments, the dQ
// atomics, the stores), the preprocess and the dQ pass are in dkdv.cuh, which lesson 12 runs too
// (the preprocess and the dQ pass over its own query tiles: DenseRows below are this lesson's).
// Build, test, profile:
//   cmake --build --preset student --target check-lesson11
//   lessons/11_fast_backward/profile.sh
#include <string>

#include "../08_pipelining/load_tile.cuh"
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
using lesson11::tile_offset;

// Each entry is a TODO of this file you have not written yet; the tests stop at the lowest one
// left, of this file or dkdv.cuh, with "lesson 11 not implemented yet: <it>". Delete an entry when
// you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// Tiles are copied with lesson 08's load_tile (08_pipelining/load_tile.cuh).
using lesson08::load_tile;

// dK and dV of one key tile (and, with kAtomicDq, its share of dQ). Block (x, y): key tile x of
// (batch, kv head) y; with grouped-query heads it visits the query tiles of every head of its group.
template <class T, int D, int kKeys, int kRows, int kSub, int kWarps, bool kAtomicDq>
__global__ void __launch_bounds__(kWarps * 32, 1)
    dkdv_kernel(const fa::AttnParams p, const float* lse2, const float* delta, int padded, float* dq_accum) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kKT = kKeys / (16 * kWarps);  // m16 tiles of keys per warp
  constexpr int kNT = kSub / 8;   // n8 tiles of the warp's S^T (16 kKT keys x kSub rows)
  constexpr int kDT = D / 8;      // n8 tiles of its dK and dV (16 keys x D)
  extern __shared__ uint4 smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kKeys * D;
  T* sQ = sV + kKeys * D;     // two buffers
  T* sdO = sQ + 2 * kRows * D;  // two buffers
  T* sdS = sdO + 2 * kRows * D;  // dS^T, kKeys x kRows (atomic dQ only)
  float* sL = reinterpret_cast<float*>(sdS + kKeys * kRows);  // two buffers of kRows LSE (base 2)
  float* sDelta = sL + 2 * kRows;                            // two buffers of kRows D

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int k0 = blockIdx.x * kKeys;
  const int offset = p.seqlen_k - p.seqlen_q;
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;

  // The query tiles this key tile visits, for each head of the group: from the first that sees
  // any of its keys (causal) to the last. Iteration `it` is query tile first + it % per_head of
  // head hk * group + it / per_head.
  const int n_qtiles = fa::ceil_div(p.seqlen_q, kRows);
  const int first = lesson11::first_query_tile(k0, offset, kRows, p.causal);
  const int per_head = max(0, n_qtiles - first);
  const int n_iter = per_head * group;
  if (threadIdx.x == 0) fa::tile_count_begin(p, fa::block_work(), k0, kKeys, kRows + fa::kKeysOwned);

  load_tile<kThreads, kKeys, D>(sK, kbase, p.k_stride.row, k0, p.seqlen_k);
  load_tile<kThreads, kKeys, D>(sV, vbase, p.v_stride.row, k0, p.seqlen_k);
  // Starts the loads of iteration `it` into buffer `buf`: Q and dO tiles, and the rows' LSE and D
  // (padded rows: whole 16-byte chunks, no guard).
  auto load_queries = [&](int it, int buf) {
    const int h = hk * group + it / per_head, q0 = (first + it % per_head) * kRows;
    const T* qbase = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head;
    const T* dobase = static_cast<const T*>(p.dout) + b * p.do_stride.batch + h * p.do_stride.head;
    load_tile<kThreads, kRows, D>(sQ + buf * kRows * D, qbase, p.q_stride.row, q0, p.seqlen_q);
    load_tile<kThreads, kRows, D>(sdO + buf * kRows * D, dobase, p.do_stride.row, q0, p.seqlen_q);
    const int64_t r0 = (int64_t(b) * p.heads_q + h) * padded + q0;
    const int x = threadIdx.x;
    if (x < kRows / 4) fa::cp_async_16(fa::smem_addr(sL + buf * kRows + 4 * x), lse2 + r0 + 4 * x, true);
    else if (x < kRows / 2)
      fa::cp_async_16(fa::smem_addr(sDelta + buf * kRows + 4 * (x - kRows / 4)), delta + r0 + 4 * (x - kRows / 4), true);
  };
  if (n_iter > 0) load_queries(0, 0);
  fa::cp_async_commit();

  float dk[kKT][kDT][4] = {}, dv[kKT][kDT][4] = {};
  const float sl2 = p.scale * fa::kLog2e;
  // ldmatrix byte offsets (dkdv.cuh): A from the warp's first 16 keys of K or V; B from Q or dO
  // for S^T = K Q^T and dP^T = V dO^T; .trans B from dO for dV, Q for dK, K for dQ.
  const uint32_t k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t a_off = 2 * tile_offset(16 * kKT * warp + lane % 16, 8 * (lane / 16), D);
  const uint32_t b_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t t_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);
  const lesson11::Offsets off{a_off, b_off, t_off};

  for (int it = 0; it < n_iter; ++it) {
    if (threadIdx.x == 0) fa::tile_count_visit(p, fa::block_work());
    const int buf = it & 1;
    const int h = hk * group + it / per_head, q0 = (first + it % per_head) * kRows;
    // TODO(4): the ring: wait for this iteration's tiles (cp_async_wait<0>), __syncthreads (the
    //   tiles visible to every warp, every warp done with the previous iteration's buffer and
    //   dS^T), then start iteration it + 1 into buffer buf ^ 1 (if there is one) and commit.
    // BEGIN SOLUTION
    fa::cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_iter) load_queries(it + 1, buf ^ 1);
    fa::cp_async_commit();
    // END SOLUTION
    const uint32_t q_addr = fa::smem_addr(sQ + buf * kRows * D), do_addr = fa::smem_addr(sdO + buf * kRows * D);
    const float* lse_s = sL + buf * kRows;
    const float* delta_s = sDelta + buf * kRows;

    const bool masked = lesson11::needs_mask(q0, k0, kKeys, p.seqlen_k, offset, p.causal);
    // The tile kSub rows at a time: one step's S^T and dP^T live at once. Not unrolled.
#pragma unroll 1
    for (int sub = 0; sub < kRows / kSub; ++sub) {
    const int r0 = sub * kSub;  // the step's first row within the tile
    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 kKT keys and the step's kSub rows.
    float s[kKT][kNT][4] = {}, dp[kKT][kNT][4] = {};
    lesson11::transposed_scores<T, D, kKT, kSub>(s, dp, k_addr, v_addr, q_addr, do_addr, off, r0);

    // TODO(5): P^T and dS^T in place: s[kt][nt][e] (key tile kt; key and row from lesson11::st_element) becomes
    //   P = exp2(s * scale * log2(e) - LSE2[row]) (fa::ex2, LSE2 from lse_s), set to 0 where the
    //   tile needs the mask (lesson11::needs_mask) and the key is past seqlen_k or masked; then
    //   dp[kt][nt][e] becomes dS = P * (dP - D[row]) (D from delta_s).
    // BEGIN SOLUTION
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse_s + r0 + nt * 8 + 2 * t);
      const float2 dd = *reinterpret_cast<const float2*>(delta_s + r0 + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pv = fa::ex2(fmaf(s[kt][nt][e], sl2, -(e % 2 ? l2.y : l2.x)));
        if (masked) {
          const lesson11::KeyRow at = lesson11::st_element(lane, nt, e);
          const int key = k0 + 16 * (kKT * warp + kt) + at.key, row = q0 + r0 + at.row;
          if (key >= p.seqlen_k || (p.causal && key > row + offset)) pv = 0.f;
        }
        s[kt][nt][e] = pv;
        dp[kt][nt][e] = pv * (dp[kt][nt][e] - (e % 2 ? dd.y : dd.x));
      }
    }
    // END SOLUTION

    // dV += P^T dO and dK += dS^T Q (dkdv.cuh), and with kAtomicDq dS^T to sdS.
    lesson11::accumulate_dkdv<T, D, kKT, kSub, kRows, kAtomicDq>(s, dp, dk, dv, sdS, q_addr, do_addr, off, r0, warp, lane);
    }  // sub

    if constexpr (kAtomicDq)  // dQ += dS K, added to the fp32 sums (dkdv.cuh)
      lesson11::atomic_dq<T, D, kKeys, kRows, kWarps>(sdS, k_addr, off, q0, warp, lane, dq_accum,
                                                       [&] { return (int64_t(b) * p.heads_q + h) * p.seqlen_q; },
                                                       [&] { return p.seqlen_q; });
  }
  fa::cp_async_wait<0>();

  T* dkb = static_cast<T*>(p.dk) + b * p.dk_stride.batch + hk * p.dk_stride.head;
  T* dvb = static_cast<T*>(p.dv) + b * p.dv_stride.batch + hk * p.dv_stride.head;
  lesson11::store_dkdv<T>(dk, dv, dkb, dvb, p.dk_stride.row, p.dv_stride.row, k0, p.seqlen_k, p.scale, warp, lane);
}

// The query tiles of the preprocess and of the deterministic dQ pass (dkdv.cuh's kernels): block
// (x, y) takes query tile x of (batch, head) y, causal the heaviest (last) first, and lesson 06's
// bounds of its key loop.
struct DenseRows {
  static constexpr bool kGate = false;
  struct Args {
    float *lse2, *delta;  // the statistics: the preprocess writes them, the dQ pass reads them
    int padded;  // statistics' rows per (batch, head)
  };
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
    t.stats = int64_t(bh) * a.padded;
    t.loop = make_int4(k_end > 0 ? fa::ceil_div(k_end, keys) : 0, n_full, p.seqlen_k, q0 + offset);
    t.tile = tile;
    t.len_q = p.seqlen_q;
  }
};

using lesson11::kDqKeys;  // the dQ pass's tiles (tiles.hpp): 64 rows x 64 keys, 4 warps
using lesson11::kDqWarps;

template <class T, int kIndex>
void run(const fa::AttnParams& p, bool atomic_dq, cudaStream_t stream) {
  constexpr Config c = kConfigs[kIndex];
  constexpr int D = c.head_dim;
  static_assert(lesson11::well_formed(c), "a configuration in tiles.hpp is not well formed");
  const int bh = p.batch * p.heads_q;
  const int padded = fa::ceil_div(p.seqlen_q, 128) * 128;  // a multiple of every kRows
  const size_t stats = size_t(bh) * padded;
  const size_t accum = atomic_dq ? size_t(bh) * p.seqlen_q * D : 0;
  float* lse2 = static_cast<float*>(fa::device_scratch((2 * stats + accum) * sizeof(float)));
  float* delta = lse2 + stats;
  float* dq_accum = delta + stats;

  constexpr int kPreRows = 64;  // a divisor of padded's 128
  lesson11::preprocess_kernel<T, D, kPreRows, DenseRows><<<dim3(padded / kPreRows, bh), kPreRows * (D / 8), 0, stream>>>(
      p, DenseRows::Args{lse2, delta, padded});
  FA_CHECK_LAUNCH();
  const dim3 grid(fa::ceil_div(p.seqlen_k, c.keys), p.batch * p.heads_kv);
  constexpr int smem = lesson11::smem_bytes(c);
  if (atomic_dq) {
    FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, accum * sizeof(float), stream));
    auto kernel = dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, true>;
    fa::allow_smem(kernel, smem);
    kernel<<<grid, lesson11::threads(c), smem, stream>>>(p, lse2, delta, padded, dq_accum);
    FA_CHECK_LAUNCH();
    const int64_t threads = int64_t(bh) * p.seqlen_q * (D / 8);
    lesson11::convert_kernel<T, D><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(p, dq_accum, p.seqlen_q,
                                                                                                     p.batch);
    FA_CHECK_LAUNCH();
  } else {
    auto kernel = dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, false>;
    fa::allow_smem(kernel, smem);
    kernel<<<grid, lesson11::threads(c), smem, stream>>>(p, lse2, delta, padded, nullptr);
    FA_CHECK_LAUNCH();
    constexpr int dq_smem = lesson11::dq_smem_bytes(D);
    auto dq = lesson11::dq_kernel<T, D, kDqKeys, kDqWarps, DenseRows>;
    fa::allow_smem(dq, dq_smem);
    dq<<<dim3(fa::ceil_div(p.seqlen_q, 16 * kDqWarps), bh), kDqWarps * 32, dq_smem, stream>>>(p, DenseRows::Args{lse2, delta, padded});
    FA_CHECK_LAUNCH();
  }
}

template <class T, int... kIndex>
void run_index(const fa::AttnParams& p, int index, bool atomic_dq, cudaStream_t stream, std::integer_sequence<int, kIndex...>) {
  ((index == kIndex ? run<T, kIndex>(p, atomic_dq, stream) : void()), ...);
}

// Runs configuration `index` of kConfigs: a variant's (the runtime checked its head dim) or
// config_for's, checked here (a line added to kConfigs moves the indices config_for names).
void run_config(const fa::AttnParams& p, int index, bool atomic_dq, cudaStream_t stream) {
  lesson08::throw_if_copy_todos_left("11_fast_backward (it copies tiles with lesson 08's tiles.hpp and load_tile.cuh)");
  fa::throw_if_todos_left("11_fast_backward", lesson11::kTilesTodosLeft);
  fa::throw_if_todos_left("11_fast_backward", {&kTodosLeft, &lesson11::kDkdvTodosLeft});
  if (index < 0 || index >= lesson11::kNumConfigs || kConfigs[index].head_dim != p.head_dim)
    throw fa::InvalidArgument("lesson 11_fast_backward: tiles.hpp has no configuration " + std::to_string(index) +
                              " for head_dim " + std::to_string(p.head_dim));
  FA_DISPATCH_DTYPE(p.dtype, T,
                    run_index<T>(p, index, atomic_dq, stream, std::make_integer_sequence<int, lesson11::kNumConfigs>{}));
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
