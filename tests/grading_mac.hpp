// The grader's result line: how a graded test proves it ran to the end (tests/test_main.cpp writes
// it, tools/fa_grade.cpp checks it). fa-grade draws a fresh random 128-bit key for every grading
// and hands it to the tests in FA_GRADE_KEY; the test main reads it first thing in main() (and wipes
// it from the environment), runs doctest, and only after doctest's run has returned prints one line
//   FA_GRADE_RESULT v1 run=1 failed=0 asserts=12 asserts_failed=0 exit=0 mac=<16 hex> case=<name>
// whose mac is SipHash-2-4 under that key of everything before it. A test that exits early (a
// static initializer calling exit(0)), prints doctest's success line or a made-up result line,
// never prints a line with the right mac, and the grader counts it failed whatever its exit code
// and output say. Code that runs in the same process can still read the key (README, "For
// instructors", says what that leaves open and what would close it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fa::grading {

constexpr const char* kKeyEnv = "FA_GRADE_KEY";
constexpr const char* kResultTag = "FA_GRADE_RESULT v1 ";

// SipHash-2-4 (Aumasson and Bernstein): a keyed 64-bit MAC.
inline uint64_t siphash24(const uint8_t key[16], const std::string& msg) {
  auto load64 = [](const uint8_t* p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; --i) x = (x << 8) | p[i];
    return x;
  };
  auto rotl = [](uint64_t x, int b) { return (x << b) | (x >> (64 - b)); };
  const uint64_t k0 = load64(key), k1 = load64(key + 8);
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  auto round = [&]() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  };
  const auto* p = reinterpret_cast<const uint8_t*>(msg.data());
  const size_t n = msg.size(), whole = n - n % 8;
  for (size_t i = 0; i < whole; i += 8) {
    const uint64_t m = load64(p + i);
    v3 ^= m; round(); round(); v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(n & 0xff) << 56;
  for (size_t i = whole; i < n; ++i) last |= static_cast<uint64_t>(p[i]) << (8 * (i - whole));
  v3 ^= last; round(); round(); v0 ^= last;
  v2 ^= 0xff;
  round(); round(); round(); round();
  return v0 ^ v1 ^ v2 ^ v3;
}

// A key is 32 hex digits; false for anything else.
inline bool parse_key(const std::string& hex, uint8_t key[16]) {
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    for (int j = 0; j < 2; ++j) {
      const char c = hex[2 * i + j];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else return false;
    }
    key[i] = static_cast<uint8_t>(v);
  }
  return true;
}

inline std::string mac_hex(const uint8_t key[16], const std::string& msg) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(siphash24(key, msg)));
  return buf;
}

// The line for a test case that ran: the fields, then the mac of "<fields> case=<name>".
inline std::string result_line(const uint8_t key[16], const std::string& fields, const std::string& name) {
  return std::string(kResultTag) + fields + " mac=" + mac_hex(key, fields + " case=" + name) + " case=" + name;
}

}  // namespace fa::grading
