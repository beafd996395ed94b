// Lesson 13: the forward on Hopper's own instructions (sm_90a), warp-specialised.
//   TMA       Q, K and V tiles are copied by the tensor-memory accelerator (cp.async.bulk.tensor),
//             described by tensor maps built on the host, 128-byte swizzled (wgmma.hpp);
//   mbarrier  each copy completes on a shared-memory barrier that counts the bytes it expects;
//   wgmma     a warpgroup (4 warps) multiplies 64 rows at once: S = Q K^T from shared memory,
//             O += P V with P straight from S's registers;
//   roles     warpgroup 0 produces (producer.cuh: one thread issues every copy), warpgroups 1 and 2
//             consume (consumer.cuh: 64 query rows each, 128 per work tile; at head dim 64 on step
//             4, three: 192, causal from kThreeCausalFrom rows), with a ring of kStages K/V tiles
//             between them (pipeline.hpp);
//   schedule  four steps (the variants, kVariants below), the last a persistent grid: one block per
//             SM takes work tiles from a counter (schedule.hpp), and loads the next one's Q and K/V
//             under this one's end.
// This file: the block's setup and its roles, the launch, the entry points.
// Contiguous (batch, heads, seqlen, head_dim) tensors; fp16 and bf16; head dims 64 and 128; causal
// (bottom-right aligned) and not; GQA.
#include <cuda.h>  // CUtensorMap and its enums (the header only: the driver is reached at run time)
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "consumer.cuh"
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/hopper.cuh"
#include "fa/params.hpp"
#include "fa/tensor_map.hpp"
#include "fa/trace.cuh"
#include "pipeline.hpp"
#include "producer.cuh"
#include "schedule.hpp"
#include "trace.hpp"
#include "wgmma.hpp"

