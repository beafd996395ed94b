// TMA's tensor maps, built on the host (lessons 13 and later). cuTensorMapEncodeTiled lives in the
// driver (libcuda); the course links only the runtime, so it is fetched from the driver at run
// time: linked against libcuda, every test binary would fail to load on a machine without a
// driver (CI), where the build lists the tests by running them.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (the header only)

#include "fa/params.hpp"

namespace fa {

// A 3-D map over a contiguous (bh, seqlen, d) tensor of 16-bit values: boxes of 64 columns x `rows`
// rows of one slice (one batch and head), 128-byte swizzled (lesson 13's wgmma.hpp draws it);
// rows past seqlen, and before row 0 (a negative corner), read as zeros. `who` names the lesson in
// errors.
// The runtime keeps the 32 most recent maps by (ptr, t, bh, seqlen, d, rows) and returns a kept one
// instead of encoding it again.
CUtensorMap make_tensor_map(const char* who, const void* ptr, DType t, int bh, int seqlen, int d, int rows);

// How many maps the runtime has encoded so far (the cache's misses; its test reads it).
long long tensor_maps_encoded();

}  // namespace fa
