// Seeded random inputs. The generator is our own (splitmix64 + Box-Muller) so a seed gives the
// same tensors on every platform; std::normal_distribution does not promise that.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fa {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double uniform();  // [0, 1)
  double normal();
  int uniform_int(int lo, int hi);  // [lo, hi]
 private:
  uint64_t state_;
  bool have_spare_ = false;
  double spare_ = 0;
};

// The seed for a named case: FA_TEST_SEED (instructors keep theirs secret) mixed with the name.
uint64_t base_seed();
uint64_t seed_for(const std::string& case_name);

}  // namespace fa
