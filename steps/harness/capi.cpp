// capi.cpp — the C API over the step registry (flash_tutorial.h).
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
  if (!in) return fail(FA_ERROR_INVALID_ARGUMENT, "problem is null");
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
  if (!name) return fail(FA_ERROR_UNKNOWN_STEP, "step name is null");
  *out = fa::find_step(name);
  if (!*out)
    return fail(FA_ERROR_UNKNOWN_STEP, std::string("step (") + name +
                                           ") is not registered; known: " + fa::step_names());
  return FA_OK;
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
  g_last_error.clear();
  const fa::StepInfo* s = nullptr;
  fa::Problem p;
  if (fa_status st = find(step, &s); st != FA_OK) return st;
  if (fa_status st = to_problem(problem, &p); st != FA_OK) return st;
  if (std::string e = fa::check_step(*s, p); !e.empty()) return fail(FA_ERROR_INVALID_ARGUMENT, e);
  return FA_OK;
}

fa_status fa_workspace_bytes(const char* step, const fa_problem* problem, size_t* bytes) {
  if (fa_status st = fa_check(step, problem); st != FA_OK) return st;
  if (!bytes) return fail(FA_ERROR_INVALID_ARGUMENT, "bytes is null");
  fa::Problem p;
  to_problem(problem, &p);
  const fa::StepInfo* s = fa::find_step(step);
  *bytes = s->workspace_bytes ? s->workspace_bytes(p) : 0;
  return FA_OK;
}

fa_status fa_run(const char* step, const fa_problem* problem, const void* q, const void* k,
                 const void* v, void* o, float* lse, void* workspace, size_t workspace_bytes,
                 void* stream) {
  size_t need = 0;
  if (fa_status st = fa_workspace_bytes(step, problem, &need); st != FA_OK) return st;
  if (workspace_bytes < need || (need > 0 && !workspace))
    return fail(FA_ERROR_INVALID_ARGUMENT, "workspace_bytes (" + std::to_string(workspace_bytes) +
                                               ") is below the " + std::to_string(need) +
                                               " bytes this step needs, or workspace is null");
  fa::Problem p;
  to_problem(problem, &p);
  const fa::StepInfo* s = fa::find_step(step);
  fa::DeviceTensors t;
  t.q = q;
  t.k = k;
  t.v = v;
  t.o = o;
  t.lse = lse;
  try {
    fa::run_step(*s, p, t, workspace, static_cast<cudaStream_t>(stream));
  } catch (const std::invalid_argument& e) {
    return fail(FA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const fa::CudaError& e) {
    return fail(FA_ERROR_CUDA, e.what());
  } catch (const std::exception& e) {
    return fail(FA_ERROR_INTERNAL, e.what());
  }
  return FA_OK;
}

const char* fa_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
