// spin.cu — see spin.h.
#include "spin.h"

#include "common/cuda_check.h"

namespace fa::bench {
namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

void gpu_spin(long long cycles, cudaStream_t stream) {
  if (cycles <= 0) return;
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fa::bench
