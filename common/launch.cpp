#include "common/launch.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/decode_registry.h"
#include "common/device_problem.h"

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
  CUDA_CHECK(
      cudaDeviceGetAttribute(&d.multiProcessorCount, cudaDevAttrMultiProcessorCount, device));
  return d;
}

namespace {

/// The current device's limits, asked for only when the step has limits to check.
DeviceLimits limits_if(bool needed) {
  if (!needed) return DeviceLimits{};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device_limits(device);
}

/// Throws when a step needs `need` bytes of scratch and was given none.
void check_workspace(const char* step, std::size_t need, const void* workspace) {
  if (need > 0 && workspace == nullptr)
    throw std::invalid_argument(std::string("workspace is null but step ") + step + " needs " +
                                std::to_string(need) + " bytes");
}
void check_workspace(const StepInfo& step, std::size_t (*bytes)(const Problem&), const Problem& p,
                     const void* workspace) {
  if (bytes) check_workspace(step.name, bytes(p), workspace);
}

}  // namespace

void run_step(const StepInfo& step, const Problem& p, const DeviceTensors& t, void* workspace,
              cudaStream_t stream) {
  const DeviceLimits limits = limits_if(step.check_device != nullptr);
  if (std::string e = check_launch(step, p, t, limits); !e.empty()) throw std::invalid_argument(e);
  check_workspace(step, step.workspace_bytes, p, workspace);
  step.run(p, t, workspace, stream);
  CUDA_CHECK_LAUNCH();
}

void run_backward(const StepInfo& step, const Problem& p, const BackwardTensors& t, void* workspace,
                  cudaStream_t stream) {
  const DeviceLimits limits = limits_if(step.check_backward_device != nullptr);
  if (std::string e = check_backward_launch(step, p, t, limits); !e.empty())
    throw std::invalid_argument(e);
  check_workspace(step, step.backward_workspace_bytes, p, workspace);
  step.backward(p, t, workspace, stream);
  CUDA_CHECK_LAUNCH();
}

int decode_splits(const DecodeStepInfo& step, const DecodeProblem& p, int forced) {
  if (forced > 0) return forced;  // check_decode_launch judges it against step.max_splits
  if (step.num_splits == nullptr) return 1;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return step.num_splits(p, device_limits(device).multiProcessorCount);
}

void run_decode(const DecodeStepInfo& step, const DecodeProblem& p, const DecodeTensors& t,
                int num_splits, void* workspace, cudaStream_t stream, DecodePhases phases) {
  const bool attend_only = phases == DecodePhases::AttendOnly;
  if (attend_only && step.attend == nullptr)
    throw std::invalid_argument(std::string("step ") + step.name +
                                " cannot run its attention apart from its append");
  const DeviceLimits limits = limits_if(step.check_device != nullptr);
  if (std::string e = check_decode_launch(step, p, t, num_splits, limits); !e.empty())
    throw std::invalid_argument(e);
  if (std::string e = check_decode_workspace(step, p, num_splits, workspace); !e.empty())
    throw std::invalid_argument(e);
  (attend_only ? step.attend : step.run)(p, t, num_splits, workspace, stream);
  CUDA_CHECK_LAUNCH();
}

void forward_for_backward(const StepInfo& forward, const HostInputs& in, std::vector<float>* o,
                          std::vector<float>* lse) {
  const Problem& p = in.problem;
  {
    DeviceProblem fwd(in, forward.workspace_bytes ? forward.workspace_bytes(p) : 0);
    run_step(forward, p, fwd.tensors(), fwd.workspace());
    fwd.download(o, lse);
  }
  const bool o_ok = std::all_of(o->begin(), o->end(), [](float x) { return std::isfinite(x); });
  const bool l_ok = std::none_of(lse->begin(), lse->end(),
                                 [](float x) { return std::isnan(x) || x == INFINITY; });
  if (!o_ok || !l_ok)
    throw std::runtime_error(std::string("forward step ") + forward.name + " gave a " +
                             (o_ok ? "NaN or +inf in L" : "non-finite O") + " for " + p.describe() +
                             "; no backward is timed on it");
}

}  // namespace fa
