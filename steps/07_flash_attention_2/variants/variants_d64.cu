// variants_d64.cu — step 07's kernel at head dim 64 in the configurations of the table of
// versions (chapter 07). The step itself runs FwdConfig<64, ·> (kernel_traits.cuh).
#include <cuda_bf16.h>

#include "make_variant.cuh"

namespace fa::step07 {

void add_d64_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  //                     d    M    N  warps stages     swizzle skipα  minBlocks
  out.push_back(make_variant<KernelTraits<64, 128, 64, 4, 2, E, false, false>>(
      "v1", "mma.sync + ldmatrix, scores in registers, 2-stage cp.async"));
  out.push_back(make_variant<KernelTraits<64, 128, 64, 4, 2, E, true, false>>(
      "v2", "+ XOR-swizzled shared memory"));
  out.push_back(
      make_variant<KernelTraits<64, 128, 64, 4, 3, E, true, false>>("v3", "+ 3 K/V stages"));
  out.push_back(make_variant<KernelTraits<64, 128, 64, 4, 3, E, true, true>>(
      "v4", "+ skip the O rescale when no max moved"));
  out.push_back(make_variant<KernelTraits<64, 128, 128, 4, 2, E, true, true>>(
      "t1", "tiles 128×128, 2 stages (FlashAttention-2's tile)"));
  out.push_back(
      make_variant<KernelTraits<64, 128, 32, 4, 3, E, true, true>>("t2", "tiles 128×32, 3 stages"));
  out.push_back(make_variant<KernelTraits<64, 64, 64, 4, 3, E, true, true>>(
      "t3", "tiles 64×64, 4 warps of 16 rows, 3 stages"));
  out.push_back(
      make_variant<KernelTraits<64, 128, 64, 4, 2, E, true, true>>("c1", "v4 with 2 stages"));
  out.push_back(
      make_variant<KernelTraits<64, 128, 128, 4, 2, E, true, false>>("c2", "t1 rescaling always"));
  out.push_back(make_variant<KernelTraits<64, 128, 64, 4, 2, E, true, false, 3>>(
      "c3", "v2 with 3 blocks/SM (≤ 168 registers)"));
}

}  // namespace fa::step07
