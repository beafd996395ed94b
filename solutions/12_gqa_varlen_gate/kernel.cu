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
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "plan.hpp"

namespace {

using lesson11::tile_offset;  // lesson 08's swizzle (the same function in both tiles.hpp)
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kPlanThreads = lesson12::kBuckets;  // the plan scans its buckets one per thread

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 12 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// ---- Sequences ---------------------------------------------------------------------------------
// One sequence of the batch as the kernels see it: its lengths and where its rows start. Dense
// batches reach sequence b through the batch strides; varlen ones through the token index
// cu_seqlens[b] times the row stride (one packed "batch").
// (AttnParams::is_varlen() is host code: params.hpp is plain C++.)
__device__ __forceinline__ bool is_varlen(const fa::AttnParams& p) { return p.cu_seqlens_q != nullptr; }
struct Seq {
  bool varlen;
  int b, len_q, len_k;
  int q_tok, k_tok;  // token index of row 0 in the packed tensors (varlen)
};

__device__ __forceinline__ Seq sequence(const fa::AttnParams& p, int b) {
  if (!is_varlen(p)) return {false, b, p.seqlen_q, p.seqlen_k, 0, 0};
  // TODO(11): varlen: the lengths and first tokens of sequence b from cu_seqlens_q and cu_seqlens_k.
  // BEGIN SOLUTION
  const int q = p.cu_seqlens_q[b], k = p.cu_seqlens_k[b];
  return {true, b, p.cu_seqlens_q[b + 1] - q, p.cu_seqlens_k[b + 1] - k, q, k};
  // END SOLUTION
  // BEGIN SKELETON
  // return {true, b, 0, 0, 0, 0};
  // END SKELETON
}
// Element offset of (head h, row 0) of sequence s in a tensor of the q side (q, o, dout, dq) or
// the k side (k, v, dk, dv).
__device__ __forceinline__ int64_t q_offset(const fa::Strides& st, const Seq& s, int h) {
  return (s.varlen ? int64_t(s.q_tok) * st.row : int64_t(s.b) * st.batch) + int64_t(h) * st.head;
}
__device__ __forceinline__ int64_t k_offset(const fa::Strides& st, const Seq& s, int h) {
  return (s.varlen ? int64_t(s.k_tok) * st.row : int64_t(s.b) * st.batch) + int64_t(h) * st.head;
}
// Index of (head h, row 0) in the LSE: (heads_q, total_q) varlen, (batch, heads_q, seqlen_q) dense;
// and in the gate g, G, dG and dg: (heads_q, total_k) varlen, (batch, heads_q, seqlen_k) dense.
__device__ __forceinline__ int64_t lse_index(const fa::AttnParams& p, const Seq& s, int h) {
  return s.varlen ? int64_t(h) * p.total_q + s.q_tok : (int64_t(s.b) * p.heads_q + h) * p.seqlen_q;
}
__device__ __forceinline__ int64_t gate_index(const fa::AttnParams& p, const Seq& s, int h) {
  return s.varlen ? int64_t(h) * p.total_k + s.k_tok : (int64_t(s.b) * p.heads_q + h) * p.seqlen_k;
}

// A value of shared memory read where it is used: the compiler may not keep a volatile read in
// a register across the loop, so it costs a register only for an instant.
template <class X>
__device__ __forceinline__ X fresh(const X& x) { return *static_cast<const volatile X*>(&x); }
// The same for 16 bytes at once (one shared-memory load): four ints, or two int64 (16-byte aligned).
__device__ __forceinline__ int4 fresh(const int4& x) {
  int4 v;
  asm volatile("ld.volatile.shared.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(fa::smem_addr(&x)));
  return v;
}
__device__ __forceinline__ int2 fresh(const int2& x) {
  int2 v;
  asm volatile("ld.volatile.shared.v2.s32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(fa::smem_addr(&x)));
  return v;
}
__device__ __forceinline__ longlong2 fresh_pair(const int64_t* x) {
  long long a, b;
  asm volatile("ld.volatile.shared.v2.s64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "r"(fa::smem_addr(x)));
  return make_longlong2(a, b);
}

// ---- The tile map ------------------------------------------------------------------------------
// One block of kPlanThreads threads: every tile of every sequence (tiles of `tile` rows of the
// "tiled" side, queries or keys), as (sequence, tile) pairs in `order`, heaviest first:
//   1. tile_start[b] = the tiles of sequences 0 .. b - 1 (an exclusive prefix sum, in chunks of
//      kPlanThreads sequences), tile_start[batch] = *count = all tiles;
//   2. a histogram of the tiles' work buckets (lesson12::bucket_of: bucket 0 the heaviest);
//   3. its exclusive prefix sum: where each bucket's tiles start in `order`;
//   4. each tile takes the next place of its bucket (atomicAdd in shared memory).
// The order within a bucket varies from run to run; no result depends on it (each tile's block
// computes alone). With heaviest_first false (the variant natural, the forward only: README,
// question 4) the sorted map is then overwritten in packed order, (sequence, tile) ascending, so
// both orders cost the same plan.
__device__ int block_exclusive_scan(int x, int* buf, int* total) {
  const int tid = threadIdx.x;
  buf[tid] = x;
  __syncthreads();
  for (int off = 1; off < kPlanThreads; off *= 2) {  // Hillis-Steele: log2(1024) steps
    const int y = tid >= off ? buf[tid - off] : 0;
    __syncthreads();
    buf[tid] += y;
    __syncthreads();
  }
  const int inclusive = buf[tid];
  *total = buf[kPlanThreads - 1];
  __syncthreads();  // buf is reused by the next call
  return inclusive - x;
}

// Tile x of the packed order, (sequence, tile) ascending: its sequence b is the last one with
// tile_start[b] <= x (a binary search), and it is tile x - tile_start[b] of that sequence.
__device__ int2 tile_at(const int* tile_start, int batch, int x) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= x) lo = mid; else hi = mid - 1;
  }
  return make_int2(lo, x - tile_start[lo]);
}

__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(const int* cu_tiled, const int* cu_other, int batch, int tile, int other_tile, bool causal,
                bool query_tiles, bool heaviest_first, int* tile_start, int2* order, int* count) {
  __shared__ int buf[kPlanThreads];
  __shared__ int hist[lesson12::kBuckets];
  const int tid = threadIdx.x;
  auto lengths = [&](int b, int& len_q, int& len_k) {
    const int a = cu_tiled[b + 1] - cu_tiled[b], o = cu_other[b + 1] - cu_other[b];
    len_q = query_tiles ? a : o;
    len_k = query_tiles ? o : a;
  };
  // TODO(12): the map: steps 1 to 4 above (tile_at finds tile x's sequence). Work of a tile:
  //   lesson12::key_tiles_visited (query tiles) or lesson12::query_tiles_visited (key tiles), with
  //   other_tile the other side's tile.
  // BEGIN SOLUTION
  int carry = 0;  // step 1
  for (int b0 = 0; b0 < batch; b0 += kPlanThreads) {
    const int b = b0 + tid;
    const int n = b < batch ? lesson12::tiles_of(cu_tiled[b + 1] - cu_tiled[b], tile) : 0;
    int chunk = 0;
    const int before = block_exclusive_scan(n, buf, &chunk);
    if (b < batch) tile_start[b] = carry + before;
    carry += chunk;
  }
  const int total = carry;
  if (tid == 0) tile_start[batch] = *count = total;
  hist[tid] = 0;
  __syncthreads();  // tile_start (global) and hist visible to the whole block
  auto bucket = [&](int2 m) {  // m: (sequence, tile)
    int len_q, len_k;
    lengths(m.x, len_q, len_k);
    const int work = query_tiles ? lesson12::key_tiles_visited(m.y, tile, other_tile, len_q, len_k, causal)
                                 : lesson12::query_tiles_visited(m.y, tile, other_tile, len_q, len_k, causal);
    return lesson12::bucket_of(work);
  };
  for (int x = tid; x < total; x += kPlanThreads)  // step 2
    atomicAdd(&hist[bucket(tile_at(tile_start, batch, x))], 1);
  __syncthreads();
  int unused = 0;
  const int place = block_exclusive_scan(hist[tid], buf, &unused);  // step 3
  hist[tid] = place;
  __syncthreads();
  for (int x = tid; x < total; x += kPlanThreads) {  // step 4
    const int2 m = tile_at(tile_start, batch, x);
    order[atomicAdd(&hist[bucket(m)], 1)] = m;
  }
  // END SOLUTION
  if (!heaviest_first) {  // the variant natural: packed order instead
    __syncthreads();  // the sorted entries are written, and tile_start is visible to every thread
    for (int x = tid; x < tile_start[batch]; x += kPlanThreads) order[x] = tile_at(tile_start, batch, x);
  }
}

// ---- The gate's cumulative sums ----------------------------------------------------------------
// G = cumsum(g) (forward) or dg = the reverse cumsum of dG = in + in2 (backward: the column and
// the row terms), in fp64, per (sequence, head): one warp each, 32 positions per step (a shuffle
// scan), the running total carried over.
template <bool kReverse, class In, class Out>
__global__ void scan_kernel(const fa::AttnParams p, const In* in, const In* in2, Out* out) {
  const int w = static_cast<int>((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (w >= p.batch * p.heads_q) return;
  const Seq s = sequence(p, w / p.heads_q);
  const int64_t base = gate_index(p, s, w % p.heads_q);
  // TODO(13): the scan over the sequence's len_k positions (backwards when kReverse), in doubles.
  // BEGIN SOLUTION
  double carry = 0;
  for (int c0 = 0; c0 < s.len_k; c0 += 32) {
    const bool valid = c0 + lane < s.len_k;
    const int at = kReverse ? s.len_k - 1 - (c0 + lane) : c0 + lane;
    double x = valid ? double(in[base + at]) + (in2 != nullptr ? double(in2[base + at]) : 0.0) : 0.0;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const double y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (valid) out[base + at] = static_cast<Out>(carry + x);
    carry += __shfl_sync(0xffffffffu, x, 31);
  }
  // END SOLUTION
}

// float(G[at] - anchor) log2(e): the gate's contribution in the exp2 units of the kernels.
__device__ __forceinline__ float gate_diff(const double* g, int at, double anchor) {
  return static_cast<float>(g[at] - anchor) * fa::kLog2e;
}

// ---- Forward -----------------------------------------------------------------------------------
// The swizzled tiles assume that shared memory rows of 128 bytes start at 128-byte boundaries. The
// dynamic buffer comes after the kernel's static __shared__ variables (the block's bounds below),
// and by default it is only 16-byte aligned: forward_kernel's 96 bytes of them would put every row
// of a tile across two 128-byte lines, and each cp.async row would take two shared-memory
// wavefronts instead of one (README, "The 96 bytes", has what it costs). Each kernel below
// declares the buffer __align__(128): it then starts at the next 128-byte boundary, at an address
// the compiler still knows (rounding the pointer up at run time instead makes every tile address
// a register, which is slower). The check traps (an error at the next synchronisation, which
// every test makes) if a compiler ever places it otherwise.
__device__ __forceinline__ void check_tile_alignment(const void* tiles) {
  if (threadIdx.x == 0 && (fa::smem_addr(tiles) & 127u) != 0) __trap();
}

// Starts the copy of rows [row0, row0 + kTileRows) of a (rows x D) matrix into a swizzled shared
// tile, 16 bytes per thread per step (lesson 08). Rows at or past `nrows` are zero-filled.
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kChunks = D / 8;
  constexpr int kStepRows = kThreads / kChunks;
  static_assert(kStepRows % 8 == 0 && kTileRows % kStepRows == 0, "whole steps of whole swizzle groups");
  const int c = threadIdx.x % kChunks, r = threadIdx.x / kChunks;
  const uint32_t dst = fa::smem_addr(tile + tile_offset(r, 8 * c, D));
  const T* src = base + (row0 + r) * row_stride + 8 * c;
#pragma unroll
  for (int i = 0; i < kTileRows / kStepRows; ++i) {
    const bool valid = row0 + r + i * kStepRows < nrows;
    fa::cp_async_16(dst + i * kStepRows * D * 2, valid ? src : base, valid);
    src += kStepRows * row_stride;
  }
}

// Which (sequence, tile) entry `e` of a grid is: varlen, entry e of the map (false past its end);
// dense, sequence e / n_tiles, its tiles heaviest first (causal: the last query tiles, or the
// first key tiles, are the heaviest) when last_heaviest, else in ascending order.
__device__ __forceinline__ bool work_item(const fa::AttnParams& p, const int2* map, const int* count, int e,
                                          int n_tiles, bool last_heaviest, int& b, int& tile) {
  if (is_varlen(p)) {
    // TODO(14): varlen: entry e of the map, if e is below its count.
    // BEGIN SOLUTION
    if (e >= *count) return false;
    const int2 m = map[e];
    b = m.x;
    tile = m.y;
    return true;
    // END SOLUTION
    // BEGIN SKELETON
    // return false;
    // END SKELETON
  }
  const int rank = e % n_tiles;
  b = e / n_tiles;
  tile = p.causal && last_heaviest ? n_tiles - 1 - rank : rank;
  return true;
}

// A grid of (entries x heads) blocks, the entries varying fastest: the blocks running at once
// share a head, so its K and V stay in the L2 (heads varying fastest would stream every head's
// K and V at once), as lesson 08's grid does.
__device__ __forceinline__ int entry(int heads) { return blockIdx.x % (gridDim.x / heads); }
__device__ __forceinline__ int head(int heads) { return blockIdx.x / (gridDim.x / heads); }

// A forward-style block (one query tile against the key tiles it sees, lesson 06's bounds): its
// sequence, tile (-1: past the end of the map), the causal offset, the key tiles it visits and
// the first that needs the mask. heaviest_first false: a dense batch's tiles in ascending order
// (the variant natural); a varlen map carries its own order.
struct Block {
  Seq s;
  int tile, offset, n_full, n_tiles;
};
__device__ Block block_of(const fa::AttnParams& p, const int2* map, const int* count, int e, int rows, int keys,
                          bool heaviest_first = true) {
  Block k{};
  int b = 0;
  k.tile = -1;
  if (!work_item(p, map, count, e, fa::ceil_div(p.seqlen_q, rows), heaviest_first, b, k.tile)) {
    k.tile = -1;
    return k;
  }
  k.s = sequence(p, b);
  const int q0 = k.tile * rows;
  k.offset = k.s.len_k - k.s.len_q;
  int k_end = k.s.len_k;
  k.n_full = k.s.len_k / keys;
  if (p.causal) {
    k_end = min(k.s.len_k, min(q0 + rows, k.s.len_q) + k.offset);
    k.n_full = max(0, min(k.n_full, (q0 + k.offset + 1) / keys));
  }
  k.n_tiles = k_end > 0 ? fa::ceil_div(k_end, keys) : 0;
  return k;
}

// Lesson 08's kernel, one block per (query tile, query head), with a sequence's bounds in place of
// seqlen_q/seqlen_k and, with kGate, the gate's anchored differences added to the logits (which
// then live in base-2 units: the softmax runs with scale 1).
template <class T, int D, int kRows, int kKeys, int kSub, int kWarps, int kStages, int kBlocksPerSM, bool kGate>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSM)
    forward_kernel(const fa::AttnParams p, const int2* map, const int* map_count, const double* G, bool heaviest_first) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpRows = kRows / kWarps;
  constexpr int kMT = kWarpRows / 16;
  constexpr int kNT = kSub / 8;
  constexpr int kDT = D / 8;
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sQ = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sK = sQ + kRows * D;
  T* sV = sK + kStages * kKeys * D;

