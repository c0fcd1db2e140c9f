// flash_fwd_d128_bf16.cu — the kernels for head dim 128 in bf16, causal and not.
// One file per (head dim, dtype): the four instantiations compile in parallel, and editing
// the launcher (api.cu) recompiles none of them. The kernel is in
// flash_fwd_kernel.cuh, its tiles in kernel_traits.cuh (FwdConfig<128, ·>).
#include "flash_fwd_kernel.cuh"

namespace fa::step07 {
template void run_flash_fwd<128, __nv_bfloat16>(const FwdParams&, cudaStream_t);
}  // namespace fa::step07
