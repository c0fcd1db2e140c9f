// capi.cpp — the C API over the step registry (flash_tutorial.h).
//
// Every entry point checks everything it can on the host first, in this order: the step
// name (and, but for fa_check, that the step has the pass asked for), the problem
// (fa::check_step), then, for fa_run and fa_backward, the pointers (null, alignment) and the
// workspace. Only then do they make their first CUDA call (fa::run_step or fa::run_backward:
// the current device, its limits, the launch). So a bad argument is reported as such on any
// machine, with or without a GPU. No C++ exception crosses the C boundary.
#include "steps/harness/flash_tutorial.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/launch.h"
#include "common/registry.h"
#include "steps/13_ring_attention/merge.h"

namespace {

thread_local std::string g_last_error;

fa_status fail(fa_status code, const std::string& msg) {
  g_last_error = msg;
  return code;
}

// Converts the C struct, rejecting enum values out of range.
fa_status to_problem(const fa_problem* in, fa::Problem* out) {
  if (!in) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer problem is null");
  if (in->dtype < 0 || in->dtype > 2)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "dtype (" + std::to_string(in->dtype) + ") must be 0 (fp32), 1 (fp16) or 2 (bf16)");
  if (in->layout < 0 || in->layout > 1)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "layout (" + std::to_string(in->layout) + ") must be 0 (bnhd) or 1 (bhnd)");
  out->batch = in->batch;
  out->heads_q = in->heads_q;
  out->heads_kv = in->heads_kv;
  out->n_q = in->n_q;
  out->n_kv = in->n_kv;
  out->head_dim = in->head_dim;
  out->scale = in->scale;
  out->causal = in->causal != 0;
  out->dtype = static_cast<fa::DType>(in->dtype);
  out->layout = static_cast<fa::Layout>(in->layout);
  return FA_OK;
}

fa_status find(const char* name, const fa::StepInfo** out) {
  if (!name) return fail(FA_ERROR_UNKNOWN_STEP, "pointer step is null");
  *out = fa::find_step(name);
  if (!*out)
    return fail(
        FA_ERROR_UNKNOWN_STEP,
        std::string("step (") + name + ") is not a registered step; known: " + fa::step_names());
  return FA_OK;
}

// Which pass an entry point runs: fa_check asks for none in particular.
enum class Pass { kAny, kForward, kBackward };

bool has_pass(const fa::StepInfo& s, Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return s.run != nullptr;
    case Pass::kBackward:
      return s.backward != nullptr;
    case Pass::kAny:
      break;
  }
  return true;
}

// Refuses a step that lacks `pass`, naming the steps that have it.
fa_status require_pass(const fa::StepInfo& s, Pass pass) {
  if (has_pass(s, pass)) return FA_OK;
  std::string with;
  for (const fa::StepInfo* other : fa::steps())
    if (has_pass(*other, pass)) with += (with.empty() ? "" : ", ") + std::string(other->name);
  const char* what = pass == Pass::kForward ? "forward" : "backward";
  return fail(FA_ERROR_INVALID_ARGUMENT,
              std::string("step (") + s.name + ") has no " + what +
                  " pass; steps with one: " + (with.empty() ? "none" : with));
}

// The step (and that it has `pass`) and the problem, checked (fa::check_step): what every
// entry point starts with.
fa_status prepare(const char* step, const fa_problem* problem, Pass pass, const fa::StepInfo** s,
                  fa::Problem* p) {
  g_last_error.clear();
  if (fa_status st = find(step, s); st != FA_OK) return st;
  if (fa_status st = require_pass(**s, pass); st != FA_OK) return st;
  if (fa_status st = to_problem(problem, p); st != FA_OK) return st;
  if (std::string e = fa::check_step(**s, *p); !e.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, e);
  return FA_OK;
}

std::size_t workspace_of(std::size_t (*bytes)(const fa::Problem&), const fa::Problem& p) {
  return bytes ? bytes(p) : 0;
}

