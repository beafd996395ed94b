// Timelines of a kernel's warps (lessons 13 and 14): a traced build of a kernel (the same code,
// instantiated with its kTrace parameter on) records the SM's clock each time a recording thread
// changes phase. A *lane* is one recording thread, `roles` of them a block (lesson 13: the producer
// and two consumer warpgroups; lesson 14 also its two dQ writers): lane = block x roles + role.
// Each lesson names its phases and declares its traced build (fa::Tracer, fa/params.hpp); this file
// holds the records every traced lesson shares. The device side is fa/trace.cuh (trace_mark,
// compiled away when the trace is off); the host side (the sink's buffers, the read-back, the CSV)
// is the tools' (tools/trace_host.hpp).
#pragma once

#include <cstdint>
#include <vector>

namespace fa {

struct TraceEvent {
  long long clock;  // the SM's cycle counter (clock64): comparable between blocks of one SM only
  int phase;        // the lesson's phase number
  int key;          // the tile (or work tile) the phase is about, low 31 bits; else 0
};

// Where a traced kernel writes: lane l owns events[l * capacity ...]; counts[l] is how many it
// recorded (it keeps counting past capacity, so an overflow is seen, not lost) and sms[l] the SM
// it ran on. Device pointers.
struct TraceSink {
  TraceEvent* events = nullptr;
  int* counts = nullptr;
  int* sms = nullptr;
  int capacity = 0;
};

// One lane, as the host reads it back.
struct TraceLane {
  int64_t block = 0;
  int role = 0;
  int sm = 0;
  std::vector<TraceEvent> events;
};

}  // namespace fa
