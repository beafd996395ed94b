// Lesson 14's timelines (README, "How to profile"): a traced build of the kernel (the same code,
// instantiated with kTrace; fp16, the default dQ mode) records the SM's clock each time a
// recording thread changes phase (fa/trace.hpp). Five recording threads a block, lane = block x 5
// + role: the producer's thread (role 0), thread 0 of each consumer warpgroup (1 and 2), lane 0 of
// each dQ writer warp (3: warpgroup 1's, 4: warpgroup 2's). fa-bench --bwd --trace FILE writes them.
#pragma once

#include "fa/trace.hpp"

namespace lesson14 {

constexpr int kTraceRoles = 5;

// What a recording thread does from its record's clock until its next record's; `key` is the
// query tile's index among every (batch, query head, query tile), low 31 bits, where a phase is
// about one.
namespace phase {
enum : int {
  kSetup,         // block start: barriers, registers (setmaxnreg); consumers: K and V loaded
  kWaitTile,      // consumer: waits for the tile's Q, dO, LSE2, D (full[s]) (key: the tile)
  kIssueSdP,      // consumer: loads LSE2, issues S^T and dP^T
  kWaitS,         // consumer: waits for S^T
  kExp,           // consumer: P^T = exp2(...), masked where needed
  kWaitDp,        // consumer: waits for dP^T
  kDs,            // consumer: loads D, dS^T = P^T (dP^T - D), packs P^T and dS^T
  kIssueDvStore,  // consumer: issues dV, stores dS^T
  kBarrier,       // consumer: proxy fence and the barrier on dS^T
  kIssueDqDk,     // consumer: issues dQ and dK
  kWaitDvDq,      // consumer: waits for dV and dQ
  kDqOut,         // consumer: dQ's share out (staged for the writer, or atomics)
  kWaitDk,        // consumer: waits for dK, releases the stage
  kEpilogue,      // consumer: dK and dV to global memory
  kWaitEmpty,     // producer: waits until the tile's stage is free (empty[s]) (key: the tile)
  kCopy,          // producer: issues the tile's copies (key: the tile)
  kWaitShare,     // writer: waits for the tile's staged dQ share (dq_full) (key: the tile)
  kReduce,        // writer: issues the bulk reduce-add (key: the tile)
  kWaitRead,      // writer: waits until the reduce has read the buffer, frees it
  kExit,          // the thread is done
  kCount
};
}  // namespace phase

inline const char* phase_name(int p) {
  static const char* const names[phase::kCount] = {
      "setup",    "wait_tile", "issue_s_dp", "wait_s",    "exp",        "wait_dp", "ds",          "issue_dv_store_ds", "barrier", "issue_dq_dk",
      "wait_dv_dq", "dq_out",  "wait_dk",    "epilogue",  "wait_empty", "copy",    "wait_share",  "reduce",            "wait_read", "exit"};
  return p >= 0 && p < phase::kCount ? names[p] : "?";
}

}  // namespace lesson14
