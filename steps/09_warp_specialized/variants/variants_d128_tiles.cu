// variants_d128_tiles.cu — step 09's kernel at head dim 128 with other K/V tiles and rings
// (every technique on).
#include <cuda_bf16.h>

#include "make_variant.cuh"

namespace fa::step09 {

void add_d128_tile_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  //                                  d  C    N  stages
  out.push_back(make_variant<KernelTraits<128, 2, 128, 3, E>>("t1", "w3 with 3 K/V stages"));
  out.push_back(
      make_variant<KernelTraits<128, 2, 64, 4, E>>("t2", "w3 with K/V tiles of 64 keys, 4 stages"));
}

}  // namespace fa::step09