  // The block's sequence and loop bounds live in shared memory, read where they are used (fresh):
  // this kernel is at the 255-register limit, and lesson 08's bounds came from the kernel's
  // parameters, which cost no register. Kept in registers through the loop, these would push
  // the accumulators out to local memory (ptxas reports the spills).
  __shared__ Block blk;
  __shared__ alignas(16) int64_t at[4];  // where the block's K, V, O rows and LSE entries start (elements)
  __shared__ int4 loop;  // what the key loop reads: n_tiles, n_full, len_k, q0 + offset (one 16-byte load)
  if (threadIdx.x == 0) {
    blk = block_of(p, map, map_count, entry(p.heads_q), kRows, kKeys, heaviest_first);
    const int h = head(p.heads_q), hk = h / (p.heads_q / p.heads_kv);
    at[0] = k_offset(p.k_stride, blk.s, hk);
    at[1] = k_offset(p.v_stride, blk.s, hk);
    at[2] = q_offset(p.o_stride, blk.s, h);
    at[3] = lse_index(p, blk.s, h);
    loop = make_int4(blk.n_tiles, blk.n_full, blk.s.len_k, blk.tile * kRows + blk.offset);
  }
  __syncthreads();
  if (blk.tile < 0) return;  // past the end of the map
  const Seq& s = blk.s;
  auto len_k = [&] { return fresh(blk.s.len_k); };
  auto offset = [&] { return fresh(blk.offset); };
  auto q0 = [&] { return fresh(blk.tile) * kRows; };
  const int h = head(p.heads_q);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* qbase = static_cast<const T*>(p.q) + q_offset(p.q_stride, s, h);
  auto kbase = [&] { return static_cast<const T*>(p.k) + fresh(at[0]); };
  auto vbase = [&] { return static_cast<const T*>(p.v) + fresh(at[1]); };
  load_tile<kThreads, kRows, D>(sQ, qbase, p.q_stride.row, q0(), s.len_q);
  fa::cp_async_commit();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < blk.n_tiles) {
      load_tile<kThreads, kKeys, D>(sK + st * kKeys * D, kbase(), p.k_stride.row, st * kKeys, len_k());
      load_tile<kThreads, kKeys, D>(sV + st * kKeys * D, vbase(), p.v_stride.row, st * kKeys, len_k());
    }
    fa::cp_async_commit();
  }

  float o[kMT][kDT][4] = {};
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    for (int hh = 0; hh < 2; ++hh) m[mt][hh] = fa::kNegInf, l[mt][hh] = 0.f;
  const float sl2 = p.scale * fa::kLog2e;
  const float sc = kGate ? 1.f : sl2;  // the softmax's scale: with the gate, S is scaled as it is biased
  const int g = lane / 4, t = lane % 4;

  // The gate: G of this (sequence, head), the tile's anchor, and this thread's rows' differences.
  const double* gh = nullptr;
  double anchor = 0;
  float qg[kMT][2] = {};
  if constexpr (kGate) {
    gh = G + gate_index(p, s, h);
    // TODO(15): the anchor (G at lesson12::gate_anchor) and qg = gate_diff at each of this
    //   thread's rows' key position row + offset (0 for rows past len_q or before position 0).
    // BEGIN SOLUTION
    if (s.len_k > 0) {
      anchor = gh[lesson12::gate_anchor(q0(), s.len_q, s.len_k)];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int row = q0() + warp * kWarpRows + mt * 16 + g + 8 * hh;
          if (row < s.len_q && row + offset() >= 0) qg[mt][hh] = gate_diff(gh, row + offset(), anchor);
        }
    }
    // END SOLUTION
  }

  const uint32_t q_addr = fa::smem_addr(sQ), k_addr = q_addr + kRows * D * 2, v_addr = k_addr + kStages * kKeys * D * 2;
  const uint32_t q_off = 2 * tile_offset(warp * kWarpRows + lane % 16, 8 * (lane / 16), D);
  const uint32_t k_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t v_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);

  // The key loop reads its bounds once per key tile, as one 16-byte load, and again after S
  // (where Q's and K's fragments are dead): a few volatile loads a tile, not one per use.
  for (int j = 0;; ++j) {
    const int4 top = fresh(loop);
    if (j >= top.x) break;
    fa::cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int next = j + kStages - 1;
      if (next < top.x) {
        const int slot = next % kStages;
        const longlong2 kv = fresh_pair(at);
        load_tile<kThreads, kKeys, D>(sK + slot * kKeys * D, static_cast<const T*>(p.k) + kv.x, p.k_stride.row, next * kKeys, top.z);
        load_tile<kThreads, kKeys, D>(sV + slot * kKeys * D, static_cast<const T*>(p.v) + kv.y, p.v_stride.row, next * kKeys, top.z);
      }
      fa::cp_async_commit();
    }

