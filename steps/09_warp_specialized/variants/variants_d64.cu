// variants_d64.cu — step 09's kernel at head dim 64, technique by technique (as
// variants_d128.cu), then other consumer counts and rings. The step runs FwdConfig<64, ·>.
#include <cuda_bf16.h>

#include "make_variant.cuh"

namespace fa::step09 {

void add_d64_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  //                                 d  C    N  stages  ping-pong overlap
  out.push_back(make_variant<KernelTraits<64, 3, 128, 2, E, false, false>>(
      "w1", "producer warpgroup + setmaxnreg (consumers issue when ready, softmax after P V)"));
  out.push_back(make_variant<KernelTraits<64, 3, 128, 2, E, true, false>>(
      "w2", "+ ping-pong: consumers take turns to issue their wgmmas"));
  out.push_back(make_variant<KernelTraits<64, 3, 128, 2, E, true, true>>(
      "w3", "+ the softmax under its own P V (= step 09)"));
  out.push_back(make_variant<KernelTraits<64, 3, 128, 2, E, false, true>>(
      "o1", "w1 + the softmax under its own P V, no ping-pong"));
  out.push_back(
      make_variant<KernelTraits<64, 2, 128, 2, E>>("t1", "w3 with 2 consumers (128 rows)"));
  out.push_back(make_variant<KernelTraits<64, 3, 128, 3, E>>("t2", "w3 with 3 K/V stages"));
}

}  // namespace fa::step09
