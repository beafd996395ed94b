// Your copy of this lesson, generated from solutions/08_pipelining/kernel.cu by fa-skeleton.
// Lesson 08: feeding the tensor cores. Lesson 07's kernel computes with mma.sync but waits for
// every K/V tile it loads, and its ldmatrix reads collide in shared-memory banks. Here:
//   1. cp.async copies K/V tiles global -> shared without passing through registers, and a ring
//      of `stages` buffers keeps the next tiles in flight while the current one is computed;
//   2. the tiles are stored swizzled (tiles.hpp): ldmatrix reads 8 rows in 8 different bank
//      groups, no conflicts, with 16-byte accesses everywhere;
//   3. each warp owns 32 query rows (two m16 tiles) instead of 16, so every K and V fragment read
//      from shared memory feeds two mma instead of one; Q stays in shared memory (registers are
//      needed for the two accumulators) and is re-read with ldmatrix;
//   4. the tile shape per head dim was chosen by measurement (README, "Choosing the tiles").
// Build, test, profile:
//   cmake --build --preset student --target check-lesson08
//   lessons/08_pipelining/profile.sh
#include <string>

#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "tiles.hpp"

namespace {

using lesson08::Config;
using lesson08::kConfigs;
using lesson08::tile_offset;
constexpr float kLn2 = 0.6931471805599453f;

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 08 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(2) in kernel.cu: the copy: thread x copies chunk c = x % kChunks of rows r = x / kChunks + i kStepRows",
    "TODO(3) in kernel.cu: the prologue: start the Q tile, commit it as a group, then the K and V tiles 0 ..",
    "TODO(4) in kernel.cu: the ring: wait for tile j (at most kStages - 2 groups pending), __syncthreads (tile",
};

// Starts the copy of rows [row0, row0 + kTileRows) of a (rows x D) matrix into a swizzled shared
// tile: 16 bytes per thread per step. Rows at or past `nrows` are zero-filled (a P of 0 times a
// garbage V could still be NaN).
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kChunks = D / 8;                // 16-byte chunks per row
  constexpr int kStepRows = kThreads / kChunks;  // rows the block copies per step (a multiple of 8)
  static_assert(kStepRows % 8 == 0 && kTileRows % kStepRows == 0, "whole steps of whole swizzle groups");
  // TODO(2): the copy: thread x copies chunk c = x % kChunks of rows r = x / kChunks + i kStepRows
  //   (i = 0 .. kTileRows / kStepRows - 1): source base + (row0 + r) * row_stride + 8 c (any
  //   valid address when row0 + r >= nrows), target tile + tile_offset(r, 8 c, D), with
  //   fa::cp_async_16(fa::smem_addr(target), source, row0 + r < nrows).
}

