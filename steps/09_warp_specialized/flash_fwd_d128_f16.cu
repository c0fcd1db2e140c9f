// flash_fwd_d128_f16.cu — step 09's kernels for head dim 128 in f16, causal and not.
// One file per (head dim, dtype), so the four compile in parallel; the kernel is in
// flash_fwd_kernel.cuh, its tiles in kernel_traits.cuh (FwdConfig<128, ·>).
#include "flash_fwd_kernel.cuh"

namespace fa::step09 {
template void run_flash_fwd<128, __half>(const FwdParams&, const TensorMaps&, cudaStream_t);
}  // namespace fa::step09
