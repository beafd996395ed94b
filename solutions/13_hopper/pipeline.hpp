// Lesson 13's pipeline: where a block keeps its tiles, the ring of K/V stages between the producer
// and the consumers with its mbarriers, the named barriers, and what the warpgroups of a block
// share (Block).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "fa/params.hpp"
#include "schedule.hpp"

namespace lesson13 {

// The producer's warpgroup and the consumers' (schedule.hpp).
__host__ __device__ constexpr int threads_of(int consumers) { return 128 * (1 + consumers); }

// K/V tiles in flight: step 1 double-buffers; steps 2-4 keep 3 at d = 128 (all that fits beside Q:
// 32 KB + 3 x 64 KB) and 4 at d = 64, the fastest of 2-5 in the README's tile sweep (section 8).
__host__ __device__ constexpr int stages_of(int step, int d) { return step == 1 ? 2 : d == 64 ? 4 : 3; }

template <int D, int kStages, int kRows>
struct Smem {
  static constexpr int q_bytes = kRows * D * 2, kv_bytes = kKeys * D * 2;
  static constexpr int q = 0, k = q_bytes, v = k + kStages * kv_bytes, bars = v + kStages * kv_bytes;
  static constexpr int slots = bars + 8 * (1 + 2 * kStages);  // after the barriers: the two work slots
  static constexpr int total = slots + 16 + 1024;              // and slack to align the base
};

// The ring: K/V tiles are counted across work tiles, position r in stage r % kStages, the
// stage's round parity (r / kStages) & 1 telling its phases apart. Each stage has a full barrier
// (the producer's copies landed) and an empty one (the consumers' 4 kConsumers warps are done with it); Q has
// its own full barrier.
template <int kStages>
struct Ring {
  __host__ __device__ static constexpr int stage(int r) { return r % kStages; }
  __host__ __device__ static constexpr int parity(int r) { return (r / kStages) & 1; }
};

// The named barriers (0 is __syncthreads): between work tiles, the rendezvous of the producer's
// warp with consumer warpgroup wg (1 .. 3); and the ping-pong turns of the consumers (steps 3-4),
// warpgroup wg waiting on its own and passing the turn on the next one's (with three: 1, 2, 3, 1, ...).
enum NamedBarrier : int { kRendezvous1 = 1, kTurn1 = 4 };  // ids 1-3 and 4-6
constexpr int kRendezvousThreads = 128 + 32;  // a consumer warpgroup and the producer's warp
constexpr int kTurnThreads = 256;             // a consumer warpgroup and the one before it
__host__ __device__ constexpr int rendezvous(int wg) { return kRendezvous1 - 1 + wg; }
__host__ __device__ constexpr int turn(int wg) { return kTurn1 - 1 + wg; }
template <int kConsumers>
__host__ __device__ constexpr int next_turn(int wg) { return turn(wg % kConsumers + 1); }

// What the block's warpgroups share: the call, its tensor maps (kernel parameters), and where the
// tiles, the barriers and the two work slots (the tile each warpgroup does next) are in shared
// memory.
struct Block {
  const fa::AttnParams& p;
  const CUtensorMap *tq, *tk, *tv;
  uint32_t q_addr, k_addr, v_addr;
  uint32_t q_full, full, empty;  // Q's barrier, then each stage's full and empty (8 bytes each)
  volatile int64_t* work_slot;
  int64_t n_work;
  unsigned long long* counter;  // step 4's tile counter
};

}  // namespace lesson13
