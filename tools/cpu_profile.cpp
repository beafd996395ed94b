// fa-cpu-profile: lesson 00's profiling exercise. Times the lesson's naive CPU forward (one batch,
// one head, head_dim 64, fp16 storage) as N doubles, and reports the process's peak memory beside
// the bytes one N x N fp64 matrix needs. Quadratic time and memory are the point of the lesson.
//   fa-cpu-profile [max_n]     (default 4096; each N runs until 0.5 s or 5 runs, median reported)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fa/half.hpp"
#include "fa/params.hpp"
#include "fa/random.hpp"

const fa::LessonInfo& fa_lesson_00();

static double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // Linux reports KiB
}

int main(int argc, char** argv) {
  const int max_n = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int d = 64;
  std::printf("lesson 00 (%s): batch 1, 1 head, head_dim %d, fp16 storage, non-causal\n", fa_lesson_00().title, d);
  std::printf("%8s %12s %10s %16s %18s\n", "N", "median ms", "x prev", "peak RSS MB", "N*N fp64 (MB)");
  double prev = 0;
  fa::Rng rng(1);
  for (int n = 256; n <= max_n; n *= 2) {
    std::vector<uint16_t> q(size_t(n) * d), k(q.size()), v(q.size()), o(q.size());
    std::vector<float> lse(n);
    for (auto* t : {&q, &k, &v})
      for (auto& x : *t) x = fa::float_to_f16(static_cast<float>(rng.normal()));
    fa::AttnParams p;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seqlen_q = p.seqlen_k = n;
    p.head_dim = d;
    p.scale = static_cast<float>(fa::default_scale(d));
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.o = o.data();
    p.lse = lse.data();
    fa::set_contiguous_strides(p);
    std::vector<double> ms;
    double total = 0;
    try {
      while (ms.size() < 5 && (total < 500 || ms.size() < 1)) {
        const auto t0 = std::chrono::steady_clock::now();
        fa::run_forward(fa_lesson_00(), p);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        total += ms.back();
      }
    } catch (const fa::Error& e) {
      std::printf("%s\n", e.what());
      return 1;
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("%8d %12.2f %10s %16.1f %18.1f\n", n, med, prev > 0 ? (std::to_string(med / prev).substr(0, 4) + "x").c_str() : "-",
                peak_rss_mb(), double(n) * n * 8 / 1e6);
    prev = med;
  }
  return 0;
}