#pragma unroll 1
    for (int sub = 0; sub < kKeys / kSub; ++sub) {
    const uint32_t kj = k_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
    float sacc[kMT][kNT][4] = {};
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
          fa::mma_m16n8k16<T>(sacc[mt][2 * nj], qa[mt], kb[0], kb[1]);
          fa::mma_m16n8k16<T>(sacc[mt][2 * nj + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    const int col0 = j * kKeys + sub * kSub + 2 * t;  // this thread's first column
    if constexpr (kGate) {
      // TODO(16): the logits in base 2 with the gate: sacc = sacc * scale * log2(e) + qg - kg,
      //   kg = gate_diff at the column (0 past len_k, where the mask below removes it anyway).
      // BEGIN SOLUTION
      const int lk = fresh(blk.s.len_k);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int c = col0 + nt * 8;
        const float kg0 = c < lk ? gate_diff(gh, c, anchor) : 0.f;
        const float kg1 = c + 1 < lk ? gate_diff(gh, c + 1, anchor) : 0.f;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[mt][nt][e] = fmaf(sacc[mt][nt][e], sl2, qg[mt][e / 2] - (e % 2 ? kg1 : kg0));
      }
      // END SOLUTION
    }
    if (j >= fresh(blk.n_full)) {
      // One read for the whole tile: causal, q0 + offset (key col is masked past row + offset);
      // otherwise len_k. A single register: the int4 whole does not fit beside 128 keys of S.
      const int lim = p.causal ? fresh(loop.w) : fresh(loop.z);
      // Causal: key col is masked past row + offset, which is below len_k for every row of the
      // sequence (rows past len_q are zeros, never stored), so the tail needs no test of its own
      // (and the one test fewer keeps this kernel within its registers).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = col0 + nt * 8 + e % 2;
            if (p.causal ? col > lim + warp * kWarpRows + mt * 16 + g + 8 * (e / 2) : col >= lim) sacc[mt][nt][e] = fa::kNegInf;
          }
    }

#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = m[mt][hh];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(sacc[mt][nt][2 * hh], sacc[mt][nt][2 * hh + 1]));
        mx = fa::group_max<4>(mx);
        const float m_scaled = mx == fa::kNegInf ? 0.f : mx * sc;
        const float alpha = fa::ex2(m[mt][hh] * sc - m_scaled);
        m[mt][hh] = mx;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 2 * hh; e < 2 * hh + 2; ++e) sacc[mt][nt][e] = fa::ex2(fmaf(sacc[mt][nt][e], sc, -m_scaled));
        l[mt][hh] *= alpha;
        if (__any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) o[mt][dt][2 * hh] *= alpha, o[mt][dt][2 * hh + 1] *= alpha;
        }
      }

    const uint32_t vj = v_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
