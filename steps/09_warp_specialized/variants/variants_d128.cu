// variants_d128.cu — step 09's kernel at head dim 128, technique by technique: each row adds
// one of chapter 09's techniques to the row before it (kernel_traits.cuh, 1–3). Step 08, the
// row before the first, has none of them. The step itself runs FwdConfig<128, ·>.
#include <cuda_bf16.h>

#include "make_variant.cuh"

namespace fa::step09 {

void add_d128_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  //                                  d  C    N  stages  ping-pong overlap
  out.push_back(make_variant<KernelTraits<128, 2, 128, 2, E, false, false>>(
      "w1", "producer warpgroup + setmaxnreg (consumers issue when ready, softmax after P V)"));
  out.push_back(make_variant<KernelTraits<128, 2, 128, 2, E, true, false>>(
      "w2", "+ ping-pong: consumers take turns to issue their wgmmas"));
  out.push_back(make_variant<KernelTraits<128, 2, 128, 2, E, true, true>>(
      "w3", "+ the softmax under its own P V (= step 09)"));
  out.push_back(make_variant<KernelTraits<128, 2, 128, 2, E, false, true>>(
      "o1", "w1 + the softmax under its own P V, no ping-pong"));
}

}  // namespace fa::step09
