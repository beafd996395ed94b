#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "fa/cuda_check.hpp"
#include "fa/params.hpp"

namespace fa {

double default_scale(int head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

namespace {
// Every tensor's strides: packed (total, heads, head_dim) when varlen, else (batch, heads, seqlen,
// head_dim), or (batch, seqlen, heads, head_dim) when bshd. O, dO and dQ as Q; dK, dV and V as K.
void set_strides(AttnParams& p, bool varlen, bool bshd) {
  const int d = p.head_dim;
  auto of = [&](int heads, int seqlen) {
    if (varlen) return Strides{0, d, int64_t(heads) * d};
    if (bshd) return Strides{int64_t(seqlen) * heads * d, d, int64_t(heads) * d};
    return Strides{int64_t(heads) * seqlen * d, int64_t(seqlen) * d, d};
  };
  p.q_stride = p.o_stride = p.do_stride = p.dq_stride = of(p.heads_q, p.seqlen_q);
  p.k_stride = p.v_stride = p.dk_stride = p.dv_stride = of(p.heads_kv, p.seqlen_k);
}

// A TODO's number: "TODO(n) in <file>: ..." (an entry without one counts as last).
int todo_number(const char* todo) {
  int n = 0;
  return std::sscanf(todo, "TODO(%d)", &n) == 1 ? n : INT_MAX;
}
}  // namespace

void set_contiguous_strides(AttnParams& p) { set_strides(p, p.is_varlen(), false); }

AttnParams params_for(const Problem& prob) {
  AttnParams p;
  p.batch = prob.batch;
  p.heads_q = prob.heads_q;
  p.heads_kv = prob.heads_kv;
  p.seqlen_q = prob.seqlen_q;
  p.seqlen_k = prob.seqlen_k;
  p.head_dim = prob.head_dim;
  p.dtype = prob.dtype;
  p.causal = prob.causal;
  p.scale = static_cast<float>(prob.softmax_scale());
  if (prob.varlen()) {
    p.total_q = prob.total_q();
    p.total_k = prob.total_k();
  }
  set_strides(p, prob.varlen(), prob.bshd);
  return p;
}

void throw_if_todos_left(const char* lesson_id, const TodoList& todos) {
  if (todos.empty()) return;
  std::string nn(lesson_id, std::string(lesson_id).find('_') == std::string::npos ? 0 : 2);
  std::ostringstream os;
  // The lowest number left, whatever the list's order: a file lists its TODOs as they appear in
  // it, and a kernel written before its helpers has a higher number first.
  const std::string todo = *std::min_element(todos.begin(), todos.end(),
                                             [](const char* a, const char* b) { return todo_number(a) < todo_number(b); });
  os << "lesson " << (nn.empty() ? std::string(lesson_id) : nn) << " not implemented yet: " << todo << "  (";
  if (todos.size() > 1) os << todos.size() - 1 << " more TODO(s) after this one; ";
  // How to mark it done: the skeleton writes "TODO(n) in <file>: ..."; a .cpp or .cu file lists its
  // TODOs in kTodosLeft, a header in k<Name>TodosLeft (e.g. kTilesTodosLeft in tiles.hpp).
  os << "when you have written it, delete its line from ";
  const size_t in = todo.find(" in "), colon = todo.find(':');
  if (todo.rfind("TODO(", 0) == 0 && in != std::string::npos && colon != std::string::npos && in < colon) {
    const std::string file = todo.substr(in + 4, colon - in - 4);
    const size_t dot = file.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : file.substr(dot);
    os << (ext == ".cpp" || ext == ".cu" ? "kTodosLeft" : "the TodosLeft list") << " in " << file << ")";
  } else {
    os << "kTodosLeft)";
  }
  throw NotImplemented(os.str());
}

void throw_if_todos_left(const char* lesson_id, std::initializer_list<const TodoList*> lists) {
  TodoList all;
  for (const TodoList* l : lists) all.insert(all.end(), l->begin(), l->end());
  throw_if_todos_left(lesson_id, all);
}

LessonInfo cpu_model(const char* id, const char* title, ForwardFn forward) {
  LessonInfo l;
  l.id = id;
  l.title = title;
  l.memory = Memory::kHost;
  l.features.fp16 = l.features.bf16 = true;
  l.features.causal = l.features.seqlen_q_ne_k = l.features.gqa = l.features.any_strides = true;
  l.features.index64 = true;  // host code indexes with size_t and int64 strides
  l.forward = forward;
  return l;
}

namespace {
// The GPU a lesson needs (LessonInfo::needs_sm: wgmma, TMA and setmaxnreg exist on sm_90a alone).
void check_gpu(const LessonInfo& lesson) {
  if (lesson.needs_sm == 0) return;
  const DeviceInfo& dev = current_device();
  if (dev.sm != lesson.needs_sm)
    throw Error(std::string("lesson ") + lesson.id + ": needs " + (lesson.needs_sm == 90 ? "a Hopper GPU (sm_90a)" : "sm_" + std::to_string(lesson.needs_sm)) +
                "; this one is sm_" + std::to_string(dev.sm));
}
}  // namespace

void run_forward(const LessonInfo& lesson, const AttnParams& p, cudaStream_t stream) {
  validate_forward(lesson, p);
  if (lesson.forward == nullptr)
    throw NotImplemented(std::string("lesson ") + lesson.id + " has no forward entry point");
  check_gpu(lesson);
  lesson.forward(p, stream);
}

void run_backward(const LessonInfo& lesson, const AttnParams& p, cudaStream_t stream) {
  validate_backward(lesson, p);
  check_gpu(lesson);
  lesson.backward(p, stream);
}

}  // namespace fa