#pragma unroll
    for (int kc = 0; kc < kSub / 16; ++kc) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        l[mt][0] += (sacc[mt][2 * kc][0] + sacc[mt][2 * kc][1]) + (sacc[mt][2 * kc + 1][0] + sacc[mt][2 * kc + 1][1]);
        l[mt][1] += (sacc[mt][2 * kc][2] + sacc[mt][2 * kc][3]) + (sacc[mt][2 * kc + 1][2] + sacc[mt][2 * kc + 1][3]);
        pa[mt][0] = fa::pack2<T>(sacc[mt][2 * kc][0], sacc[mt][2 * kc][1]);
        pa[mt][1] = fa::pack2<T>(sacc[mt][2 * kc][2], sacc[mt][2 * kc][3]);
        pa[mt][2] = fa::pack2<T>(sacc[mt][2 * kc + 1][0], sacc[mt][2 * kc + 1][1]);
        pa[mt][3] = fa::pack2<T>(sacc[mt][2 * kc + 1][2], sacc[mt][2 * kc + 1][3]);
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
  fa::cp_async_wait<0>();

  T* obase = static_cast<T*>(p.o) + fresh(at[2]);
  float* lse = p.lse + fresh(at[3]);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(l[mt][hh]);
      const int row = q0() + warp * kWarpRows + mt * 16 + g + 8 * hh;
      if (row >= s.len_q) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = obase + row * p.o_stride.row;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t) =
            fa::pack2<T>(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
      // With the gate the LSE holds G_i - A and -(G_j - A): the anchor cancels, it is the true one.
      if (t == 0) lse[row] = sum > 0.f ? (m[mt][hh] * sc + log2f(sum)) * kLn2 : INFINITY;
    }
}

// ---- Backward ----------------------------------------------------------------------------------
// The backward's per-row statistics, in rows padded per sequence to whole kStatRows tiles
// (lesson12::stat_row): D_i = dO_i . O_i, and LSE2_i = LSE_i log2(e) - (with the gate) qg_i, the
// row's anchored G difference folded in, so the inner loops only add the key's. One block per
// (query tile of kStatRows rows, head), D / 8 threads a row.
template <class T, int D, bool kGate>
__global__ void preprocess_kernel(const fa::AttnParams p, const int2* qmap, const int* qcount, const int* qtile_start,
                                  const double* G, float* lse2, float* delta, int64_t stat_stride) {
  constexpr int kLanes = D / 8;
  const int h = head(p.heads_q);
  int b = 0, tile = 0;
  if (!work_item(p, qmap, qcount, entry(p.heads_q), fa::ceil_div(p.seqlen_q, lesson12::kStatRows), false, b, tile))
    return;
  const Seq s = sequence(p, b);
  const int c = threadIdx.x % kLanes, q0 = tile * lesson12::kStatRows, i = q0 + threadIdx.x / kLanes;
  float sum = 0.f;
  if (i < s.len_q) {
    const T* o = static_cast<const T*>(p.o) + q_offset(p.o_stride, s, h) + i * p.o_stride.row + 8 * c;
    const T* d = static_cast<const T*>(p.dout) + q_offset(p.do_stride, s, h) + i * p.do_stride.row + 8 * c;
    const uint4 ov = *reinterpret_cast<const uint4*>(o), dv = *reinterpret_cast<const uint4*>(d);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 a = fa::unpack2<T>(ow[w]), e = fa::unpack2<T>(dw[w]);
      sum = fmaf(a.x, e.x, fmaf(a.y, e.y, sum));
    }
  }
  sum = fa::group_sum<kLanes>(sum);
  if (c == 0) {
    const int64_t row = lesson12::stat_row(s.varlen, b, h, i, p.heads_q, stat_stride, s.varlen ? qtile_start[b] : 0);
    float l2 = i < s.len_q ? p.lse[lse_index(p, s, h) + i] * fa::kLog2e : INFINITY;
    if constexpr (kGate) {
      // TODO(17): subtract the row's gate_diff (the anchor of its query tile, as in the forward),
      //   for rows i < len_q with a key position i + len_k - len_q >= 0.
      // BEGIN SOLUTION
      const int pos = i + s.len_k - s.len_q;
      if (i < s.len_q && pos >= 0) {
        const double* gh = G + gate_index(p, s, h);
        l2 -= gate_diff(gh, pos, gh[lesson12::gate_anchor(q0, s.len_q, s.len_k)]);
      }
      // END SOLUTION
    }
    delta[row] = i < s.len_q ? sum : 0.f;
    lse2[row] = l2;
  }
}

