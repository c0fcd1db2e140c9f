// capi.cpp — the C API over the step registry (flash_tutorial.h).
//
// Every entry point checks everything it can on the host first, in this order: the step
// name, the problem (fa::check_step), then, for fa_run, the pointers (null, alignment) and
// the workspace. Only then does fa_run make its first CUDA call (fa::run_step: the current
// device, its limits, the launch). So a bad argument is reported as such on any machine,
// with or without a GPU. No C++ exception crosses the C boundary.
#include "steps/harness/flash_tutorial.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/launch.h"
#include "common/registry.h"

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

// The step and the problem, both checked (fa::check_step): what every entry point starts with.
fa_status prepare(const char* step, const fa_problem* problem, const fa::StepInfo** s,
                  fa::Problem* p) {
  g_last_error.clear();
  if (fa_status st = find(step, s); st != FA_OK) return st;
  if (fa_status st = to_problem(problem, p); st != FA_OK) return st;
  if (std::string e = fa::check_step(**s, *p); !e.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, e);
  return FA_OK;
}

std::size_t workspace_of(const fa::StepInfo& s, const fa::Problem& p) {
  return s.workspace_bytes ? s.workspace_bytes(p) : 0;
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

fa_status fa_check(const char* step, const fa_problem* problem) {
  return guarded([&] {
    const fa::StepInfo* s = nullptr;
    fa::Problem p;
    return prepare(step, problem, &s, &p);
  });
}

fa_status fa_workspace_bytes(const char* step, const fa_problem* problem, size_t* bytes) {
  return guarded([&] {
    const fa::StepInfo* s = nullptr;
    fa::Problem p;
    if (fa_status st = prepare(step, problem, &s, &p); st != FA_OK) return st;
    if (!bytes) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer bytes is null");
    *bytes = workspace_of(*s, p);
    return FA_OK;
  });
}

fa_status fa_run(const char* step, const fa_problem* problem, const void* q, const void* k,
                 const void* v, void* o, float* lse, void* workspace, size_t workspace_bytes,
                 void* stream) {
  return guarded([&] {
    const fa::StepInfo* s = nullptr;
    fa::Problem p;
    if (fa_status st = prepare(step, problem, &s, &p); st != FA_OK) return st;
    fa::DeviceTensors t;
    t.q = q;
    t.k = k;
    t.v = v;
    t.o = o;
    t.lse = lse;
    // The pointer checks of fa::check_launch, without the device limits (reading them is
    // the one part that asks the CUDA runtime): a copy of the step with no check_device.
    fa::StepInfo host_checks = *s;
    host_checks.check_device = nullptr;
    if (std::string e = fa::check_launch(host_checks, p, t, fa::DeviceLimits{}); !e.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT, e);
    const std::size_t need = workspace_of(*s, p);
    if (workspace_bytes < need)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  "workspace_bytes (" + std::to_string(workspace_bytes) + ") is below the " +
                      std::to_string(need) + " bytes step " + s->name + " needs for this problem");
    if (need > 0 && !workspace)
      return fail(FA_ERROR_INVALID_ARGUMENT,
                  "pointer workspace is null; step " + std::string(s->name) + " needs " +
                      std::to_string(need) + " bytes of workspace for this problem");
    // The first CUDA call: run_step checks the device's limits, then launches.
    fa::run_step(*s, p, t, workspace, static_cast<cudaStream_t>(stream));
    return FA_OK;
  });
}

const char* fa_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
