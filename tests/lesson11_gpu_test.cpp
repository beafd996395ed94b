// Lesson 11 on the GPU: every variant, so every configuration in tiles.hpp with both dQ strategies
// (fp32 atomics, and the deterministic second pass), not only the ones this GPU uses, against the
// fp64 reference gradients. The backward suite covers the chosen configuration in depth.
#include <doctest/doctest.h>

#include "check.hpp"
#include "tiles.hpp"

TEST_CASE("lesson11: every tile configuration and both dQ strategies match the reference") {
  // The variants: config_for's choice with each dQ strategy, then every line of kConfigs with each.
  REQUIRE(fa::test::lesson_under_test().variants.size() == size_t(2 + 2 * lesson11::kNumConfigs));
  fa::test::check_every_variant(fa::test::variant_cases({64, 128}), fa::test::Direction::kBackward);
}