// Lesson 11's dK/dV kernel, one block per (key tile, kv head) of a sequence. With kGate the
// logits get the keys' anchored G differences (the rows' are in LSE2), and each key's column sum
// of dS (over the rows of one query head) is kept in registers and stored, negated, as dG.
template <class T, int D, int kKeys, int kRows, int kSub, int kWarps, bool kAtomicDq, bool kGate>
__global__ void __launch_bounds__(kWarps * 32, 1)
    dkdv_kernel(const fa::AttnParams p, const int2* kmap, const int* kcount, const int* qtile_start, const double* G,
                const float* lse2, const float* delta, int64_t stat_stride, float* dq_accum, float* dG, float* dG_rows) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kKT = kKeys / (16 * kWarps);
  constexpr int kNT = kSub / 8;
  constexpr int kDT = D / 8;
  static_assert(kRows == lesson12::kStatRows, "the statistics and the gate's anchors are per tile of kStatRows rows");
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sK = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sV = sK + kKeys * D;
  T* sQ = sV + kKeys * D;
  T* sdO = sQ + 2 * kRows * D;
  T* sdS = sdO + 2 * kRows * D;
  float* sL = reinterpret_cast<float*>(sdS + kKeys * kRows);
  float* sDelta = sL + 2 * kRows;

  // The block's sequence and bounds in shared memory, as in the forward: dK and dV hold 128
  // registers a thread, and the kernel is at the 255-register limit. The loop reads them as
  // 16-byte loads (fresh) at the top of an iteration, and again where S^T's fragments are dead:
  // a few volatile loads an iteration, not one per use.
  struct KeyBlock {
    Seq s;
    int k0, hk;  // the first key (-1: past the end of the map) and the K/V head
  };
  __shared__ KeyBlock kb;
  __shared__ int4 iters;   // n_iter, per_head, first, hk * group
  __shared__ int4 bounds;  // len_q, len_k, offset, k0
  // Where head 0's rows start in Q and dO, its statistics (stat_row), its fp32 dQ sums (lse_index)
  // and its gate (gate_index); head h's are h times the head's stride further.
  __shared__ alignas(16) int64_t origin[5];
  // Per buffer, its query tile: head h, first row q0, whether it needs the mask, and the mask's
  // bound (below). Thread 0 writes it as the loads start, and it travels with the tiles: the loop
  // reads it back where it needs it, with no register held and no division (it / per_head).
  __shared__ int4 tile_of[2];  // h, q0, masked, bound
  auto head_row = [&](int buf) { return fresh(reinterpret_cast<const int2&>(tile_of[buf])); };  // h, q0
  if (threadIdx.x == 0) {
    int b = 0, ktile = -1;
    kb.k0 = -1;
    if (work_item(p, kmap, kcount, entry(p.heads_kv), fa::ceil_div(p.seqlen_k, kKeys), false, b, ktile)) {
      const Seq sq = sequence(p, b);
      const int k0 = ktile * kKeys, offset = sq.len_k - sq.len_q, hk = head(p.heads_kv), group = p.heads_q / p.heads_kv;
      kb.s = sq;
      kb.k0 = k0;
      kb.hk = hk;
      // The query tiles this key tile visits, for each head of the group: from the first that
      // sees any of its keys (causal) to the last. Iteration `it` is query tile first + it %
      // per_head of head hk * group + it / per_head.
      const int first = lesson11::first_query_tile(k0, offset, kRows, p.causal);
      const int per_head = max(0, fa::ceil_div(sq.len_q, kRows) - first);
      iters = make_int4(per_head * group, per_head, first, hk * group);
      bounds = make_int4(sq.len_q, sq.len_k, offset, k0);
      origin[0] = q_offset(p.q_stride, sq, 0);
      origin[1] = q_offset(p.do_stride, sq, 0);
      origin[2] = lesson12::stat_row(sq.varlen, b, 0, 0, p.heads_q, stat_stride, sq.varlen ? qtile_start[b] : 0);
      origin[3] = lse_index(p, sq, 0);
      origin[4] = gate_index(p, sq, 0);
    }
  }
  __syncthreads();
  if (kb.k0 < 0) return;
  const Seq& s = kb.s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // Head h's statistics, fp32 dQ sums and gate: origin[2], [3] and [4] plus h heads' strides
  // (the parameters', which cost no register).
  auto stat_at = [&](int h) { return fresh(origin[2]) + h * stat_stride; };
  auto accum_at = [&](int h) { return fresh(origin[3]) + h * int64_t(is_varlen(p) ? p.total_q : p.seqlen_q); };
  auto gate_at = [&](int h) { return fresh(origin[4]) + h * int64_t(is_varlen(p) ? p.total_k : p.seqlen_k); };
  {
    const int4 bd = fresh(bounds);
    const int hk = fresh(kb.hk);
    load_tile<kThreads, kKeys, D>(sK, static_cast<const T*>(p.k) + k_offset(p.k_stride, s, hk), p.k_stride.row, bd.w, bd.y);
    load_tile<kThreads, kKeys, D>(sV, static_cast<const T*>(p.v) + k_offset(p.v_stride, s, hk), p.v_stride.row, bd.w, bd.y);
  }
  // Starts the loads of query head h's tile at row q0 into buffer `buf`: Q, dO, and the rows' LSE2
  // and D (whole tiles of statistics: no guard); thread 0 fills the buffer's tile_of. The mask's
  // bound: causal, q0 + offset - k0 (key k0 + k is masked past row q0 + r + offset, k > r + bound);
  // otherwise len_k - k0 (masked at k >= bound).
  auto load_queries = [&](int h, int q0, int buf) {
    const int4 bd = fresh(bounds);
    const longlong2 qd = fresh_pair(origin);
    const T* qbase = static_cast<const T*>(p.q) + qd.x + h * p.q_stride.head;
    const T* dobase = static_cast<const T*>(p.dout) + qd.y + h * p.do_stride.head;
    load_tile<kThreads, kRows, D>(sQ + buf * kRows * D, qbase, p.q_stride.row, q0, bd.x);
    load_tile<kThreads, kRows, D>(sdO + buf * kRows * D, dobase, p.do_stride.row, q0, bd.x);
    const int64_t r0 = stat_at(h) + q0;
    const int x = threadIdx.x;
    if (x < kRows / 4) fa::cp_async_16(fa::smem_addr(sL + buf * kRows + 4 * x), lse2 + r0 + 4 * x, true);
    else if (x < kRows / 2)
      fa::cp_async_16(fa::smem_addr(sDelta + buf * kRows + 4 * (x - kRows / 4)), delta + r0 + 4 * (x - kRows / 4), true);
    if (x == 0) {
      const bool masked = lesson11::needs_mask(q0, bd.w, kKeys, bd.y, bd.z, p.causal);
      tile_of[buf] = make_int4(h, q0, masked, p.causal ? q0 + bd.z - bd.w : bd.y - bd.w);
    }
  };
  {
    const int4 n = fresh(iters);
    if (n.x > 0) load_queries(n.w, n.z * kRows, 0);
  }
  fa::cp_async_commit();

  float dk[kKT][kDT][4] = {}, dv[kKT][kDT][4] = {};
  // kGate: the column sums of dS of the block's keys, for the current query head. Each key's sum
  // is kept by one lane (t == 0 of the quad holding the key's row of S^T), so no two threads ever
  // touch the same one; shared memory rather than registers, which dK and dV fill.
  __shared__ float colsum[kGate ? kKeys : 1];
  // kGate with atomic dQ: the row sums of dS of the current query tile over the block's keys, two
  // buffers (iteration it adds to buffer it % 2 while the previous one is flushed, with atomics,
  // to the row terms of dG: other key tiles add to the same rows). In the deterministic mode the
  // dQ pass sums the rows instead (it owns them).
  constexpr bool kRowSums = kGate && kAtomicDq;
  __shared__ float rowsum[2][kRowSums ? kRows : 1];
  if constexpr (kGate) {
    for (int k = threadIdx.x; k < kKeys; k += kThreads) colsum[k] = 0.f;  // before the loop's first barrier
  }
  if constexpr (kRowSums) {
    for (int r = threadIdx.x; r < 2 * kRows; r += kThreads) rowsum[r / kRows][r % kRows] = 0.f;
  }
  // Adds buffer `buf` (query head h's rows from q0) to the row terms of dG and clears it: after a
  // barrier.
  auto flush_rows = [&](int h, int q0, int len_q, int offset, int buf) {
    const int x = threadIdx.x;
    if (x < kRows) {
      const int row = q0 + x, pos = row + offset;
      if (row < len_q && pos >= 0) atomicAdd(dG_rows + gate_at(h) + pos, rowsum[buf][x]);
      rowsum[buf][x] = 0.f;
    }
  };
  const float sl2 = p.scale * fa::kLog2e;
  const uint32_t k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t a_off = 2 * tile_offset(16 * kKT * warp + lane % 16, 8 * (lane / 16), D);
  const uint32_t b_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t t_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);

  for (int it = 0;; ++it) {
    const int4 n = fresh(iters);
    if (it >= n.x) break;
    const int buf = it & 1;
    fa::cp_async_wait<0>();
    __syncthreads();
    float kg[kKT][2] = {};  // the gate: this thread's keys' differences from the query tile's anchor
    {  // The iteration's setup, while no fragment is live: its query tile and the bounds in registers.
      const int4 bd = fresh(bounds);
      const int2 tile = head_row(buf);
      const int len_q = bd.x, len_k = bd.y, offset = bd.z, k0 = bd.w, h = tile.x, q0 = tile.y;
      if (it + 1 < n.x) {
        // The next iteration's: the head's next query tile, or the first of the next head.
        const bool next_head = q0 + kRows >= len_q;
        load_queries(next_head ? h + 1 : h, next_head ? n.z * kRows : q0 + kRows, buf ^ 1);
      }
      fa::cp_async_commit();
      if constexpr (kRowSums) {
        // The previous iteration's tile (its slot was just rewritten): query tile first + (it - 1)
        // % per_head of head hk * group + (it - 1) / per_head.
        if (it > 0) flush_rows(n.w + (it - 1) / n.y, (n.z + (it - 1) % n.y) * kRows, len_q, offset, buf ^ 1);
      }
      if constexpr (kGate) {
        const double* gh = G + gate_at(h);
        // TODO(18): kg[kt][hh] = gate_diff of key k0 + 16 (kKT warp + kt) + g + 8 hh (if below
        //   len_k) from the anchor of the query tile at q0 (lesson12::gate_anchor).
        // BEGIN SOLUTION
        const double anchor = gh[lesson12::gate_anchor(q0, len_q, len_k)];
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int key = k0 + 16 * (kKT * warp + kt) + g + 8 * hh;
            if (key < len_k) kg[kt][hh] = gate_diff(gh, key, anchor);
          }
        // END SOLUTION
      }
    }
    const uint32_t q_addr = fa::smem_addr(sQ + buf * kRows * D), do_addr = fa::smem_addr(sdO + buf * kRows * D);
    const float* lse_s = sL + buf * kRows;
    const float* delta_s = sDelta + buf * kRows;

