// Lesson 13's timelines: a traced build of the kernel (the same code, instantiated with kTrace)
// records the SM's clock each time a warpgroup changes phase (fa/trace.hpp). Thread 0 of each warpgroup writes
// the records: the producer's loop, and warp 0 of each consumer warpgroup (its other three warps
// run the same code a few cycles apart). The README's timeline pictures come from these records
// (fa-bench --trace, "How to profile"); the lesson's GPU test checks that they account for every
// work tile and key tile.
#pragma once

#include "fa/trace.hpp"

namespace lesson13 {

// What a warpgroup does from its record's clock until its next record's.
namespace phase {
enum : int {
  kSetup,       // block start: barriers, registers (setmaxnreg)
  kRendezvous,  // the named barrier between work tiles (producer and consumers)
  kWaitQ,       // consumer: waits for the work tile's Q (key: the work tile's number, low 31 bits)
  kWaitKV,      // consumer: waits for key tile `key`'s K and V (full[s])
  kWaitTurn,    // consumer: waits for its turn at the tensor cores (ping-pong, steps 3-4)
  kIssue,       // consumer: issues wgmma (S = Q K^T of key tile `key`, and the previous tile's P V)
  kWaitS,       // consumer: waits for S of key tile `key`
  kSoftmax,     // consumer: the mask and the online softmax of key tile `key`
  kWaitPV,      // consumer: waits for a P V (of key tile `key`)
  kRescale,     // consumer: rescales O, packs P, releases the stage
  kEpilogue,    // consumer: O / l and the LSE to global memory
  kCopyQ,       // producer: issues the work tile's Q copy (key: the work tile's number)
  kWaitEmpty,   // producer: waits until the stage for key tile `key` is free (empty[s])
  kCopyKV,      // producer: issues key tile `key`'s K and V copies
  kExit,        // the warpgroup is done
  kCount
};
}  // namespace phase

inline const char* phase_name(int p) {
  static const char* const names[phase::kCount] = {"setup", "rendezvous", "wait_q", "wait_kv", "wait_turn",
                                                   "issue",  "wait_s",     "softmax", "wait_pv", "rescale",
                                                   "epilogue", "copy_q",   "wait_empty", "copy_kv", "exit"};
  return p >= 0 && p < phase::kCount ? names[p] : "?";
}

// The records, the sink and a lane read back are the course's (fa/trace.hpp): lane = block x 3 +
// warpgroup (0: producer, 1 and 2: consumer warpgroups).
using fa::TraceEvent;
using fa::TraceLane;
using fa::TraceSink;

}  // namespace lesson13
