// flash_bwd_d128_bf16.cu — the backward kernels for head dim 128 in bf16, causal and not.
// One file per (head dim, dtype): the four instantiations compile in parallel, and editing
// the launcher (api.cu) recompiles none of them. The kernels are in flash_bwd_kernel.cuh,
// their tiles in kernel_traits.cuh (BwdConfig<128, ·>).
#include "flash_bwd_kernel.cuh"

namespace fa::step11 {
template void run_flash_bwd<128, __nv_bfloat16>(const BwdParams&, cudaStream_t);
}  // namespace fa::step11
