// decode_d64_bf16.cu — the attention and combine kernels for head dim 64 in bf16.
// One file per (head dim, dtype), so the four compile in parallel (decode_kernel.cuh).
#include "decode_kernel.cuh"

namespace fa::step12 {
template void run_attend_combine<64, __nv_bfloat16>(const DecodeParams&, cudaStream_t);
}  // namespace fa::step12