// fa_workspace_bytes and fa_backward_workspace_bytes: `bytes` of the step's pass.
fa_status query_workspace(const char* step, const fa_problem* problem, Pass pass,
                          std::size_t (*fa::StepInfo::*bytes_of)(const fa::Problem&),
                          size_t* bytes) {
  const fa::StepInfo* s = nullptr;
  fa::Problem p;
  if (fa_status st = prepare(step, problem, pass, &s, &p); st != FA_OK) return st;
  if (!bytes) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer bytes is null");
  *bytes = workspace_of(s->*bytes_of, p);
  return FA_OK;
}

// fa_run (t: DeviceTensors) and fa_backward (t: BackwardTensors): the step and problem, the
// pointers, the workspace, all on the host; then the pass's first CUDA call, which checks the
// device's limits and launches.
template <class Tensors>
fa_status launch(const char* step, const fa_problem* problem, const Tensors& t, void* workspace,
                 size_t workspace_bytes, void* stream) {
  constexpr bool kBackward = std::is_same_v<Tensors, fa::BackwardTensors>;
  const fa::StepInfo* s = nullptr;
  fa::Problem p;
  if (fa_status st = prepare(step, problem, kBackward ? Pass::kBackward : Pass::kForward, &s, &p);
      st != FA_OK)
    return st;
  // The pointer checks of fa::check_launch (fa::check_backward_launch), without the device
  // limits (reading them is the one part that asks the CUDA runtime): a copy of the step with
  // no device check.
  fa::StepInfo host_checks = *s;
  host_checks.check_device = nullptr;
  host_checks.check_backward_device = nullptr;
  std::string e;
  if constexpr (kBackward)
    e = fa::check_backward_launch(host_checks, p, t, fa::DeviceLimits{});
  else
    e = fa::check_launch(host_checks, p, t, fa::DeviceLimits{});
  if (!e.empty()) return fail(FA_ERROR_INVALID_ARGUMENT, e);

  const std::string who =
      (kBackward ? "the backward pass of step " : "step ") + std::string(s->name);
  const std::size_t need =
      workspace_of(kBackward ? s->backward_workspace_bytes : s->workspace_bytes, p);
  if (workspace_bytes < need)
    return fail(FA_ERROR_INVALID_ARGUMENT, "workspace_bytes (" + std::to_string(workspace_bytes) +
                                               ") is below the " + std::to_string(need) +
                                               " bytes " + who + " needs for this problem");
  if (need > 0 && !workspace)
    return fail(FA_ERROR_INVALID_ARGUMENT, "pointer workspace is null; " + who + " needs " +
                                               std::to_string(need) +
                                               " bytes of workspace for this problem");
  // The first CUDA call: run_step (run_backward) checks the device's limits, then launches.
  if constexpr (kBackward)
    fa::run_backward(*s, p, t, workspace, static_cast<cudaStream_t>(stream));
  else
    fa::run_step(*s, p, t, workspace, static_cast<cudaStream_t>(stream));
  return FA_OK;
}

// fa_merge's pointers: not null, and aligned as the merge's loads need.
fa_status check_merge_pointer(const char* name, const void* ptr, std::size_t alignment) {
  if (!ptr) return fail(FA_ERROR_INVALID_ARGUMENT, std::string("pointer ") + name + " is null");
  if (reinterpret_cast<std::uintptr_t>(ptr) % alignment != 0) {
    char where[32];
    std::snprintf(where, sizeof where, "%p", ptr);
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string("pointer ") + name + " (" + where +
                                               ") is not aligned to " + std::to_string(alignment) +
                                               " bytes as the merge requires");
  }
  return FA_OK;
}