// The kernel of one configuration. Warp w owns query rows w * kWarpRows .. + kWarpRows - 1 of the
// block, as kMT m16 tiles; each thread holds, per m16 tile, two rows (lane / 4 and lane / 4 + 8).
template <class T, int D, int kRows, int kKeys, int kSub, int kWarps, int kStages, int kBlocksPerSM>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSM) pipelined_kernel(const fa::AttnParams p) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpRows = kRows / kWarps;
  constexpr int kMT = kWarpRows / 16;  // m16 tiles per warp
  constexpr int kNT = kSub / 8;        // n8 tiles of S per m16 tile
  constexpr int kDT = D / 8;           // n8 tiles of O per m16 tile
  extern __shared__ uint4 smem[];      // uint4: 16-byte aligned
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * D;
  T* sV = sK + kStages * kKeys * D;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest tiles first
  const int q0 = tile * kRows;
  const int offset = p.seqlen_k - p.seqlen_q;  // query i sees keys j <= i + offset
  const T* qbase = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head;
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;

  // Lesson 06's loop bounds, in tiles of kKeys: n_tiles to visit, the first n_full without a mask.
  int k_end = p.seqlen_k;
  int n_full = p.seqlen_k / kKeys;
  if (p.causal) {
    k_end = min(p.seqlen_k, min(q0 + kRows, p.seqlen_q) + offset);
    n_full = max(0, min(n_full, (q0 + offset + 1) / kKeys));
  }
  const int n_tiles = k_end > 0 ? fa::ceil_div(k_end, kKeys) : 0;
  if (threadIdx.x == 0) fa::tile_count_begin(p, fa::block_work(), q0, kRows, kKeys);

  // TODO(3): the prologue: start the Q tile, commit it as a group, then the K and V tiles 0 ..
  //   kStages - 2 into ring slots 0 .. kStages - 2, one commit per tile (commit even when the tile
  //   does not exist, so that "wait until kStages - 2 groups are pending" always means "tile j is in").

  float o[kMT][kDT][4] = {};
  float m[kMT][2], l[kMT][2];  // running max (raw score units) and this thread's part of the sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    for (int hh = 0; hh < 2; ++hh) m[mt][hh] = fa::kNegInf, l[mt][hh] = 0.f;
  const float sl2 = p.scale * fa::kLog2e;
  const int g = lane / 4, t = lane % 4;  // the accumulator's row and column pair (lesson 07)
  // ldmatrix addresses, in bytes: lane l's row of the first step, then for step k along the
  // columns and i m16 tiles down, tile_offset(r + 16 i, c + 16 k) = tile_offset(r, c) ^ 16 k + 16 i D
  // (tiles.hpp): one XOR and one add per ldmatrix, no per-step address registers.
  const uint32_t q_addr = fa::smem_addr(sQ), k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t q_off = 2 * tile_offset(warp * kWarpRows + lane % 16, 8 * (lane / 16), D);     // A: Q
  const uint32_t k_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);  // B: K
  const uint32_t v_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);  // B: V, .trans

  for (int j = 0; j < n_tiles; ++j) {
    if (threadIdx.x == 0) fa::tile_count_visit(p, fa::block_work());
    // TODO(4): the ring: wait for tile j (at most kStages - 2 groups pending), __syncthreads (tile
    //   j visible to every warp, and every warp done with tile j - 1), then start tile
    //   j + kStages - 1 into slot (j + kStages - 1) % kStages (the slot of tile j - 1) and commit.

    // The tile is computed kSub keys at a time: a whole softmax step each (S of 64 keys for two
    // m16 tiles is 64 more registers beside O's 128; 32 keys leave room). Not unrolled: one
    // sub-tile's registers at a time.
#pragma unroll 1
    for (int sub = 0; sub < kKeys / kSub; ++sub) {
    // S = Q K^T for the warp's kMT x kNT accumulator tiles (lesson 07, with swizzled addresses).
    const uint32_t kj = k_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
    float s[kMT][kNT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) fa::ldmatrix_x4(qa[mt], q_addr + ((q_off ^ (32 * kk)) + mt * 32 * D));
#pragma unroll
      for (int nj = 0; nj < kSub / 16; ++nj) {
        uint32_t kb[4];
        fa::ldmatrix_x4(kb, kj + ((k_off ^ (32 * kk)) + nj * 32 * D));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          fa::mma_m16n8k16<T>(s[mt][2 * nj], qa[mt], kb[0], kb[1]);
          fa::mma_m16n8k16<T>(s[mt][2 * nj + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    if (j >= n_full) {  // a diagonal or tail tile: -inf where the key is past the end or the mask
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = q0 + warp * kWarpRows + mt * 16 + g + 8 * (e / 2);
            const int col = j * kKeys + sub * kSub + nt * 8 + 2 * t + e % 2;
            if (col >= p.seqlen_k || (p.causal && col > row + offset)) s[mt][nt][e] = fa::kNegInf;
          }
    }

    // The online softmax on fragments: a row's values are spread over the 4 lanes of a quad.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = m[mt][hh];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
        mx = fa::group_max<4>(mx);
        // A row with nothing visible yet keeps m = -inf; subtract 0 then, never -inf - -inf.
        const float m_scaled = mx == fa::kNegInf ? 0.f : mx * sl2;
        const float alpha = fa::ex2(m[mt][hh] * sl2 - m_scaled);
        m[mt][hh] = mx;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 2 * hh; e < 2 * hh + 2; ++e) s[mt][nt][e] = fa::ex2(fmaf(s[mt][nt][e], sl2, -m_scaled));
        l[mt][hh] *= alpha;  // the new P's row sums are added below, as P is packed
        // Once the running max has settled, most tiles leave every row's max unchanged (alpha = 1
        // exactly): skip the 2 kDT multiplications unless some row of the warp needs them.
        if (__any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) o[mt][dt][2 * hh] *= alpha, o[mt][dt][2 * hh + 1] *= alpha;
        }
      }

    // O += P V: the S accumulators of keys 16 kc .. 16 kc + 15 are P's A fragment (lesson 07),
    // rounded to T and packed two values a register. The row sums are taken here too, where each
    // value of P is used for the last time (summed in the softmax loop above, they kept S's
    // registers busy longer, and this kernel is at the 255-register limit).
    const uint32_t vj = v_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
#pragma unroll
    for (int kc = 0; kc < kSub / 16; ++kc) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        l[mt][0] += (s[mt][2 * kc][0] + s[mt][2 * kc][1]) + (s[mt][2 * kc + 1][0] + s[mt][2 * kc + 1][1]);
        l[mt][1] += (s[mt][2 * kc][2] + s[mt][2 * kc][3]) + (s[mt][2 * kc + 1][2] + s[mt][2 * kc + 1][3]);
        pa[mt][0] = fa::pack2<T>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
        pa[mt][1] = fa::pack2<T>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
        pa[mt][2] = fa::pack2<T>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
        pa[mt][3] = fa::pack2<T>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
      }
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t vb[4];
        fa::ldmatrix_x4_trans(vb, vj + ((v_off ^ (32 * dn)) + kc * 32 * D));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          fa::mma_m16n8k16<T>(o[mt][2 * dn], pa[mt], vb[0], vb[1]);
          fa::mma_m16n8k16<T>(o[mt][2 * dn + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    }  // sub
  }
  fa::cp_async_wait<0>();  // nothing may be in flight when the block exits

  // One division per row at the end; the quad's partial sums are added first.
  T* obase = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(l[mt][hh]);
      const int row = q0 + warp * kWarpRows + mt * 16 + g + 8 * hh;
      if (row >= p.seqlen_q) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = obase + row * p.o_stride.row;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t) =
            fa::pack2<T>(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
      if (t == 0)
        p.lse[static_cast<int64_t>(bh) * p.seqlen_q + row] = sum > 0.f ? (m[mt][hh] * sl2 + log2f(sum)) * kLn2 : INFINITY;
    }
}

