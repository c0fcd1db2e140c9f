/// \file registry.h
/// \brief Every GPU step registers itself once; the tests, the benchmarks, the tour and
/// the C API iterate over this list and never change when a step is added.
///
/// Host code only: no CUDA header is needed to describe or validate a step, so the checks
/// are tested on any machine. Running a step (run_step) is in common/launch.h.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/problem.h"

/// The CUDA runtime's stream type: cudaStream_t is `CUstream_st*`. Declared here so that
/// a step's entry point can be described without including CUDA headers.
struct CUstream_st;

namespace fa {

/// \brief A CUDA stream (the same type as cudaStream_t).
using Stream = CUstream_st*;

/// \brief The device limits a step's launch must fit, with the names and meaning of their
/// cudaDeviceProp fields (common/launch.h: device_limits() reads them from a device).
struct DeviceLimits {
  int major = 0;                           ///< compute capability, major
  int minor = 0;                           ///< compute capability, minor
  std::size_t sharedMemPerBlockOptin = 0;  ///< dynamic shared memory a block may opt in to
  int maxGridSize[3] = {0, 0, 0};          ///< grid limits along x, y and z
  int multiProcessorCount = 0;             ///< SMs (the decoding steps' split rule reads it)
};

/// \brief What a step is and what it supports. Filled in once per step by FA_REGISTER_STEP.
struct StepInfo {
  int number = 0;              ///< chapter number, e.g. 1
  const char* name = "";       ///< folder name, e.g. "01_naive_attention"
  const char* lesson = "";     ///< one line: what this step teaches
  std::vector<DType> dtypes;   ///< element types it accepts
  std::vector<int> head_dims;  ///< head dims it accepts; empty means any d in [1, max_head_dim]
  int max_head_dim = 256;      ///< largest head dim it accepts
  bool causal = true;          ///< supports causal masking
  bool gqa = true;             ///< supports heads_kv < heads_q
  int alignment = 4;           ///< required alignment in bytes of q, k, v, o (vector loads)

  /// Device scratch the step needs beyond Q, K, V, O and L (for the naive steps: S and P).
  std::size_t (*workspace_bytes)(const Problem&) = nullptr;
  /// Bytes of N×N intermediates (S, P) the step writes to device memory, by its design.
  std::size_t (*nxn_bytes_written)(const Problem&) = nullptr;
  /// Extra launch-time limits (shared memory, grid size) for this device; "" when fine.
  std::string (*check_device)(const Problem&, const DeviceLimits&) = nullptr;
  /// The entry point: launches the step's kernel(s) on `stream`, asynchronously. The caller
  /// has validated the problem (check_step) and passes `workspace_bytes(p)` bytes of scratch.
  /// Null for a step that has a backward pass only (then it is not in the forward programs:
  /// steps/CMakeLists.txt, fa_add_backward_step).
  void (*run)(const Problem&, const DeviceTensors&, void* workspace, Stream) = nullptr;

