// Lesson 08 on the GPU: every configuration in tiles.hpp (the lesson's variants config0 ..), not
// only the one this GPU uses, against the fp64 reference (the forward suite covers the chosen ones
// in depth). A configuration that is wrong would otherwise wait, untested, for the GPU that picks it.
#include <doctest/doctest.h>

#include "check.hpp"
#include "tiles.hpp"

TEST_CASE("lesson08: every tile configuration matches the reference") {
  // The variants: config_for's choice, then every line of kConfigs.
  REQUIRE(fa::test::lesson_under_test().variants.size() == size_t(1 + lesson08::kNumConfigs));
  fa::test::check_every_variant(fa::test::variant_cases({64, 128}));
}
