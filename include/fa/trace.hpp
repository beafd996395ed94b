// Timelines of a kernel's warps (lessons 13 and 14): a traced build of a kernel (the same code,
// instantiated with its kTrace parameter on) records the SM's clock each time a recording thread
// changes phase. A *lane* is one recording thread, `roles` of them a block (lesson 13: the producer
// and two consumer warpgroups; lesson 14 also its two dQ writers): lane = block x roles + role.
// Each lesson names its phases; this file holds what every traced lesson shares: the records, the
// device side (fa/trace.cuh: trace_mark, compiled away when the trace is off), and the host side
// (runtime/trace.cpp): buffers, the launch, the checks and the CSV.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
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

// Runs `launch(sink)` with room for `capacity` records in each of `lanes` lanes (`roles` a block),
// waits for the stream and reads every lane back. Throws, naming `who` and the setting that gave
// the capacity (`capacity_setting`, an environment variable), if lanes x capacity is 2^31 or more
// (kernels index the records with 32-bit integers), if a lane never recorded its last mark, or if
// a lane recorded more than `capacity` (none is dropped silently).
std::vector<TraceLane> run_traced(const std::string& who, int64_t lanes, int roles, int capacity, const std::string& capacity_setting,
                                  cudaStream_t stream, const std::function<void(const TraceSink&)>& launch);

// Writes the records of the lanes that ran on SMs 0 .. max_sm - 1 to `path` as CSV, one row a
// record: `<label column>,sm,block,role,clock,phase,key`, the label column holding `label` in
// every row and the phase written as phase_name(phase). plots/plot.py draws them.
void write_trace_csv(const std::string& who, const std::string& path, const std::vector<TraceLane>& lanes, int max_sm,
                     const std::string& label_column, const std::string& label, const char* (*phase_name)(int));

// A lesson's FILE=... trace setting, the same for every traced lesson: `<setting>=FILE` (read by the
// lesson) runs `launch` through run_traced with `<setting>_EVENTS` records a lane (default
// `events`) and writes the lanes that ran on SMs 0 .. `<setting>_SMS` - 1 (default 2) to FILE
// with write_trace_csv. Throws, naming `who`, on a malformed setting.
void trace_to_csv(const std::string& who, const std::string& setting, const std::string& path, int events, int64_t lanes, int roles,
                  const std::string& label_column, const std::string& label, const char* (*phase_name)(int), cudaStream_t stream,
                  const std::function<void(const TraceSink&)>& launch);

// An integer setting from the environment (`fallback` when unset); throws, naming `who`, if it is
// not an integer >= lo.
int env_int(const std::string& who, const char* name, int fallback, int lo);

}  // namespace fa