#pragma unroll 1
    for (int sub = 0; sub < kRows / kSub; ++sub) {
    const int r0 = sub * kSub;
    float sacc[kKT][kNT][4] = {}, dp[kKT][kNT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[kKT][4], va[kKT][4];
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt) {
        fa::ldmatrix_x4(ka[kt], k_addr + (a_off ^ (32 * kk)) + kt * 32 * D);
        fa::ldmatrix_x4(va[kt], v_addr + (a_off ^ (32 * kk)) + kt * 32 * D);
      }
#pragma unroll
      for (int nj = 0; nj < kSub / 16; ++nj) {
        uint32_t qb[4], ob[4];
        fa::ldmatrix_x4(qb, q_addr + ((b_off ^ (32 * kk)) + (r0 / 16 + nj) * 32 * D));
        fa::ldmatrix_x4(ob, do_addr + ((b_off ^ (32 * kk)) + (r0 / 16 + nj) * 32 * D));
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt) {
          fa::mma_m16n8k16<T>(sacc[kt][2 * nj], ka[kt], qb[0], qb[1]);
          fa::mma_m16n8k16<T>(sacc[kt][2 * nj + 1], ka[kt], qb[2], qb[3]);
          fa::mma_m16n8k16<T>(dp[kt][2 * nj], va[kt], ob[0], ob[1]);
          fa::mma_m16n8k16<T>(dp[kt][2 * nj + 1], va[kt], ob[2], ob[3]);
        }
      }
    }

    // P^T and dS^T in place (lesson 11), the key's gate difference beside the row's LSE2. The mask
    // (tile_of), keys counted from the warp's first and rows from the step's first: causal,
    // key > row + lim; otherwise key >= lim. Causal, keys past len_k are past row + offset for every
    // row of the sequence, and rows past len_q have P = 0 anyway (LSE2 = +inf): no test of their own.
    const int4 tile = fresh(tile_of[buf]);
    const bool masked = tile.z;
    const int lim = tile.w - 16 * kKT * warp + (p.causal ? r0 : 0);
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse_s + r0 + nt * 8 + 2 * t);
      const float2 dd = *reinterpret_cast<const float2*>(delta_s + r0 + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float lg = e % 2 ? l2.y : l2.x;
        if constexpr (kGate) lg += kg[kt][e / 2];
        float pv = fa::ex2(fmaf(sacc[kt][nt][e], sl2, -lg));
        if (masked) {
          const lesson11::KeyRow at = lesson11::st_element(lane, nt, e);
          const int key = 16 * kt + at.key;
          if (p.causal ? key > at.row + lim : key >= lim) pv = 0.f;
        }
        sacc[kt][nt][e] = pv;
        dp[kt][nt][e] = pv * (dp[kt][nt][e] - (e % 2 ? dd.y : dd.x));
      }
    }
    if constexpr (kGate) {
      // TODO(19): add this step's dS to the column sums: each thread's values of keys g and g + 8
      //   (for each kt), summed over its columns, then over the quad (fa::group_sum<4>); lane
      //   t == 0 adds them to colsum[16 (kKT warp + kt) + g (+ 8)].
      // BEGIN SOLUTION
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) sum += dp[kt][nt][2 * hh] + dp[kt][nt][2 * hh + 1];
          sum = fa::group_sum<4>(sum);
          if (t == 0) colsum[16 * (kKT * warp + kt) + g + 8 * hh] += sum;
        }
      // END SOLUTION
    }
    if constexpr (kRowSums) {
      // TODO(20): the row sums: each thread's values of one column (query row r0 + nt 8 + 2 t +
      //   e % 2) summed over its keys, then over the 8 lanes sharing the column (xor 4, 8, 16);
      //   lanes 0-3 add them to rowsum[buf][column] (atomicAdd: every warp holds the same rows).
      // BEGIN SOLUTION
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float sum = 0.f;
#pragma unroll
          for (int kt = 0; kt < kKT; ++kt) sum += dp[kt][nt][c] + dp[kt][nt][2 + c];
          sum += __shfl_xor_sync(0xffffffffu, sum, 4);
          sum += __shfl_xor_sync(0xffffffffu, sum, 8);
          sum += __shfl_xor_sync(0xffffffffu, sum, 16);
          if (g == 0) atomicAdd(&rowsum[buf][r0 + nt * 8 + 2 * t + c], sum);
        }
      // END SOLUTION
    }

#pragma unroll
    for (int kc = 0; kc < kSub / 16; ++kc) {
      uint32_t pa[kKT][4], da[kKT][4];
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt) {
        pa[kt][0] = fa::pack2<T>(sacc[kt][2 * kc][0], sacc[kt][2 * kc][1]);
        pa[kt][1] = fa::pack2<T>(sacc[kt][2 * kc][2], sacc[kt][2 * kc][3]);
        pa[kt][2] = fa::pack2<T>(sacc[kt][2 * kc + 1][0], sacc[kt][2 * kc + 1][1]);
        pa[kt][3] = fa::pack2<T>(sacc[kt][2 * kc + 1][2], sacc[kt][2 * kc + 1][3]);
        da[kt][0] = fa::pack2<T>(dp[kt][2 * kc][0], dp[kt][2 * kc][1]);
        da[kt][1] = fa::pack2<T>(dp[kt][2 * kc][2], dp[kt][2 * kc][3]);
        da[kt][2] = fa::pack2<T>(dp[kt][2 * kc + 1][0], dp[kt][2 * kc + 1][1]);
        da[kt][3] = fa::pack2<T>(dp[kt][2 * kc + 1][2], dp[kt][2 * kc + 1][3]);
        if constexpr (kAtomicDq) {
          const int key = 16 * (kKT * warp + kt) + g, row = r0 + 16 * kc + 2 * t;
          *reinterpret_cast<uint32_t*>(sdS + tile_offset(key, row, kRows)) = da[kt][0];
          *reinterpret_cast<uint32_t*>(sdS + tile_offset(key + 8, row, kRows)) = da[kt][1];
          *reinterpret_cast<uint32_t*>(sdS + tile_offset(key, row + 8, kRows)) = da[kt][2];
          *reinterpret_cast<uint32_t*>(sdS + tile_offset(key + 8, row + 8, kRows)) = da[kt][3];
        }
      }
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t ob[4], qb[4];
        fa::ldmatrix_x4_trans(ob, do_addr + ((t_off ^ (32 * dn)) + (r0 / 16 + kc) * 32 * D));
        fa::ldmatrix_x4_trans(qb, q_addr + ((t_off ^ (32 * dn)) + (r0 / 16 + kc) * 32 * D));
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt) {
          fa::mma_m16n8k16<T>(dv[kt][2 * dn], pa[kt], ob[0], ob[1]);
          fa::mma_m16n8k16<T>(dv[kt][2 * dn + 1], pa[kt], ob[2], ob[3]);
          fa::mma_m16n8k16<T>(dk[kt][2 * dn], da[kt], qb[0], qb[1]);
          fa::mma_m16n8k16<T>(dk[kt][2 * dn + 1], da[kt], qb[2], qb[3]);
        }
      }
    }
    }  // sub

    // The iteration's query head and first row again, where S^T's fragments are dead.
    const int2 tile = head_row(buf);
    const int h = tile.x, q0 = tile.y;
    if constexpr (kGate) {
      const int4 bd = fresh(bounds);
      const int len_q = bd.x, len_k = bd.y, k0 = bd.w;
      // TODO(21): after the last query tile of head h, the same lanes store dG = -colsum for their
      //   keys below len_k and set colsum back to 0 for the next head.
      // BEGIN SOLUTION
      if (q0 + kRows >= len_q && t == 0) {  // the head's last tile
        float* dgh = dG + gate_at(h);
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int k = 16 * (kKT * warp + kt) + g + 8 * hh;
            if (k0 + k < len_k) dgh[k0 + k] = -colsum[k];
            colsum[k] = 0.f;
          }
      }
      // END SOLUTION
    }

    if constexpr (kAtomicDq) {
      constexpr int kNW = kWarps / 2, kDW = D / kNW, kMQ = kRows / 32;
      const int mw = warp % 2, nw = warp / 2;
      __syncthreads();
      float acc[kMQ][kDW / 8][4] = {};
      const lesson11::RowCol at = lesson11::ldmatrix_a_trans(lane);
      const uint32_t ds_addr = fa::smem_addr(sdS), ds_off = 2 * tile_offset(at.row, at.col, kRows);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t a[kMQ][4];
#pragma unroll
        for (int mt = 0; mt < kMQ; ++mt)
          fa::ldmatrix_x4_trans(a[mt], ds_addr + ((ds_off ^ (32 * (mw * kMQ + mt))) + kk * 16 * kRows * 2));
#pragma unroll
        for (int dn = 0; dn < kDW / 16; ++dn) {
          uint32_t kb[4];
          fa::ldmatrix_x4_trans(kb, k_addr + ((t_off ^ (32 * (dn + nw * kDW / 16))) + kk * 32 * D));
#pragma unroll
          for (int mt = 0; mt < kMQ; ++mt) {
            fa::mma_m16n8k16<T>(acc[mt][2 * dn], a[mt], kb[0], kb[1]);
            fa::mma_m16n8k16<T>(acc[mt][2 * dn + 1], a[mt], kb[2], kb[3]);
          }
        }
      }
      // The fp32 sums of dQ: (heads_q, total_q, D) varlen, (batch, heads_q, seqlen_q, D) dense.
      float* dq_head = dq_accum + accum_at(h) * D;
      const int len_q = fresh(bounds.x);
