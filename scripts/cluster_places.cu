// cluster_places.cu — how many blocks of step 12's candidate kernel the GPU holds at once when
// they are launched in thread-block clusters of 1, 2, 4, 8 and 16 (cudaOccupancyMaxActiveClusters),
// for a block of 128 threads and 100 KiB of dynamic shared memory (m3w4spa's 102 400 bytes).
// A cluster's blocks must all be resident at once on one GPC, so clusters can leave places of
// the SMs unused: chapter 12 reads this beside the clusters' variants (m3w4spac2/4/8), whose
// grid at B = 8, MHA is 256 blocks. A stand-alone program, built by hand on a machine with a GPU:
//
//   nvcc -arch=sm_90 -o cluster_places scripts/cluster_places.cu && ./cluster_places
//
// The kernel is empty but for a read of its shared memory: occupancy depends only on its
// threads, registers and shared memory, not on what it computes. The candidate's 164 registers
// per thread would allow 3 blocks of 128 threads per SM; shared memory allows 2, here as there.
#include <cuda_runtime.h>
#include <cstdio>
__global__ void k(int* p) {
  extern __shared__ int s[];
  if (threadIdx.x == 0 && p) p[blockIdx.x] = s[0];
}
int main() {
  int smem = 102400;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int per_sm;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, 128, smem);
  printf("SMs %d, blocks per SM %d (no cluster): %d places\n", sms, per_sm, sms * per_sm);
  for (int c : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(c, 256 / c, 1);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = c;
    a[0].val.clusterDim.y = 1;
    a[0].val.clusterDim.z = 1;
    cfg.attrs = a;
    cfg.numAttrs = 1;
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
    printf("cluster %2d: max active clusters %d = %d blocks (%s)\n", c, n, n * c,
           cudaGetErrorString(e));
  }
  return 0;
}
