// Your copy of this lesson, generated from solutions/12_gqa_varlen_gate/forward.cuh by fa-skeleton.
// Lesson 12's forward: lesson 08's kernel (pipelined_kernel) over the tile map's query tiles,
// with GQA, packed sequences and the gate (PackedTiles). Part of kernel.cu.
#pragma once

#include "../08_pipelining/attention.cuh"  // lesson 08's kernel and its DenseTiles
#include "sequences.cuh"

namespace {

const fa::TodoList kForwardTodosLeft = {  // delete an entry when its code is written (sequences.cuh)
    "TODO(15) in forward.cuh: x.anchor = G at lesson12::gate_anchor, and x.qg = gate_diff at each of this",
    "TODO(16) in forward.cuh: the logits in base 2 with the gate: sacc = sacc * scale * log2(e) + qg - kg,",
};

// The query tiles of lesson 08's kernel (its DenseTiles says what a Tiles is), one block per (map
// entry, query head): a sequence's bounds in place of seqlen_q/seqlen_k, GQA's K/V head, and with
// kGate the gate's anchored differences added to the logits (then in base 2: the softmax runs with
// scale 1). The block's bounds live in shared memory, read where used (fresh): the kernel is at the
// 255-register limit.
template <bool kGate>
struct PackedTiles {
  struct Args {
    const int2* map;  // the tile map and its count
    const int* count;
    const double* G;  // the gate's cumulative sums (kGate)
  };
  // Filled by thread 0 in begin: variables of their own, not members of one struct, which ptxas
  // allocates worse here (a spill at head dim 128).
  __device__ static Block& blk() { __shared__ Block b; return b; }
  __device__ static int64_t (&starts())[4] { __shared__ alignas(16) int64_t a[4]; return a; }  // K, V, O, LSE
  __device__ static int4& bounds() { __shared__ int4 l; return l; }  // n_tiles, n_full, len_k, q0 + offset
  template <class T, int kRows>
  struct Tile {
    int h;
    const double* G;  // the gate's (kGate)
    __device__ bool valid() const { return blk().tile >= 0; }
    __device__ int q0() const { return fresh(blk().tile) * kRows; }
    __device__ int len_q(const fa::AttnParams&) const { return blk().s.len_q; }
    __device__ int len_k(const fa::AttnParams&) const { return fresh(blk().s.len_k); }
    // The whole int4 in one read: a 4-byte read of n_tiles alone spills at head dim 128.
    __device__ int n_tiles() const { return fresh(bounds()).x; }
    __device__ int n_full() const { return fresh(blk().n_full); }
    __device__ const T* q(const fa::AttnParams& p) const { return static_cast<const T*>(p.q) + q_offset(p.q_stride, blk().s, h); }
    struct KV { const T *k, *v; };
    __device__ KV kv(const fa::AttnParams& p) const {
      const longlong2 kv = lesson11::fresh_pair(starts());  // one 16-byte read
      return {static_cast<const T*>(p.k) + kv.x, static_cast<const T*>(p.v) + kv.y};
    }
    __device__ T* o(const fa::AttnParams& p) const { return static_cast<T*>(p.o) + fresh(starts()[2]); }
    __device__ float* lse(const fa::AttnParams& p) const { return p.lse + fresh(starts()[3]); }
    // One read of the bound a call (the int4 whole does not fit beside 128 keys of S): causal,
    // lim = q0 + offset, key col masked when col > lim + r (r: the row from the tile's first);
    // else lim = len_k. Causal, row + offset < len_k for every row (rows past len_q are never
    // stored), so the tail needs no test (one test fewer keeps the kernel within its registers).
    template <int kWarpRows, int kMT, int kNT>
    __device__ void mask(const fa::AttnParams& p, float (&sacc)[kMT][kNT][4], int col0, int warp, int lane) const {
      const int lim = p.causal ? fresh(bounds().w) : fresh(bounds().z);
      const int g = lane / 4;
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
    // With the gate, S is scaled as it is biased (Terms::add); the LSE then holds G_i - A and
    // -(G_j - A): the anchor cancels, it is the true one.
    __device__ float scale(const fa::AttnParams& p) const { return kGate ? 1.f : p.scale * fa::kLog2e; }
    template <int kMT, int kWarpRows>
    __device__ auto logits(const fa::AttnParams& p, int warp, int lane) const {
      if constexpr (!kGate) {
        return lesson08::DenseTiles::NoTerms{};
      } else {
        const Seq& s = blk().s;
        const int offset = fresh(blk().offset), g = lane / 4;
        Terms<kMT> x{nullptr, 0.0, {}, p.scale * fa::kLog2e};
        x.gh = G + gate_index(p, s, h);
        // TODO(15): x.anchor = G at lesson12::gate_anchor, and x.qg = gate_diff at each of this
        //   thread's rows' key position row + offset (0 for rows past len_q or before position 0).
        return x;
      }
    }
  };
  // The gate's terms of a thread's rows (G of the (sequence, head), the tile's anchor, the rows'
  // anchored differences qg): add() makes S the base-2 logits S scale log2(e) + qg - kg.
  template <int kMT>
  struct Terms {
    const double* gh;
    double anchor;
    float qg[kMT][2];
    float sl2;
    template <int kNT>
    __device__ void add(float (&sacc)[kMT][kNT][4], int col0) const {
      // TODO(16): the logits in base 2 with the gate: sacc = sacc * scale * log2(e) + qg - kg,
      //   kg = gate_diff at the column; 0 from len_k = fresh(blk().s.len_k) on (masked; no G there).
    }
  };
  template <class T, int kRows, int kKeys>
  __device__ static Tile<T, kRows> begin(const fa::AttnParams& p, const Args& a, const void* tiles) {
    lesson11::check_tile_alignment(tiles);
    if (threadIdx.x == 0) {
      Block& k = blk();
      k = block_of(p, a.map, a.count, entry(p.heads_q), kRows, kKeys);
      const int h = head(p.heads_q), hk = h / (p.heads_q / p.heads_kv);
      starts()[0] = k_offset(p.k_stride, k.s, hk);
      starts()[1] = k_offset(p.v_stride, k.s, hk);
      starts()[2] = q_offset(p.o_stride, k.s, h);
      starts()[3] = lse_index(p, k.s, h);
      bounds() = make_int4(k.n_tiles, k.n_full, k.s.len_k, k.tile * kRows + k.offset);
    }
    __syncthreads();
    return {head(p.heads_q), a.G};
  }
};

}  // namespace