// Runs `body`, turning any exception into a code and message (none may reach C callers).
template <class F>
fa_status guarded(F&& body) {
  try {
    return body();
  } catch (const std::invalid_argument& e) {
    return fail(FA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const fa::CudaError& e) {
    return fail(FA_ERROR_CUDA, e.what());
  } catch (const std::exception& e) {
    return fail(FA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(FA_ERROR_INTERNAL, "unknown exception");
  }
}

}  // namespace

extern "C" {

int fa_num_steps(void) { return static_cast<int>(fa::steps().size()); }

const char* fa_step_name(int index) {
  if (index < 0 || index >= fa_num_steps()) return nullptr;
  return fa::steps()[static_cast<std::size_t>(index)]->name;
}

const char* fa_step_lesson(int index) {
  if (index < 0 || index >= fa_num_steps()) return nullptr;
  return fa::steps()[static_cast<std::size_t>(index)]->lesson;
}

int fa_step_passes(int index) {
  if (index < 0 || index >= fa_num_steps()) return 0;
  const fa::StepInfo& s = *fa::steps()[static_cast<std::size_t>(index)];
  return (s.run ? FA_PASS_FORWARD : 0) | (s.backward ? FA_PASS_BACKWARD : 0);
}

fa_status fa_check(const char* step, const fa_problem* problem) {
  return guarded([&] {
    const fa::StepInfo* s = nullptr;
    fa::Problem p;
    return prepare(step, problem, Pass::kAny, &s, &p);
  });
}

fa_status fa_workspace_bytes(const char* step, const fa_problem* problem, size_t* bytes) {
  return guarded([&] {
    return query_workspace(step, problem, Pass::kForward, &fa::StepInfo::workspace_bytes, bytes);
  });
}

fa_status fa_backward_workspace_bytes(const char* step, const fa_problem* problem, size_t* bytes) {
  return guarded([&] {
    return query_workspace(step, problem, Pass::kBackward, &fa::StepInfo::backward_workspace_bytes,
                           bytes);
  });
}

fa_status fa_run(const char* step, const fa_problem* problem, const void* q, const void* k,
                 const void* v, void* o, float* lse, void* workspace, size_t workspace_bytes,
                 void* stream) {
  return guarded([&] {
    const fa::DeviceTensors t{q, k, v, o, lse};
    return launch(step, problem, t, workspace, workspace_bytes, stream);
  });
}

fa_status fa_backward(const char* step, const fa_problem* problem, const void* q, const void* k,
                      const void* v, const void* o, const float* lse, const void* d_o, void* dq,
                      void* dk, void* dv, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    const fa::BackwardTensors t{q, k, v, o, lse, d_o, dq, dk, dv};
    return launch(step, problem, t, workspace, workspace_bytes, stream);
  });
}

fa_status fa_merge(const fa_merge_problem* problem, const void* o_parts, const float* lse_parts,
                   void* o, float* lse, void* stream) {
  return guarded([&] {
    g_last_error.clear();
    if (!problem) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer problem is null");
    if (problem->dtype < 0 || problem->dtype > 2)
      return fail(FA_ERROR_INVALID_ARGUMENT, "dtype (" + std::to_string(problem->dtype) +
                                                 ") must be 0 (fp32), 1 (fp16) or 2 (bf16)");
    if (problem->layout < 0 || problem->layout > 1)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  "layout (" + std::to_string(problem->layout) + ") must be 0 (bnhd) or 1 (bhnd)");
    fa::step13::MergeProblem p;
    p.parts = problem->parts;
    p.batch = problem->batch;
    p.heads = problem->heads;
    p.rows = problem->rows;
    p.head_dim = problem->head_dim;
    p.dtype = static_cast<fa::DType>(problem->dtype);
    p.layout = static_cast<fa::Layout>(problem->layout);
    if (std::string e = fa::step13::check_merge(p); !e.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT, e);
    const std::size_t align = fa::step13::kMergeAlignment;
    for (const auto& [name, ptr, a] :
         {std::tuple<const char*, const void*, std::size_t>{"o_parts", o_parts, align},
          {"lse_parts", lse_parts, 4},
          {"o", o, align},
          {"lse", lse, 4}})
      if (fa_status st = check_merge_pointer(name, ptr, a); st != FA_OK) return st;
    fa::step13::run_merge(p, o_parts, lse_parts, o, lse, static_cast<cudaStream_t>(stream));
    return FA_OK;
  });
}

const char* fa_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