#pragma unroll
      for (int mt = 0; mt < kMQ; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int row = q0 + 16 * (mw * kMQ + mt) + g + 8 * hh;
          if (row >= len_q) continue;
#pragma unroll
          for (int nt = 0; nt < kDW / 8; ++nt) {
            float* dst = dq_head + int64_t(row) * D + nw * kDW + nt * 8 + 2 * t;
#if __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[mt][nt][2 * hh], acc[mt][nt][2 * hh + 1]));
#else
            atomicAdd(dst, acc[mt][nt][2 * hh]);
            atomicAdd(dst + 1, acc[mt][nt][2 * hh + 1]);
#endif
          }
        }
    }
  }
  if constexpr (kRowSums) {
    const int n_iter = fresh(iters.x), last = (n_iter - 1) & 1;
    if (n_iter > 0) {
      __syncthreads();
      const int4 bd = fresh(bounds);
      const int2 tile = head_row(last);
      flush_rows(tile.x, tile.y, bd.x, bd.z, last);
    }
  }
  fa::cp_async_wait<0>();

  const int4 bd = fresh(bounds);
  const int hk = fresh(kb.hk);
  T* dkb = static_cast<T*>(p.dk) + k_offset(p.dk_stride, s, hk);
  T* dvb = static_cast<T*>(p.dv) + k_offset(p.dv_stride, s, hk);
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int key = bd.w + 16 * (kKT * warp + kt) + g + 8 * hh;
    if (key >= bd.y) continue;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      *reinterpret_cast<uint32_t*>(dkb + key * p.dk_stride.row + dt * 8 + 2 * t) =
          fa::pack2<T>(dk[kt][dt][2 * hh] * p.scale, dk[kt][dt][2 * hh + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dvb + key * p.dv_stride.row + dt * 8 + 2 * t) =
          fa::pack2<T>(dv[kt][dt][2 * hh], dv[kt][dt][2 * hh + 1]);
    }
  }
}

// dQ = scale * (the fp32 sums), rounded to T, through dQ's strides: 8 values per thread. The sums'
// rows are (head, token) varlen, (batch, head, row) dense.
template <class T, int D>
__global__ void convert_kernel(const fa::AttnParams p, const float* dq_accum) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_head = is_varlen(p) ? p.total_q : p.seqlen_q;
  const int64_t rows = (is_varlen(p) ? 1 : int64_t(p.batch)) * p.heads_q * per_head;
  if (idx >= rows * (D / 8)) return;
  const int64_t row = idx / (D / 8);
  const int c = static_cast<int>(idx % (D / 8));
  const int64_t bh = row / per_head, i = row % per_head;
  const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
  const float4 x0 = *reinterpret_cast<const float4*>(dq_accum + row * D + 8 * c);
  const float4 x1 = *reinterpret_cast<const float4*>(dq_accum + row * D + 8 * c + 4);
  const float sc = p.scale;
  uint4 out;
  out.x = fa::pack2<T>(x0.x * sc, x0.y * sc);
  out.y = fa::pack2<T>(x0.z * sc, x0.w * sc);
  out.z = fa::pack2<T>(x1.x * sc, x1.y * sc);
  out.w = fa::pack2<T>(x1.z * sc, x1.w * sc);
  // varlen: b = 0 and i is the token; dense: i is the row of sequence b.
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq) + b * p.dq_stride.batch + h * p.dq_stride.head + i * p.dq_stride.row +
                            8 * c) = out;
}

