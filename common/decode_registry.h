/// \file decode_registry.h
/// \brief The registry of decoding steps: what a GPU decoding step is (DecodeStepInfo), how it
/// is found and how a launch is checked before anything runs (host code only, like
/// registry.h). Running one is run_decode() in common/launch.h.
///
/// Decoding steps are kept apart from the forward steps of registry.h: they take a
/// DecodeProblem (common/decode.h), not a Problem, and they choose a split count, which sizes
/// their workspace. The forward programs (tour, benchmark, C API) never see them.
///
/// A decoding step runs in three phases on one stream: append this step's new K/V rows into
/// the cache, attend over each sequence's cache in `num_splits` ranges of keys (partial O and
/// L per split in the workspace), then combine the splits into O and L.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/decode.h"
#include "common/registry.h"

namespace fa {

/// \brief The device pointers of a decoding step.
///
/// `cache_lens` and `block_table` are device copies of DecodeProblem::cache_lens and
/// DecodeProblem::block_table, which the host validates (validate(const DecodeProblem&)); they
/// must hold the same values. The kernels still never read or write outside the cache if they
/// do not: a position past the capacity or a pool page out of range is skipped (append) or read
/// as zeros (attention).
struct DecodeTensors {
  const void* q = nullptr;           ///< [B, q_len, H_q, d], the step's dtype
  const void* k_new = nullptr;       ///< [B, q_len, H_kv, d]: this step's new keys
  const void* v_new = nullptr;       ///< [B, q_len, H_kv, d]: this step's new values
  void* k_cache = nullptr;           ///< the K cache (DecodeProblem::cache_elems() elements)
  void* v_cache = nullptr;           ///< the V cache, the same shape
  const int* cache_lens = nullptr;   ///< [B] keys in the cache before the step
  const int* block_table = nullptr;  ///< [B, max_pages] (paged cache only; null otherwise)
  void* o = nullptr;                 ///< [B, q_len, H_q, d], the step's dtype
  float* lse = nullptr;              ///< [B, H_q, q_len] fp32, natural log
};

/// \brief Which phases of a decoding step run_decode() runs.
enum class DecodePhases {
  AppendAndAttend,  ///< the whole step: append, attend, combine (DecodeStepInfo::run)
  AttendOnly,       ///< attend and combine over a cache that already holds the step's rows
                    ///< (DecodeStepInfo::attend; the decoding benchmark times this)
};

/// \brief What a decoding step is and supports. Filled in once per step by
/// FA_REGISTER_DECODE_STEP.
struct DecodeStepInfo {
  int number = 0;              ///< chapter number, e.g. 12
  const char* name = "";       ///< folder name, e.g. "12_decode"
  const char* lesson = "";     ///< one line: what this step teaches
  std::vector<DType> dtypes;   ///< element types it accepts
  std::vector<int> head_dims;  ///< head dims it accepts
  int alignment = 16;          ///< alignment in bytes of q, k_new, v_new, the caches, o and the
                               ///< workspace
  int max_splits = 1;          ///< the most splits of the keys a launch may ask for
  /// A candidate next version of the chapter's kernel (e.g. "12_decode_v2"): registered so
  /// that the decoding benchmark times it and the decoding tests judge it beside the
  /// chapter's step, found by its name or slug only (the chapter's number names the chapter's
  /// own step), listed after it.
  bool candidate = false;

  /// The split rule: how many ranges to cut the keys into on a device with `sm_count`
  /// multiprocessors (1 .. max_splits).
  int (*num_splits)(const DecodeProblem&, int sm_count) = nullptr;
  /// Device scratch a launch with `num_splits` splits needs (the partial O and L).
  std::size_t (*workspace_bytes)(const DecodeProblem&, int num_splits) = nullptr;
  /// Launch-time limits (compute capability, shared memory, grid) for this device; "" when fine.
  std::string (*check_device)(const DecodeProblem&, int num_splits, const DeviceLimits&) = nullptr;
  /// The entry point: append, attend in `num_splits` splits, combine, asynchronously on
  /// `stream`. The caller has checked everything (check_decode_launch) and passes
  /// workspace_bytes(p, num_splits) bytes of scratch, whose contents on entry are undefined.
  void (*run)(const DecodeProblem&, const DecodeTensors&, int num_splits, void* workspace,
              Stream) = nullptr;
  /// The same without the append: attend and combine only, over a cache that already holds
  /// this step's rows (k_new and v_new are not read). What the decoding benchmark times, so
  /// that its figure is the attention's alone, as the peers' is; null when the step cannot
  /// run its phases apart.
  void (*attend)(const DecodeProblem&, const DecodeTensors&, int num_splits, void* workspace,
                 Stream) = nullptr;
};

/// \brief All registered decoding steps, ordered by number.
/// \return the registry (filled before main() by the FA_REGISTER_DECODE_STEP lines)
const std::vector<const DecodeStepInfo*>& decode_steps();

/// \brief Finds a decoding step by folder name, number or slug, like find_step(); a candidate
/// (DecodeStepInfo::candidate) by name or slug only.
/// \param key what the user typed \return the step, or nullptr
const DecodeStepInfo* find_decode_step(const std::string& key);

/// \brief Is `p` something `step` can run? "" if yes, otherwise a message naming the
/// parameter, its value and the limit. Includes validate(p) (common/decode.h).
/// \param step the step \param p the decoding problem \return "" or the message
std::string check_decode_step(const DecodeStepInfo& step, const DecodeProblem& p);

/// \brief check_decode_step plus the split count (1 .. step.max_splits), the pointers (set,
/// aligned; block_table only for a paged cache) and the device limits (step.check_device).
/// \param step the step \param p the problem \param t the device pointers
/// \param num_splits the split count of the launch \param device the device's limits
/// \return "" when the launch may go ahead, otherwise the message
std::string check_decode_launch(const DecodeStepInfo& step, const DecodeProblem& p,
                                const DecodeTensors& t, int num_splits, const DeviceLimits& device);

/// \brief The workspace of a launch with `num_splits` splits: "" when it is set (if the step
/// needs any) and aligned to step.alignment bytes (the partial results are stored in pieces of
/// that size, like the tensors), otherwise the message. run_decode() applies it.
/// \param step the step \param p the problem \param num_splits the split count
/// \param workspace the device scratch \return "" or the message
std::string check_decode_workspace(const DecodeStepInfo& step, const DecodeProblem& p,
                                   int num_splits, const void* workspace);

/// \brief Does `device` refuse `step` outright? "" when the step can run its smallest problem
/// there (its first dtype and head dim, one sequence, one new token, one split), otherwise
/// check_device's reason (e.g. a compute capability below what its copies need).
/// \param step the step \param device the device's limits \return "" or the reason
std::string device_refusal(const DecodeStepInfo& step, const DeviceLimits& device);

/// \brief Adds a decoding step to the registry; use FA_REGISTER_DECODE_STEP.
struct DecodeStepRegistrar {
  /// \brief Appends `info` to decode_steps(). \param info the step's description
  explicit DecodeStepRegistrar(const DecodeStepInfo& info);
};

}  // namespace fa

/// \brief Registers a decoding step from a function returning its DecodeStepInfo (once, in the
/// step's api.cu).
#define FA_REGISTER_DECODE_STEP(make_info) \
  static const ::fa::DecodeStepRegistrar fa_decode_step_registrar_ { make_info() }