  /// \name The backward pass (all null for a forward-only step)
  /// The accepted problems are the ones above (dtypes, head dims, causal, GQA, alignment,
  /// which then applies to every pointer of BackwardTensors but L).
  ///@{
  /// Device scratch the backward needs (e.g. an fp32 dQ accumulator and D = rowsum(dO ∘ O)).
  std::size_t (*backward_workspace_bytes)(const Problem&) = nullptr;
  /// Launch-time limits of the backward's kernels on this device; "" when fine.
  std::string (*check_backward_device)(const Problem&, const DeviceLimits&) = nullptr;
  /// Launches the backward on `stream`, asynchronously: dQ, dK and dV from Q, K, V, O, L and
  /// dO. The caller has validated everything (check_backward_launch) and passes
  /// `backward_workspace_bytes(p)` bytes of scratch, whose contents on entry are undefined.
  void (*backward)(const Problem&, const BackwardTensors&, void* workspace, Stream) = nullptr;
  /// dK and dV are bitwise the same from run to run (no floating-point atomics on them).
  bool backward_deterministic_dkdv = false;
  /// dQ is bitwise the same from run to run (false when it is summed with atomics), in the
  /// default mode (Problem::deterministic false).
  bool backward_deterministic_dq = false;
  /// With Problem::deterministic set, dQ is bitwise the same from run to run too (e.g. summed
  /// in a fixed order from partials in the workspace, which backward_workspace_bytes then
  /// counts). A step whose gradients are all deterministic anyway accepts the flag without it.
  bool backward_deterministic_mode = false;
  ///@}
};

/// \brief One dimension of a step's grid, for check_fits(): the blocks a launch needs along it
/// and, for the message, the problem quantity that decides them.
struct GridNeed {
  int axis = 0;          ///< 0, 1 or 2: grid x, y or z
  long long blocks = 0;  ///< blocks the launch needs along that axis
  std::string what;      ///< e.g. "batch*heads_q (70000)" or "n_q (9000) needs 141 row tiles"
};

/// \brief The device limits every step's check_device shares: each grid dimension within
/// prop.maxGridSize, and `smem_bytes` of dynamic shared memory within
/// prop.sharedMemPerBlockOptin (0: the step needs no opt-in). "" when the launch fits,
/// otherwise the first quantity that does not, its limit and the step.
/// \param step the step's name \param prop the device \param p the problem (its head_dim
/// names the tile in the shared-memory message) \param smem_bytes dynamic shared memory per
/// block \param grid the dimensions to check \return "" or the message
std::string check_fits(const char* step, const DeviceLimits& prop, const Problem& p,
                       std::size_t smem_bytes, const std::vector<GridNeed>& grid);

/// \brief All registered steps, ordered by number.
/// \return the registry (filled before main() by the FA_REGISTER_STEP lines)
const std::vector<const StepInfo*>& steps();

/// \brief Finds a step by folder name ("04_flash_attention"), number ("04" or "4") or slug
/// ("flash_attention"); nullptr if none matches.
/// \param key what the user typed \return the step, or nullptr
const StepInfo* find_step(const std::string& key);

/// \brief Comma-separated names of the registered steps (for error messages).
/// \return e.g. "01_naive_attention, 02_tiled_matmul"
std::string step_names();

/// \brief Is `p` something `step` can run? "" if yes, otherwise a message naming the
/// parameter, its value and the step's limit. Includes validate(p).
/// \param step the step \param p the problem \return "" or the message
std::string check_step(const StepInfo& step, const Problem& p);

/// \brief check_step plus the pointers (null, misaligned for the step's vector loads) and
/// the device limits (step.check_device). "" when the launch may go ahead.
/// \param step the step \param p the problem \param t the device pointers
/// \param device the limits of the device the launch would run on \return "" or the message
std::string check_launch(const StepInfo& step, const Problem& p, const DeviceTensors& t,
                         const DeviceLimits& device);

/// \brief Does `device` refuse `step` outright? "" when the step can run its smallest problem
/// there (its first dtype and head dim, the default shapes), otherwise check_device's reason,
/// such as step 08's on a GPU other than compute capability 9.0. A step without check_device
/// runs everywhere.
/// \param step the step \param device the device's limits \return "" or the reason
std::string device_refusal(const StepInfo& step, const DeviceLimits& device);

/// \brief Does `step`'s backward offer what `p` asks of it? "" when it has a backward pass and,
/// if p.deterministic is set, gradients that are bitwise the same from run to run in that mode
/// (StepInfo::backward_deterministic_*); otherwise the message. Needs no device.
/// \param step the step \param p the problem \return "" or the message
std::string check_backward_mode(const StepInfo& step, const Problem& p);

/// \brief check_step plus what a backward launch needs: the step has a backward pass, offers
/// Problem::deterministic if it is set, every pointer of `t` is set and aligned
/// (step.alignment; 4 bytes for L), and the backward's device limits
/// (step.check_backward_device). "" when the launch may go ahead.
/// \param step the step \param p the problem \param t the device pointers
/// \param device the limits of the device the launch would run on \return "" or the message
std::string check_backward_launch(const StepInfo& step, const Problem& p, const BackwardTensors& t,
                                  const DeviceLimits& device);

/// \brief Adds a step to the registry; use FA_REGISTER_STEP rather than calling this.
struct StepRegistrar {
  /// \brief Appends `info` to steps(). \param info the step's description
  explicit StepRegistrar(const StepInfo& info);
};

}  // namespace fa

/// \brief Registers a step from a function returning its StepInfo. Put it once in the step's
/// entry-point file (the step's library is an object library, so the registrar is linked).
#define FA_REGISTER_STEP(make_info) \
  static const ::fa::StepRegistrar fa_step_registrar_ { make_info() }
