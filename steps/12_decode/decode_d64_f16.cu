// decode_d64_f16.cu — the attention and combine kernels for head dim 64 in f16.
// One file per (head dim, dtype), so the four compile in parallel (decode_kernel.cuh).
#include "decode_kernel.cuh"

namespace fa::step12 {
template void run_attend_combine<64, __half>(const DecodeParams&, cudaStream_t);
}  // namespace fa::step12
