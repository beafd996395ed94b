#include <cmath>
#include <cstdlib>
#include <string>

#include "fa/random.hpp"

namespace fa {

uint64_t Rng::next_u64() {  // splitmix64
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  have_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

int Rng::uniform_int(int lo, int hi) {
  return lo + static_cast<int>(next_u64() % static_cast<uint64_t>(hi - lo + 1));
}

uint64_t base_seed() {
  const char* s = std::getenv("FA_TEST_SEED");
  return (s != nullptr && *s != '\0') ? std::strtoull(s, nullptr, 0) : 20261121ull;
}

uint64_t seed_for(const std::string& case_name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, mixed with the base seed
  for (unsigned char c : case_name) h = (h ^ c) * 1099511628211ull;
  Rng mix(h ^ base_seed());
  return mix.next_u64();
}

}  // namespace fa
