// The host side of the traced builds (fa::Tracer, fa/trace.hpp): a traced call's records, and the
// CSV plots/plot.py draws. fa-bench --trace and the lessons' GPU tests use it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fa/params.hpp"
#include "fa/trace.hpp"

namespace fa {

// Runs the (validated) call `p` through `lesson`'s traced build with room for `capacity` records in
// each lane, waits for the stream and reads every lane back. Throws, naming the lesson and
// `capacity_setting` (what sets the capacity: "fa-bench --trace-events", ...), if lanes x capacity
// is 2^31 or more (kernels index the records with 32-bit integers), if a lane never recorded its
// last mark, or if a lane recorded more than `capacity` (none is dropped silently).
std::vector<TraceLane> run_traced(const LessonInfo& lesson, const AttnParams& p, int capacity, const std::string& capacity_setting,
                                  cudaStream_t stream = nullptr);

// Writes the records of the lanes that ran on SMs 0 .. max_sm - 1 to `path` as CSV, one row a
// record: `<label column>,sm,block,role,clock,phase,key`, the label column holding `label` in every
// row and the phase written by its name.
void write_trace_csv(const std::string& path, const std::vector<TraceLane>& lanes, int max_sm, const char* label_column,
                     const std::string& label, const char* (*phase_name)(int));

}  // namespace fa