namespace {

using lesson13::kKeys;
using lesson13::rows_of;
using lesson13::threads_of;
using lesson13::stages_of;
using lesson13::Smem;

// The schedule, step by step (the README's step table): 1 = each consumer warpgroup runs
// S = Q K^T, the softmax, then O += P V, one after the other; 2 = + intra-warpgroup overlap: the
// next tile's Q K^T and this tile's P V are issued together, and the softmax of the next tile runs
// while P V is still on the tensor cores; 3 = + ping-pong: the two consumer warpgroups take turns
// issuing their GEMMs (named barriers), so one's softmax runs under the other's GEMMs; 4 = + a
// persistent grid: one block per SM loops over work tiles, taken from a counter in global memory,
// and its producer loads the next tile's Q and first K/V tiles while the consumers finish this one.
// Step 4 at head dim 64 takes three consumer warpgroups (192-row work tiles): there a key tile's
// GEMMs take half as long as at 128 and its softmax does not, and a third warpgroup's softmax fills
// the tensor cores' gaps. Causal, only from kThreeCausalFrom query rows on: below it, a 192-row
// tile's diagonal (two key tiles masked, not one) costs as much as that gains or more (README,
// section 8).
// The lesson's variants are the steps, step 4 the default; step 4 with the consumers fixed (2 or
// 3; 0: by the call, as above); and step 4 on a few blocks only (at most max_blocks; 0: one per
// SM), for the tests: each block then takes many work tiles.
struct StepVariant {
  const char* name;
  int step, max_blocks, consumers;
  const char* about;
};
constexpr int kThreeCausalFrom = 1024;
static_assert(kThreeCausalFrom == 1024, "step4's description below says 1k rows: change both");
constexpr StepVariant kVariants[] = {
    {"step4", 4, 0, 0, "+ a persistent grid: one block per SM takes work tiles from a counter (head dim 64: 3 consumer warpgroups; causal from 1k rows)"},
    {"step1", 1, 0, 2, "a block per work tile; each consumer warpgroup's S = Q K^T, softmax and O += P V one after the other"},
    {"step2", 2, 0, 2, "+ overlap in a warpgroup: the next tile's Q K^T issued with this tile's P V"},
    {"step3", 3, 0, 2, "+ ping-pong: the consumer warpgroups take turns issuing their GEMMs"},
    {"step4-2wg", 4, 0, 2, "step 4 with two consumer warpgroups (128-row work tiles) at every length"},
    {"step4-3wg", 4, 0, 3, "step 4 with three consumer warpgroups (192-row work tiles) at head dim 64, at every length"},
    {"step4-1-block", 4, 1, 0, "step 4 on 1 block (the tests: every work tile through one block)"},
    {"step4-2wg-2-blocks", 4, 2, 2, "step4-2wg on 2 blocks (the tests)"},
    {"step4-5-blocks", 4, 5, 0, "step 4 on 5 blocks (the tests: many work tiles a block)"},
    {"step4-3wg-1-block", 4, 1, 3, "step4-3wg on 1 block (the tests)"},
    {"step4-3wg-5-blocks", 4, 5, 3, "step4-3wg on 5 blocks (the tests)"},
};

// Consumer warpgroups for a call of variant v: three only at head dim 64 on step 4 (at 128, O, S
// and P take 160 registers a thread, more than three warpgroups can have).
int consumers_of(const fa::AttnParams& p, const StepVariant& v) {
  if (p.head_dim != 64 || v.step < 4) return 2;
  if (v.consumers != 0) return v.consumers;
  return !p.causal || p.seqlen_q >= kThreeCausalFrom ? 3 : 2;
}

// ---- The kernel ------------------------------------------------------------------------------------
// Steps 1-3: a grid of (query tiles, heads, batch) blocks, one work tile each. Step 4: gridDim.x
// blocks (one per SM); block i starts with tile i and then takes the next from `counter` (zero at
// launch) until all n_work are taken (schedule.hpp). The block sets up its shared memory and
// barriers, then its warpgroups take their roles: producer.cuh (warpgroup 0) and consumer.cuh (1 .. kConsumers).
//
// Between work tiles the producer and each consumer warpgroup meet at a rendezvous, a named
// barrier of the warpgroup's 128 threads and the producer's warp (pipeline.hpp). A warpgroup
// reaches it once its last Q K^T of a tile is done, so after it Q's buffer may take the next
// tile's rows; and the producer has written the next tile's number in a work slot before it, so
// after it the warpgroup reads it. Two work slots, alternating: the slot of tile t + 2 is written
// after the rendezvous of tile t + 1, which each warpgroup reaches after reading tile t's.
//
// kTrace (trace.hpp): thread 0 of each warpgroup records the SM's clock at every change of phase
// (mark below); the other instantiations compile the marks away.
template <class T, int D, int kStep, int kConsumers, bool kTrace>
__global__ void __launch_bounds__(threads_of(kConsumers), 1)
    hopper_kernel(const fa::AttnParams p, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                  const __grid_constant__ CUtensorMap tv, int64_t n_work, unsigned long long* counter,
                  const lesson13::TraceSink trace) {
  static_assert(!kTrace || kConsumers == 2, "the traced build has two consumer warpgroups (3 lanes a block)");
  constexpr int kStages = stages_of(kStep, D);
  using S = Smem<D, kStages, rows_of(kConsumers)>;
  extern __shared__ uint8_t smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes: align the tiles to it.
  const uint32_t base = (fa::smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_addr = base + S::q, k_addr = base + S::k, v_addr = base + S::v, bars = base + S::bars;
  // 8 bytes a barrier: Q loaded, then each stage's full and empty.
  const uint32_t q_full = bars, full = bars + 8, empty = bars + 8 + 8 * kStages;
  // The work slots (after the barriers): the tile each warpgroup does next (n_work: none left).
  volatile int64_t* work_slot = reinterpret_cast<volatile int64_t*>(smem_raw + (base - fa::smem_addr(smem_raw)) + S::slots);

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  namespace ph = lesson13::phase;
  [[maybe_unused]] int n_marks = 0;
  auto mark = [&](int phase, int64_t key) {
    if constexpr (kTrace) {
      // 32-bit indices (the producer has 40 registers): the host checks lanes x capacity < 2^31.
      const int lane = 3 * int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) + wg;
      if (tid == 0) fa::trace_mark<true>(trace, lane, n_marks, phase, key, phase == ph::kExit);
    }
  };
  mark(ph::kSetup, 0);
  if (threadIdx.x == 0) {
    fa::mbar_init(q_full, 1);  // the producer's arrive, with Q's bytes
    for (int s = 0; s < kStages; ++s) {
      fa::mbar_init(full + 8 * s, 1);   // the producer's arrive (with the bytes it expects)
      fa::mbar_init(empty + 8 * s, 4 * kConsumers);  // one arrive per consumer warp, once its wgmmas on it are done
    }
    fa::fence_mbar_init();
  }
  __syncthreads();

  const lesson13::Block x{p, &tq, &tk, &tv, q_addr, k_addr, v_addr, q_full, full, empty, work_slot, n_work, counter};
  if (wg == 0) {
    lesson13::produce<T, D, kStep, kConsumers>(x, tid, mark);
    mark(ph::kExit, 0);
    return;
  }
  lesson13::consume<T, D, kStep, kConsumers>(x, wg, tid, mark);
  mark(ph::kExit, 0);
}

// ---- Host: tensor maps and the launch ------------------------------------------------------------
CUtensorMap make_map(const void* ptr, fa::DType t, int bh, int seqlen, int d, int rows) {
  return fa::make_tensor_map("13_hopper", ptr, t, bh, seqlen, d, rows);
}

using lesson13::blocks_of;
using lesson13::work_tiles;

template <class T, int D, int kStep, int kConsumers, bool kTrace>
void launch(const fa::AttnParams& p, int sm_count, int max_blocks, cudaStream_t stream, const lesson13::TraceSink& trace) {
  constexpr int kRows = rows_of(kConsumers);
  constexpr int smem = Smem<D, stages_of(kStep, D), kRows>::total;
  static_assert(smem <= 227 * 1024, "over the H200's 227 KB of shared memory per block");
  auto kernel = hopper_kernel<T, D, kStep, kConsumers, kTrace>;
  fa::allow_smem(kernel, smem);  // once per device
  const CUtensorMap tq = make_map(p.q, p.dtype, p.batch * p.heads_q, p.seqlen_q, D, kRows);
  const CUtensorMap tk = make_map(p.k, p.dtype, p.batch * p.heads_kv, p.seqlen_k, D, kKeys);
  const CUtensorMap tv = make_map(p.v, p.dtype, p.batch * p.heads_kv, p.seqlen_k, D, kKeys);
  const int64_t n_work = work_tiles(p, kRows);
  if constexpr (kStep < 4) {
    const dim3 grid(fa::ceil_div(p.seqlen_q, kRows), p.heads_q, p.batch);
    kernel<<<grid, threads_of(kConsumers), smem, stream>>>(p, tq, tk, tv, n_work, nullptr, trace);
    FA_CHECK_LAUNCH();
  } else {
    // One block per SM (one fits: shared memory and registers), each looping over work tiles;
    // the counter hands out the tiles after the first gridDim.x, so it starts at zero. It is the
    // stream's, kept from call to call (fa::zeroed_counter): one allocated and freed at every call
    // cost speed (README, "The tile counter").
    const int blocks = int(blocks_of(p, kRows, 4, max_blocks, sm_count));
    unsigned long long* counter = fa::zeroed_counter(stream);
    kernel<<<blocks, threads_of(kConsumers), smem, stream>>>(p, tq, tk, tv, n_work, counter, trace);
    FA_CHECK_LAUNCH();
  }
}

// Three consumer warpgroups are compiled only where they run: head dim 64, step 4, untraced (the
// trace's count of records needs a register, and at 160 a thread they have none: ptxas spills).
template <class T, int D, int kStep, bool kTrace>
void launch(const fa::AttnParams& p, int consumers, int sm_count, int max_blocks, cudaStream_t stream, const lesson13::TraceSink& trace) {
  if constexpr (D == 64 && kStep == 4 && !kTrace)
    if (consumers == 3) return launch<T, D, kStep, 3, kTrace>(p, sm_count, max_blocks, stream, trace);
  launch<T, D, kStep, 2, kTrace>(p, sm_count, max_blocks, stream, trace);
}

// Variant v's step of the schedule, the persistent grid (step 4) capped at v.max_blocks blocks (0:
// one per SM); with a trace sink, the traced kernel (fp16 only: one dtype is enough to see the
// schedule, and it halves the traced instantiations).
void run_step(const fa::AttnParams& p, const StepVariant& v, cudaStream_t stream, const lesson13::TraceSink* trace = nullptr) {
  const int step = v.step, max_blocks = v.max_blocks, consumers = consumers_of(p, v);
  fa::throw_if_todos_left("13_hopper", lesson13::kWgmmaTodosLeft);
  fa::throw_if_todos_left("13_hopper", lesson13::kProducerTodosLeft);
  fa::throw_if_todos_left("13_hopper", lesson13::kConsumerTodosLeft);
  // Steps 1-3 launch a block per work tile on a (query tiles, heads, batch) grid; step 4's grid is
  // one block per SM, whatever the shape.
  if (step < 4 && (p.heads_q > 65535 || p.batch > 65535))
    throw fa::InvalidArgument("lesson 13_hopper: steps 1-3 need heads_q and batch at most 65535 (grid y, z; step 4 has no such limit)");
  const int sm_count = fa::current_device().sm_count;
  if (trace && p.dtype != fa::DType::kF16) throw fa::InvalidArgument("lesson 13_hopper: the trace runs fp16 only");
  if (trace && consumers == 3)
    throw fa::InvalidArgument(
        "lesson 13_hopper: the traced build has two consumer warpgroups only; this call takes three (head dim 64 on step 4: non-causal, or causal from " +
        std::to_string(kThreeCausalFrom) + " rows): trace --variant step4-2wg");
  auto go = [&](auto step_tag) {
    constexpr int kStep = decltype(step_tag)::value;
    if (trace) {
      if (p.head_dim == 64) launch<__half, 64, kStep, true>(p, consumers, sm_count, max_blocks, stream, *trace);
      else launch<__half, 128, kStep, true>(p, consumers, sm_count, max_blocks, stream, *trace);
    } else if (p.head_dim == 64) {
      FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, 64, kStep, false>(p, consumers, sm_count, max_blocks, stream, {})));
    } else {
      FA_DISPATCH_DTYPE(p.dtype, T, (launch<T, 128, kStep, false>(p, consumers, sm_count, max_blocks, stream, {})));
    }
  };
  switch (step) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    case 3: go(std::integral_constant<int, 3>{}); break;
    default: go(std::integral_constant<int, 4>{}); break;
  }
}