template <class T, int kIndex>
void launch_config(const fa::AttnParams& p, cudaStream_t stream) {
  constexpr Config c = kConfigs[kIndex];
  static_assert(lesson08::well_formed(c), "a configuration in tiles.hpp is not well formed");
  constexpr int smem = lesson08::smem_bytes(c);
  auto kernel = pipelined_kernel<T, c.head_dim, c.rows, c.keys, c.sub, c.warps, c.stages, c.blocks>;
  static bool configured = false;  // the opt-in above 48 KB, once per kernel
  if (!configured) {
    fa::allow_smem(kernel, smem);
    configured = true;
  }
  const dim3 grid(fa::ceil_div(p.seqlen_q, c.rows), p.batch * p.heads_q);
  kernel<<<grid, c.warps * 32, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

template <class T, int... kIndex>
void launch_index(const fa::AttnParams& p, int index, cudaStream_t stream, std::integer_sequence<int, kIndex...>) {
  ((index == kIndex ? launch_config<T, kIndex>(p, stream) : void()), ...);
}

// Runs configuration `index` of kConfigs: a variant's (the runtime checked its head dim) or
// config_for's, checked here (a line added to kConfigs moves the indices config_for names).
void run_config(const fa::AttnParams& p, int index, cudaStream_t stream) {
  fa::throw_if_todos_left("08_pipelining", lesson08::kTilesTodosLeft);
  fa::throw_if_todos_left("08_pipelining", kTodosLeft);
  if (index < 0 || index >= lesson08::kNumConfigs || kConfigs[index].head_dim != p.head_dim)
    throw fa::InvalidArgument("lesson 08_pipelining: tiles.hpp has no configuration " + std::to_string(index) +
                              " for head_dim " + std::to_string(p.head_dim));
  FA_DISPATCH_DTYPE(p.dtype, T,
                    launch_index<T>(p, index, stream, std::make_integer_sequence<int, lesson08::kNumConfigs>{}));
}

// Variant 0 runs the configuration config_for picks for this GPU and head dim; variant i + 1 runs
// kConfigs[i] (the lesson's tests run every one; tune.sh times them).
void forward(const fa::AttnParams& p, cudaStream_t stream) {
  run_config(p, p.variant > 0 ? p.variant - 1 : lesson08::config_for(fa::current_device().sm, p.head_dim), stream);
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_08_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_08_declared();

const fa::LessonInfo& fa_lesson_08() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_08_declared();
    l.forward = &forward;
    l.variants = {{"auto", "the configuration tiles.hpp's config_for picks for this GPU and head dim"}};
    for (int i = 0; i < lesson08::kNumConfigs; ++i) l.variants.push_back(lesson08::config_variant(i));
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
