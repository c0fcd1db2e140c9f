// flash_fwd_d128_f16.cu — the kernels for head dim 128 in fp16, causal and not.
// One file per (head dim, dtype): the four instantiations compile in parallel, and editing
// the launcher (api.cu) recompiles none of them. The kernel is in
// flash_fwd_kernel.cuh, its tiles in kernel_traits.cuh (FwdConfig<128, ·>).
#include "flash_fwd_kernel.cuh"

namespace fa::step06 {
template void run_flash_fwd<128, __half>(const FwdParams&, cudaStream_t);
}  // namespace fa::step06
