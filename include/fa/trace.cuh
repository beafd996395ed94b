// The device side of fa/trace.hpp: a recording thread's mark. Compiled away unless kOn.
#pragma once

#include <climits>
#include <cstdint>

#include "fa/hopper.cuh"  // sm_id
#include "fa/trace.hpp"

namespace fa {

// Records (the SM's clock, phase, key) as lane `lane`'s n-th event, then n + 1; `last` (the lane's
// final mark) also stores the count and the SM. 32-bit indices: run_traced checks lanes x capacity.
template <bool kOn>
__device__ __forceinline__ void trace_mark(const TraceSink& sink, int lane, int& n, int phase, int64_t key, bool last) {
  if constexpr (kOn) {
    if (n < sink.capacity) sink.events[lane * sink.capacity + n] = {clock64(), phase, int(key & INT_MAX)};
    ++n;
    if (last) {
      sink.counts[lane] = n;
      sink.sms[lane] = sm_id();
    }
  } else {
    (void)sink, (void)lane, (void)n, (void)phase, (void)key, (void)last;
  }
}

}  // namespace fa