void forward(const fa::AttnParams& p, cudaStream_t stream) { run_step(p, kVariants[p.variant], stream); }

// The traced build (fa::Tracer; trace.hpp; two consumer warpgroups): the call's step through the
// traced kernel, its lanes (3 warpgroups a block), and the CSV's label (the step). fa-bench --trace
// writes the records, and plots/plot.py --timeline draws them.
void trace(const fa::AttnParams& p, const fa::TraceSink& sink, cudaStream_t stream) { run_step(p, kVariants[p.variant], stream, &sink); }
int64_t trace_lanes(const fa::AttnParams& p) {
  const StepVariant& v = kVariants[p.variant];
  return 3 * blocks_of(p, rows_of(2), v.step, v.max_blocks, fa::current_device().sm_count);
}
std::string trace_label(const fa::AttnParams& p) { return std::to_string(kVariants[p.variant].step); }

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_13_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_13_declared();

const fa::LessonInfo& fa_lesson_13() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_13_declared();
    l.forward = &forward;
    for (const StepVariant& v : kVariants) l.variants.push_back({v.name, v.about});
    l.max_batch_heads = INT32_MAX;  // TMA's coordinates are 32-bit
    l.tracer = {&trace, &trace_lanes, 3, lesson13::phase_name, 1 << 14, "step", &trace_label, false};
    return l;
  }();
  return info;
}
