// tools/trace_host.hpp: the traced builds' host side.
#include "trace_host.hpp"

#include <climits>
#include <cstdio>

#include "fa/buffer.hpp"
#include "fa/cuda_check.hpp"

namespace fa {

std::vector<TraceLane> run_traced(const LessonInfo& lesson, const AttnParams& p, int capacity, const std::string& capacity_setting,
                                  cudaStream_t stream) {
  const std::string who = std::string("lesson ") + lesson.id;
  const Tracer& t = lesson.tracer;
  if (t.run == nullptr || t.lanes == nullptr) throw InvalidArgument(who + ": has no traced build");
  const int64_t lanes = t.lanes(p);
  const int roles = t.roles;
  if (capacity < 1) throw InvalidArgument(who + ": the trace needs a capacity >= 1 event per lane");
  if (roles < 1 || lanes % roles != 0) throw InvalidArgument(who + ": trace lanes must be whole blocks of " + std::to_string(roles));
  if (lanes < 1 || capacity > INT_MAX / lanes)
    throw InvalidArgument(who + ": the trace needs " + std::to_string(lanes) + " lanes x " + std::to_string(capacity) +
                          " events, over 2^31 records: trace a smaller problem or lower " + capacity_setting);
  // fa::Buffer: freed on every path, and guarded (a record written past the end is caught).
  Buffer event_buf(Memory::kDevice, sizeof(TraceEvent) * size_t(lanes) * size_t(capacity), who + "'s trace records");
  Buffer count_buf(Memory::kDevice, sizeof(int) * size_t(lanes), who + "'s trace counts");
  Buffer sm_buf(Memory::kDevice, sizeof(int) * size_t(lanes), who + "'s trace SMs");
  // 0xFF bytes: -1, a lane that never recorded its last mark; on the kernel's stream, before it.
  FA_CUDA_CHECK(cudaMemsetAsync(count_buf.data(), 0xFF, count_buf.bytes(), stream));
  const TraceSink sink{static_cast<TraceEvent*>(event_buf.data()), static_cast<int*>(count_buf.data()),
                       static_cast<int*>(sm_buf.data()), capacity};
  t.run(p, sink, stream);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (const Buffer* b : {&event_buf, &count_buf, &sm_buf}) b->check_guards();
  const std::vector<TraceEvent> events = event_buf.to_host<TraceEvent>();
  const std::vector<int> counts = count_buf.to_host<int>(), sms = sm_buf.to_host<int>();
  std::vector<TraceLane> out(static_cast<size_t>(lanes));
  for (int64_t i = 0; i < lanes; ++i) {
    const int n = counts[size_t(i)];
    if (n < 0) throw Error(who + ": trace lane " + std::to_string(i) + " never reached its end");
    if (n > capacity)
      throw Error(who + ": block " + std::to_string(i / roles) + ", role " + std::to_string(i % roles) + " recorded " +
                  std::to_string(n) + " trace events, more than the capacity of " + std::to_string(capacity) + " (raise " +
                  capacity_setting + ")");
    TraceLane& l = out[size_t(i)];
    l.block = i / roles;
    l.role = int(i % roles);
    l.sm = sms[size_t(i)];
    l.events.assign(events.begin() + i * capacity, events.begin() + i * capacity + n);
  }
  return out;
}

void write_trace_csv(const std::string& path, const std::vector<TraceLane>& lanes, int max_sm, const char* label_column,
                     const std::string& label, const char* (*phase_name)(int)) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error("cannot write the trace to '" + path + "'");
  std::fprintf(f, "%s,sm,block,role,clock,phase,key\n", label_column);
  for (const TraceLane& l : lanes)
    if (l.sm < max_sm)
      for (const TraceEvent& e : l.events)
        std::fprintf(f, "%s,%d,%lld,%d,%lld,%s,%d\n", label.c_str(), l.sm, static_cast<long long>(l.block), l.role, e.clock,
                     phase_name(e.phase), e.key);
  if (std::fclose(f) != 0) throw Error("writing the trace to '" + path + "' failed");
}

}  // namespace fa
