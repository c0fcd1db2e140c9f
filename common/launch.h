/// \file launch.h
/// \brief Running a registered step on the GPU: the device's limits and run_step(). The
/// CUDA side of the registry (common/registry.h describes and validates steps on the host).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>
#include <vector>

#include "common/decode_registry.h"
#include "common/inputs.h"
#include "common/registry.h"

namespace fa {

static_assert(std::is_same_v<Stream, cudaStream_t>,
              "registry.h's fa::Stream must be the CUDA runtime's cudaStream_t");

/// \brief Whether this process can use a CUDA device: "" when it can, otherwise why not (the
/// runtime's error, or that it counts no device). Every program and the GPU tests ask this
/// before their first other CUDA call.
/// \return "" or the reason
std::string no_usable_device();

/// \brief The limits of CUDA device `device` that a step's check_device looks at.
/// \param device a CUDA device ordinal \return its limits
DeviceLimits device_limits(int device);

/// \brief Checks everything (check_launch against the current device's limits), throws
/// std::invalid_argument with the message if anything is wrong, then runs the step and checks
/// the launch. The workspace must hold step.workspace_bytes(p) bytes.
/// \param step the step to run \param p the problem \param t the device pointers
/// \param workspace step.workspace_bytes(p) bytes of device scratch (may be null when 0)
/// \param stream the CUDA stream the kernels are launched on (asynchronously)
void run_step(const StepInfo& step, const Problem& p, const DeviceTensors& t, void* workspace,
              cudaStream_t stream = nullptr);

/// \brief O and L of the registered step `forward` on `in`, made to time a backward on: the
/// forward runs once, untimed, on device buffers of its own that are freed before this
/// returns. A row that sees no key has L = −inf and O = 0; any other non-finite value (a NaN
/// or +inf in L, a non-finite O) is a broken forward, and a backward timed on it would time
/// another code path: std::runtime_error naming the step and the problem.
/// \param forward a step with a forward pass \param in the inputs \param o receives O (Q's
/// layout) \param lse receives L
void forward_for_backward(const StepInfo& forward, const HostInputs& in, std::vector<float>* o,
                          std::vector<float>* lse);

/// \brief The backward's run_step: checks everything (check_backward_launch against the
/// current device's limits, and the workspace), throws std::invalid_argument with the message
/// if anything is wrong, then runs step.backward and checks the launch.
/// \param step the step to run \param p the problem \param t the device pointers
/// \param workspace step.backward_workspace_bytes(p) bytes of device scratch (may be null
/// when 0) \param stream the CUDA stream the kernels are launched on (asynchronously)
void run_backward(const StepInfo& step, const Problem& p, const BackwardTensors& t, void* workspace,
                  cudaStream_t stream = nullptr);

/// \brief The split count of a decoding launch: `forced` when it is positive (tests, studies),
/// otherwise the step's rule (DecodeStepInfo::num_splits) for the current device's SM count.
/// \param step the decoding step \param p the problem \param forced 0, or the count to use
/// \return the split count (check_decode_launch judges a forced one)
int decode_splits(const DecodeStepInfo& step, const DecodeProblem& p, int forced = 0);

/// \brief The decoding run_step: checks everything (check_decode_launch against the current
/// device's limits, and the workspace), throws std::invalid_argument with the message if
/// anything is wrong, then runs the step (append, attend, combine; or, with
/// DecodePhases::AttendOnly, attend and combine alone) and checks the launch.
/// \param step the decoding step \param p the problem \param t the device pointers
/// \param num_splits the split count (decode_splits())
/// \param workspace step.workspace_bytes(p, num_splits) bytes of device scratch, aligned to
/// step.alignment bytes
/// \param stream the CUDA stream the kernels are launched on (asynchronously)
/// \param phases the whole step, or its attention alone (std::invalid_argument when the step
/// has no DecodeStepInfo::attend)
void run_decode(const DecodeStepInfo& step, const DecodeProblem& p, const DecodeTensors& t,
                int num_splits, void* workspace, cudaStream_t stream = nullptr,
                DecodePhases phases = DecodePhases::AppendAndAttend);

}  // namespace fa
