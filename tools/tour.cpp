// fa-tour: the course's main program. For now it runs lesson 00 (your lessons/ or the solutions,
// whichever the build uses) against the fp64 reference and shows the memory wall that the rest of
// the course climbs. Later lessons add their kernels, timed, to this tour.
#include <chrono>
#include <cstdio>
#include <string>

#include "fa/params.hpp"
#include "support.hpp"

const fa::LessonInfo& fa_lesson_00();

int main() {
  std::printf("FlashAttention from scratch in CUDA C++: the tour\n\n");
  std::printf("1. Lesson 00 (%s) against the fp64 reference\n", fa_lesson_00().title);
  int failures = 0;
  for (const bool causal : {false, true})
    for (const fa::DType t : {fa::DType::kF16, fa::DType::kBF16}) {
      fa::test::Case c;
      c.batch = 2;
      c.heads_q = c.heads_kv = 4;
      c.seqlen_q = c.seqlen_k = 512;
      c.head_dim = 64;
      c.dtype = t;
      c.causal = causal;
      const auto start = std::chrono::steady_clock::now();
      const fa::test::Outcome out = fa::test::check_forward(fa_lesson_00(), c);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("   %-4s %-10s batch 2, 4 heads, N = 512, d = 64: %s (%.0f ms with the check)\n", fa::name(t),
                  causal ? "causal" : "non-causal", out.ok ? "matches" : "FAILS", ms);
      if (!out.ok) {
        std::printf("   %s\n", out.text.c_str());
        ++failures;
      }
      if (out.not_implemented) break;
    }
  std::printf("\n2. The memory wall: one head's S (or P) matrix in fp16, N x N x 2 bytes\n");
  std::printf("   %8s %14s %12s %14s\n", "N", "S per head", "x H200 L2", "% of 141 GB");
  for (long n = 1024; n <= 131072; n *= 2) {
    const double bytes = double(n) * n * 2;
    std::printf("   %8ld %11.1f MB %11.2fx %13.2f%%\n", n, bytes / 1e6, bytes / 50e6, 100.0 * bytes / 141e9);
  }
  std::printf("   (batch 1 x 32 heads at N = 128k would need %.0f GB for S alone: FlashAttention never stores it)\n",
              32.0 * 131072.0 * 131072.0 * 2 / 1e9);
  std::printf("\n%s\n", failures ? "Lesson 00 does not pass yet: see lessons/00_reference/README.md"
                                 : "All checks passed. Next: lessons/00_reference/README.md, then lesson 01.");
  return failures ? 1 : 0;
}
