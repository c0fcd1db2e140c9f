#include "common/launch.h"

#include <stdexcept>
#include <string>

#include "common/cuda_check.h"

namespace fa {

std::string no_usable_device() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return count == 0 ? "device count is 0" : "";
}

DeviceLimits device_limits(int device) {
  DeviceLimits d;
  int smem = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  d.sharedMemPerBlockOptin = static_cast<std::size_t>(smem);
  CUDA_CHECK(cudaDeviceGetAttribute(&d.maxGridSize[0], cudaDevAttrMaxGridDimX, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.maxGridSize[1], cudaDevAttrMaxGridDimY, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.maxGridSize[2], cudaDevAttrMaxGridDimZ, device));
  return d;
}

void run_step(const StepInfo& step, const Problem& p, const DeviceTensors& t, void* workspace,
              cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  // The device is only asked for its limits when the step has limits to check.
  const DeviceLimits limits = step.check_device ? device_limits(device) : DeviceLimits{};
  if (std::string e = check_launch(step, p, t, limits); !e.empty()) throw std::invalid_argument(e);
  if (step.workspace_bytes && step.workspace_bytes(p) > 0 && workspace == nullptr)
    throw std::invalid_argument(std::string("workspace is null but step ") + step.name + " needs " +
                                std::to_string(step.workspace_bytes(p)) + " bytes");
  step.run(p, t, workspace, stream);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fa
