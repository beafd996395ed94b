// A naive forward written like a kernel (fp32 scores, exp and sums, tiles of 64 keys), with one
// deliberate bug chosen at run time by FA_MUTANT. Each bug is one the shared forward suite exists
// to catch; maintainers/run_mutant.sh passes only when the suite rejects it by a numerical failure, and
// FA_MUTANT=none (the correct model) must pass. Lesson issues add mutants of their own kernels.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "fa/half.hpp"
#include "fa/host_tensor.hpp"
#include "fa/params.hpp"

namespace {

enum class Mutant {
  kNone,
  kNoMaxSubtraction,   // p = exp(s): overflows fp32 at logits ~ 89
  kMaxStartsAtZero,    // running max initialised to 0, not -inf: rows of very negative logits underflow
  kCausalOffByOne,     // j < i + (sk - sq): the diagonal is masked
  kCausalTopLeft,      // j <= i: the mask ignores seqlen_k - seqlen_q
  kDropsTailTile,      // only whole tiles of 64 keys: the tail is never seen
  kWrongHeadOffset,    // every head reads head 0's K and V
  kUnnormalised,       // O = sum_j p_j v_j, never divided by l
  kLseNotStored,       // the LSE is never written
  kNoInfGuard,         // a fully masked row computes exp(-inf - -inf) = NaN
  kExpWithLog2Scale,   // exp2 used on natural-log logits (log2(e) not folded in)
};

Mutant chosen() {
  const char* s = std::getenv("FA_MUTANT");
  const std::string m = s ? s : "none";
  const std::pair<const char*, Mutant> table[] = {
      {"none", Mutant::kNone},
      {"no_max_subtraction", Mutant::kNoMaxSubtraction},
      {"max_starts_at_zero", Mutant::kMaxStartsAtZero},
      {"causal_off_by_one", Mutant::kCausalOffByOne},
      {"causal_top_left", Mutant::kCausalTopLeft},
      {"drops_tail_tile", Mutant::kDropsTailTile},
      {"wrong_head_offset", Mutant::kWrongHeadOffset},
      {"unnormalised", Mutant::kUnnormalised},
      {"lse_not_stored", Mutant::kLseNotStored},
      {"no_inf_guard", Mutant::kNoInfGuard},
      {"exp_with_log2_scale", Mutant::kExpWithLog2Scale},
  };
  for (const auto& [name, value] : table)
    if (m == name) return value;
  throw std::invalid_argument("unknown FA_MUTANT " + m);
}

void forward(const fa::AttnParams& p, cudaStream_t) {
  const Mutant mut = chosen();
  constexpr int kTile = 64;
  const float inf = std::numeric_limits<float>::infinity();
  const int group = p.heads_q / p.heads_kv;
  auto* o = static_cast<uint16_t*>(p.o);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = mut == Mutant::kWrongHeadOffset ? 0 : h / group;
      const std::vector<float> Q = fa::read_head(p.q, p.q_stride, p.dtype, b, h, p.seqlen_q, p.head_dim);
      const std::vector<float> K = fa::read_head(p.k, p.k_stride, p.dtype, b, hk, p.seqlen_k, p.head_dim);
      const std::vector<float> V = fa::read_head(p.v, p.v_stride, p.dtype, b, hk, p.seqlen_k, p.head_dim);
      for (int i = 0; i < p.seqlen_q; ++i) {
        int nk = p.seqlen_k;
        if (mut == Mutant::kDropsTailTile) nk = nk / kTile * kTile;
        std::vector<float> s(nk);
        float m = mut == Mutant::kMaxStartsAtZero ? 0.f : -inf;
        for (int j = 0; j < nk; ++j) {
          const int last = i + p.seqlen_k - p.seqlen_q;  // last visible key
          bool vis = !p.causal || j <= last;
          if (p.causal && mut == Mutant::kCausalOffByOne) vis = j < last;
          if (p.causal && mut == Mutant::kCausalTopLeft) vis = j <= i;
          float dot = 0.f;
          for (int d = 0; d < p.head_dim; ++d) dot += Q[size_t(i) * p.head_dim + d] * K[size_t(j) * p.head_dim + d];
          s[j] = vis ? p.scale * dot : -inf;
          m = std::max(m, s[j]);
        }
        const bool masked = m == -inf && mut != Mutant::kNoInfGuard;
        float l = 0.f;
        std::vector<float> acc(p.head_dim, 0.f);
        if (!masked) {
          for (int j = 0; j < nk; ++j) {
            const float x = mut == Mutant::kNoMaxSubtraction ? s[j] : s[j] - m;
            const float e = mut == Mutant::kExpWithLog2Scale ? std::exp2(x) : std::exp(x);
            l += e;
            for (int d = 0; d < p.head_dim; ++d) acc[d] += e * V[size_t(j) * p.head_dim + d];
          }
        }
        const float norm = (masked || mut == Mutant::kUnnormalised) ? 1.f : 1.f / l;
        for (int d = 0; d < p.head_dim; ++d)
          o[b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row + d] = fa::to_storage(p.dtype, acc[d] * norm);
        if (mut != Mutant::kLseNotStored) {
          const float lse = masked ? inf : (mut == Mutant::kNoMaxSubtraction ? std::log(l) : m + std::log(l));
          p.lse[(static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i] = lse;
        }
      }
    }
}

}  // namespace

const fa::LessonInfo& fa_mutant_naive() {
  static const fa::LessonInfo info =
      fa::cpu_model("mutant_naive", "naive fp32 model with one bug chosen by FA_MUTANT", &forward);
  return info;
}