// The deterministic dQ pass (lesson 11), one block per (query tile of kStatRows rows, head), with
// the keys' gate differences beside the rows' LSE2.
template <class T, int D, int kKeys, int kWarps, bool kGate>
__global__ void __launch_bounds__(kWarps * 32, 2)
    dq_kernel(const fa::AttnParams p, const int2* qmap, const int* qcount, const int* qtile_start, const double* G,
              const float* lse2, const float* delta, int64_t stat_stride, float* dG_rows) {
  constexpr int kThreads = kWarps * 32, kRows = 16 * kWarps, kNT = kKeys / 8, kDT = D / 8;
  static_assert(kRows == lesson12::kStatRows, "the statistics and the gate's anchors are per tile of kStatRows rows");
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sQ = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sdO = sQ + kRows * D;
  T* sK = sdO + kRows * D;
  T* sV = sK + 2 * kKeys * D;
  // The block's sequence, bounds and K/V offsets in shared memory (the forward's reason: registers
  // are at the limit), read as in the forward: once a key tile, as 16-byte loads.
  __shared__ Block blk;
  __shared__ int ts;
  __shared__ int4 loop;  // what the key loop reads: n_tiles, n_full, len_k, q0 + offset
  __shared__ alignas(16) int64_t kv_at[2];
  __shared__ int64_t gh_at;  // gate_index of (sequence, head h)
  __shared__ double anchor_s;  // the gate's anchor
  const int h = head(p.heads_q);
  if (threadIdx.x == 0) {
    blk = block_of(p, qmap, qcount, entry(p.heads_q), kRows, kKeys);
    if (blk.tile >= 0) {
      const int hk = h / (p.heads_q / p.heads_kv);
      ts = blk.s.varlen ? qtile_start[blk.s.b] : 0;
      kv_at[0] = k_offset(p.k_stride, blk.s, hk);
      kv_at[1] = k_offset(p.v_stride, blk.s, hk);
      loop = make_int4(blk.n_tiles, blk.n_full, blk.s.len_k, blk.tile * kRows + blk.offset);
      gh_at = gate_index(p, blk.s, h);
      if (kGate)
        anchor_s = blk.s.len_k > 0 ? G[gh_at + lesson12::gate_anchor(blk.tile * kRows, blk.s.len_q, blk.s.len_k)] : 0.0;
    }
  }
  __syncthreads();
  if (blk.tile < 0) return;
  const Seq& s = blk.s;
  auto q0 = [&] { return fresh(blk.tile) * kRows; };
  auto offset = [&] { return fresh(blk.offset); };
  auto len_k = [&] { return fresh(blk.s.len_k); };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  load_tile<kThreads, kRows, D>(sQ, static_cast<const T*>(p.q) + q_offset(p.q_stride, s, h), p.q_stride.row, q0(), s.len_q);
  load_tile<kThreads, kRows, D>(sdO, static_cast<const T*>(p.dout) + q_offset(p.do_stride, s, h), p.do_stride.row, q0(),
                                s.len_q);
  if (fresh(blk.n_tiles) > 0) {
    const longlong2 kv = fresh_pair(kv_at);
    load_tile<kThreads, kKeys, D>(sK, static_cast<const T*>(p.k) + kv.x, p.k_stride.row, 0, len_k());
    load_tile<kThreads, kKeys, D>(sV, static_cast<const T*>(p.v) + kv.y, p.v_stride.row, 0, len_k());
  }
  fa::cp_async_commit();

  const int64_t r0 = lesson12::stat_row(s.varlen, s.b, h, q0() + 16 * warp + g, p.heads_q, stat_stride, ts);
  const float l2[2] = {lse2[r0], lse2[r0 + 8]}, dd[2] = {delta[r0], delta[r0 + 8]};
  const float sl2 = p.scale * fa::kLog2e;
  float acc[kDT][4] = {};
  float rows[2] = {0.f, 0.f};  // kGate: this thread's part of its two rows' sums of dS
  const uint32_t q_addr = fa::smem_addr(sQ), do_addr = fa::smem_addr(sdO), k_addr = fa::smem_addr(sK),
                 v_addr = fa::smem_addr(sV);
  const uint32_t a_off = 2 * tile_offset(16 * warp + lane % 16, 8 * (lane / 16), D);
  const uint32_t b_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t t_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);

  for (int j = 0;; ++j) {
    const int4 top = fresh(loop);
    if (j >= top.x) break;
    fa::cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < top.x) {
      const int slot = (j + 1) % 2;
      const longlong2 kv = fresh_pair(kv_at);
      load_tile<kThreads, kKeys, D>(sK + slot * kKeys * D, static_cast<const T*>(p.k) + kv.x, p.k_stride.row, (j + 1) * kKeys, top.z);
      load_tile<kThreads, kKeys, D>(sV + slot * kKeys * D, static_cast<const T*>(p.v) + kv.y, p.v_stride.row, (j + 1) * kKeys, top.z);
    }
    fa::cp_async_commit();
    const uint32_t kj = k_addr + (j % 2) * kKeys * D * 2, vj = v_addr + (j % 2) * kKeys * D * 2;

    float sacc[kNT][4] = {}, dp[kNT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[4], oa[4];
      fa::ldmatrix_x4(qa, q_addr + (a_off ^ (32 * kk)));
      fa::ldmatrix_x4(oa, do_addr + (a_off ^ (32 * kk)));
#pragma unroll
      for (int nj = 0; nj < kKeys / 16; ++nj) {
        uint32_t kb[4], vb[4];
        fa::ldmatrix_x4(kb, kj + ((b_off ^ (32 * kk)) + nj * 32 * D));
        fa::mma_m16n8k16<T>(sacc[2 * nj], qa, kb[0], kb[1]);
        fa::mma_m16n8k16<T>(sacc[2 * nj + 1], qa, kb[2], kb[3]);
        fa::ldmatrix_x4(vb, vj + ((b_off ^ (32 * kk)) + nj * 32 * D));
        fa::mma_m16n8k16<T>(dp[2 * nj], oa, vb[0], vb[1]);
        fa::mma_m16n8k16<T>(dp[2 * nj + 1], oa, vb[2], vb[3]);
      }
    }
    // The tile's bounds (and the gate's G and anchor), read once after S, where Q's and K's
    // fragments are dead. Rows are counted from q0: key col is masked at or past len_k, or
    // (causal) past row + q0 + offset.
    const int4 lim = fresh(loop);
    const bool masked = j >= lim.y;
    const double* gh = kGate ? G + fresh(gh_at) : nullptr;
    const double anchor = kGate ? fresh(anchor_s) : 0.0;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int c = j * kKeys + nt * 8 + 2 * t;
      float kg[2] = {0.f, 0.f};
      if constexpr (kGate) {
        if (c < lim.z) kg[0] = gate_diff(gh, c, anchor);
        if (c + 1 < lim.z) kg[1] = gate_diff(gh, c + 1, anchor);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float lg = l2[e / 2];
        if constexpr (kGate) lg += kg[e % 2];
        float pv = fa::ex2(fmaf(sacc[nt][e], sl2, -lg));
        if (masked) {
          const int row = 16 * warp + g + 8 * (e / 2), col = c + e % 2;
          if (col >= lim.z || (p.causal && col > row + lim.w)) pv = 0.f;
        }
        dp[nt][e] = pv * (dp[nt][e] - dd[e / 2]);
        if constexpr (kGate) rows[e / 2] += dp[nt][e];
      }
    }
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      const uint32_t da[4] = {fa::pack2<T>(dp[2 * kc][0], dp[2 * kc][1]), fa::pack2<T>(dp[2 * kc][2], dp[2 * kc][3]),
                              fa::pack2<T>(dp[2 * kc + 1][0], dp[2 * kc + 1][1]),
                              fa::pack2<T>(dp[2 * kc + 1][2], dp[2 * kc + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t kb[4];
        fa::ldmatrix_x4_trans(kb, kj + ((t_off ^ (32 * dn)) + kc * 32 * D));
        fa::mma_m16n8k16<T>(acc[2 * dn], da, kb[0], kb[1]);
        fa::mma_m16n8k16<T>(acc[2 * dn + 1], da, kb[2], kb[3]);
      }
    }
  }
  fa::cp_async_wait<0>();

  if constexpr (kGate) {
    // The row terms of dG: this block owns its rows, so a plain store (no atomics, the same
    // bits every run).
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(rows[hh]);
      const int row = q0() + 16 * warp + g + 8 * hh, pos = row + offset();
      if (t == 0 && row < s.len_q && pos >= 0) dG_rows[gate_index(p, s, h) + pos] = sum;
    }
  }
  T* dqb = static_cast<T*>(p.dq) + q_offset(p.dq_stride, s, h);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = q0() + 16 * warp + g + 8 * hh;
    if (row >= s.len_q) continue;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
      *reinterpret_cast<uint32_t*>(dqb + row * p.dq_stride.row + dt * 8 + 2 * t) =
          fa::pack2<T>(acc[dt][2 * hh] * p.scale, acc[dt][2 * hh + 1] * p.scale);
  }
}

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
  fa::throw_if_todos_left("12_gqa_varlen_gate", lesson12::kPlanTodosLeft);
  fa::throw_if_todos_left("12_gqa_varlen_gate", kTodosLeft);
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
  auto kernel = forward_kernel<T, c.head_dim, c.rows, c.keys, c.sub, c.warps, c.stages, c.blocks, kGate>;
  fa::allow_smem(kernel, smem);
  kernel<<<grid_of(map.entries * p.heads_q), c.warps * 32, smem, stream>>>(p, map.order, map.count, G, heaviest_first);
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
  preprocess_kernel<T, D, kGate><<<grid_of(x.qmap.entries * p.heads_q), R * (D / 8), 0, stream>>>(
      p, x.qmap.order, x.qmap.count, x.qmap.tile_start, x.G, x.lse2, x.delta, stat_stride);
  FA_CHECK_LAUNCH();
  if constexpr (kGate) FA_CUDA_CHECK(cudaMemsetAsync(x.dG, 0, 2 * gate_elements(p) * sizeof(float), stream));
  constexpr int smem = lesson11::smem_bytes(c);
  const unsigned kv_blocks = grid_of(x.kmap.entries * p.heads_kv);
  if (atomic_dq) {
    FA_CUDA_CHECK(cudaMemsetAsync(x.dq_accum, 0, q_rows * D * sizeof(float), stream));
    auto kernel = dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, true, kGate>;
    fa::allow_smem(kernel, smem);
    kernel<<<kv_blocks, lesson11::threads(c), smem, stream>>>(p, x.kmap.order, x.kmap.count, x.qmap.tile_start, x.G,
                                                             x.lse2, x.delta, stat_stride, x.dq_accum, x.dG,
                                                             kGate ? x.dG + gate_elements(p) : nullptr);
    FA_CHECK_LAUNCH();
    convert_kernel<T, D><<<grid_of((q_rows * (D / 8) + 255) / 256), 256, 0, stream>>>(p, x.dq_accum);
    FA_CHECK_LAUNCH();
  } else {
    auto kernel = dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, false, kGate>;
    fa::allow_smem(kernel, smem);
    kernel<<<kv_blocks, lesson11::threads(c), smem, stream>>>(p, x.kmap.order, x.kmap.count, x.qmap.tile_start, x.G,
                                                             x.lse2, x.delta, stat_stride, nullptr, x.dG, nullptr);
    FA_CHECK_LAUNCH();
    constexpr int dq_smem = lesson11::dq_smem_bytes(D);
    auto dq = dq_kernel<T, D, kDqKeys, kDqWarps, kGate>;
    fa::allow_smem(dq, dq_smem);
    dq<<<grid_of(x.qmap.entries * p.heads_q), kDqWarps * 32, dq_smem, stream>>>(
        p, x.qmap.order, x.qmap.count, x.qmap.tile_start, x.G, x.lse2, x.delta, stat_stride,
        kGate ? x.dG + gate_elements(p) : nullptr);
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
