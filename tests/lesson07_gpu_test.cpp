// Lesson 07's warm-up on the GPU: one warp, C = A B^T and E = A B for 16 x 16 tiles, against the
// same products on the CPU. The products of 16-bit values are exact in fp32 and 16 terms are
// summed, so the only difference is the order of the fp32 additions: 1e-5 relative is ample, and
// any fragment mix-up (a wrong row, column or register) moves an element by O(1).
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>
#include <string>
#include <vector>

#include "fa/buffer.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/params.hpp"
#include "fa/random.hpp"

void fa_lesson07_warmup(fa::DType t, const void* A, const void* B, float* C, float* E, cudaStream_t stream);

TEST_CASE("lesson07: warm-up, one warp computes A B^T and A B with ldmatrix and mma.sync") {
  for (fa::DType t : {fa::DType::kF16, fa::DType::kBF16}) {
    fa::Rng rng(fa::seed_for(std::string("lesson07 warm-up ") + fa::name(t)));
    std::vector<uint16_t> a(256), b(256);
    std::vector<double> av(256), bv(256);
    for (int i = 0; i < 256; ++i) {
      a[i] = fa::to_storage(t, rng.normal());
      b[i] = fa::to_storage(t, rng.normal());
      av[i] = fa::from_storage(t, a[i]);
      bv[i] = fa::from_storage(t, b[i]);
    }
    fa::Buffer da(fa::Memory::kDevice, 512, "A"), db(fa::Memory::kDevice, 512, "B");
    fa::Buffer dc(fa::Memory::kDevice, 1024, "C"), de(fa::Memory::kDevice, 1024, "E");
    da.upload(a.data(), 512);
    db.upload(b.data(), 512);
    dc.poison();
    de.poison();
    try {
      fa_lesson07_warmup(t, da.data(), db.data(), static_cast<float*>(dc.data()), static_cast<float*>(de.data()), nullptr);
    } catch (const fa::NotImplemented& e) {
      FAIL(std::string(e.what()));
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    dc.check_guards();
    de.check_guards();
    const std::vector<float> c = dc.to_host<float>(), e = de.to_host<float>();
    int bad = 0;
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        double want_c = 0, want_e = 0;
        for (int k = 0; k < 16; ++k) {
          want_c += av[i * 16 + k] * bv[j * 16 + k];
          want_e += av[i * 16 + k] * bv[k * 16 + j];
        }
        for (auto [got, want, what] : {std::tuple{c[i * 16 + j], want_c, "C = A B^T"}, std::tuple{e[i * 16 + j], want_e, "E = A B"}}) {
          if (!(std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want)))) {
            if (bad++ < 5)
              MESSAGE("MISMATCH ", fa::name(t), " ", what, " at (", i, ", ", j, "): got ", got, ", want ", want);
          }
        }
      }
    CHECK_MESSAGE(bad == 0, bad, " of 512 warm-up elements wrong (", fa::name(t), ")");
  }
}
