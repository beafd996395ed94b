// Lesson 12 on the GPU: every variant against the fp64 reference, forward and backward (the suites
// run the default in depth): the forward's query tiles in packed order instead of heaviest first,
// and the backward's dQ by the second pass instead of atomics. On dense cases, and on the packed
// batches and the gate, where the order of the tiles is a map the kernel reads.
#include <doctest/doctest.h>

#include <vector>

#include "check.hpp"

namespace {

// The small dense cases, and per head dim and dtype a packed batch (an empty sequence, lengths on
// and off the tile edges, grouped-query heads) causal and not, and the same batch with the gate.
std::vector<fa::test::Case> cases() {
  std::vector<fa::test::Case> all = fa::test::variant_cases({64, 128});
  for (int d : {64, 128})
    for (fa::DType t : {fa::DType::kF16, fa::DType::kBF16})
      for (int mode = 0; mode < 3; ++mode) {
        fa::test::Case c;
        c.set_lengths({1, 130, 0, 257, 64}, {1, 130, 7, 200, 129});
        c.heads_q = 4;
        c.heads_kv = 2;
        c.head_dim = d;
        c.dtype = t;
        c.causal = mode > 0;
        c.gate = mode == 2;
        all.push_back(c);
      }
  return all;
}

}  // namespace

TEST_CASE("lesson12: every variant matches the reference, forward and backward") {
  const std::vector<fa::test::Case> all = cases();
  fa::test::check_every_variant(all, fa::test::Direction::kForward);
  fa::test::check_every_variant(all, fa::test::Direction::kBackward);
}
