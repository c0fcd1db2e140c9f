// capi.cpp — the C API over the step registry (flash_tutorial.h).
//
// Every entry point checks everything it can on the host first, in this order: the step
// name (and, but for fa_check, that the step has the pass asked for), the problem
// (fa::check_step), then, for fa_run and fa_backward, the pointers (null, alignment) and the
// workspace. Only then do they make their first CUDA call (fa::run_step or fa::run_backward:
// the current device, its limits, the launch). So a bad argument is reported as such on any
// machine, with or without a GPU. No C++ exception crosses the C boundary.
//
// The decoding entry points (fa_decode_splits, fa_decode_workspace_bytes, fa_decode) do the
// same over the decoding registry (common/decode_registry.h): the step, the problem
// (fa::check_decode_step, which validates the host copies of the lengths and the block
// table), the split count, the pointers (fa::check_decode_launch without the device), the
// workspace; then the device and the launch (fa::run_decode). The lengths and the block table
// reach the kernels through the workspace: fa_decode copies them there, after every check.
#include "steps/harness/flash_tutorial.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/decode_registry.h"
#include "common/launch.h"
#include "common/registry.h"
#include "steps/13_ring_attention/merge.h"

namespace {

thread_local std::string g_last_error;

fa_status fail(fa_status code, const std::string& msg) {
  g_last_error = msg;
  return code;
}

// The C enum of a dtype, checked.
fa_status check_dtype(int dtype) {
  if (dtype < 0 || dtype > 2)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "dtype (" + std::to_string(dtype) + ") must be 0 (fp32), 1 (fp16) or 2 (bf16)");
  return FA_OK;
}

// Converts the C struct, rejecting enum values out of range.
fa_status to_problem(const fa_problem* in, fa::Problem* out) {
  if (!in) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer problem is null");
  if (fa_status st = check_dtype(in->dtype); st != FA_OK) return st;
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

// The workspace given against the `need` bytes that `who` needs: large enough, and not null
// when anything is needed.
fa_status check_workspace_size(const std::string& who, std::size_t need, const void* workspace,
                               size_t workspace_bytes) {
  if (workspace_bytes < need)
    return fail(FA_ERROR_INVALID_ARGUMENT, "workspace_bytes (" + std::to_string(workspace_bytes) +
                                               ") is below the " + std::to_string(need) +
                                               " bytes " + who + " needs for this problem");
  if (need > 0 && !workspace)
    return fail(FA_ERROR_INVALID_ARGUMENT, "pointer workspace is null; " + who + " needs " +
                                               std::to_string(need) +
                                               " bytes of workspace for this problem");
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
  if (fa_status st = check_workspace_size(who, need, workspace, workspace_bytes); st != FA_OK)
    return st;
  // A backward workspace starts with the fp32 dQ accumulator, which step 11 reads 16 bytes at
  // a time and describes to the copy engine by a tensor map (both need 16-byte alignment): the
  // rule is the C API's for every step's backward.
  if (kBackward && need > 0 && reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0) {
    std::ostringstream os;
    os << "workspace (" << workspace
       << ") is not aligned to 16 bytes, as fa_backward requires of every step's workspace";
    return fail(FA_ERROR_INVALID_ARGUMENT, os.str());
  }
  // The first CUDA call: run_step (run_backward) checks the device's limits, then launches.
  if constexpr (kBackward)
    fa::run_backward(*s, p, t, workspace, static_cast<cudaStream_t>(stream));
  else
    fa::run_step(*s, p, t, workspace, static_cast<cudaStream_t>(stream));
  return FA_OK;
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

// Converts the C struct, copying the host arrays (cache_lens: batch entries; block_table:
// batch * max_pages when paged) and rejecting enum values out of range and null arrays.
fa_status to_decode_problem(const fa_decode_problem* in, fa::DecodeProblem* out) {
  if (!in) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer problem is null");
  if (fa_status st = check_dtype(in->dtype); st != FA_OK) return st;
  if (in->cache != FA_CACHE_CONTIGUOUS && in->cache != FA_CACHE_PAGED)
    return fail(FA_ERROR_INVALID_ARGUMENT,
                "cache (" + std::to_string(in->cache) + ") must be 0 (contiguous) or 1 (paged)");
  const bool paged = in->cache == FA_CACHE_PAGED;
  if (!in->cache_lens) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer cache_lens is null");
  if (paged && !in->block_table)
    return fail(FA_ERROR_INVALID_ARGUMENT, "pointer block_table is null (cache 1, paged)");
  out->batch = in->batch;
  out->heads_q = in->heads_q;
  out->heads_kv = in->heads_kv;
  out->head_dim = in->head_dim;
  out->q_len = in->q_len;
  out->scale = in->scale;
  out->dtype = static_cast<fa::DType>(in->dtype);
  out->cache = paged ? fa::CacheKind::Paged : fa::CacheKind::Contiguous;
  out->n_max = in->n_max;
  out->page_size = in->page_size;
  out->num_pages = in->num_pages;
  out->max_pages = in->max_pages;
  if (in->batch > 0) out->cache_lens.assign(in->cache_lens, in->cache_lens + in->batch);
  if (paged && in->batch > 0 && in->max_pages > 0)
    out->block_table.assign(in->block_table,
                            in->block_table + std::int64_t{in->batch} * in->max_pages);
  return FA_OK;
}

fa_status find_decode(const char* name, const fa::DecodeStepInfo** out) {
  if (!name) return fail(FA_ERROR_UNKNOWN_STEP, "pointer step is null");
  *out = fa::find_decode_step(name);
  if (*out) return FA_OK;
  std::string known;
  for (const fa::DecodeStepInfo* s : fa::decode_steps())
    known += (known.empty() ? "" : ", ") + std::string(s->name);
  return fail(FA_ERROR_UNKNOWN_STEP, std::string("step (") + name +
                                         ") is not a registered decoding step; known: " +
                                         (known.empty() ? "(none registered)" : known));
}

// The decoding step and the problem, checked (fa::check_decode_step).
fa_status prepare_decode(const char* step, const fa_decode_problem* problem,
                         const fa::DecodeStepInfo** s, fa::DecodeProblem* p) {
  g_last_error.clear();
  if (fa_status st = find_decode(step, s); st != FA_OK) return st;
  if (fa_status st = to_decode_problem(problem, p); st != FA_OK) return st;
  if (std::string e = fa::check_decode_step(**s, *p); !e.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, e);
  return FA_OK;
}

// num_splits as the C API takes it: 0 (the step's rule) or 1 .. the step's limit.
fa_status check_splits(const fa::DecodeStepInfo& s, int num_splits) {
  if (num_splits >= 0 && num_splits <= s.max_splits) return FA_OK;
  return fail(FA_ERROR_INVALID_ARGUMENT, "num_splits (" + std::to_string(num_splits) +
                                             ") must be 0 (the step's rule) or in "
                                             "[1, " +
                                             std::to_string(s.max_splits) + "] for step " + s.name);
}

// The split count of a launch: `num_splits`, or the step's rule on the current device for 0.
int splits_of(const fa::DecodeStepInfo& s, const fa::DecodeProblem& p, int num_splits) {
  return num_splits > 0 ? num_splits : fa::decode_splits(s, p);
}

// Where the workspace of fa_decode puts the copies of the host arrays: after the step's own
// scratch (rounded up to 16 bytes), cache_lens, then block_table.
struct DecodeWorkspace {
  std::size_t lens_offset = 0, table_offset = 0, total = 0;
};
DecodeWorkspace decode_workspace(const fa::DecodeStepInfo& s, const fa::DecodeProblem& p,
                                 int splits) {
  const std::size_t scratch = s.workspace_bytes ? s.workspace_bytes(p, splits) : 0;
  DecodeWorkspace w;
  w.lens_offset = (scratch + 15) / 16 * 16;
  w.table_offset = w.lens_offset + p.cache_lens.size() * sizeof(int);
  w.total = w.table_offset + p.block_table.size() * sizeof(int);
  return w;
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

int fa_num_decode_steps(void) { return static_cast<int>(fa::decode_steps().size()); }

const char* fa_decode_step_name(int index) {
  if (index < 0 || index >= fa_num_decode_steps()) return nullptr;
  return fa::decode_steps()[static_cast<std::size_t>(index)]->name;
}

const char* fa_decode_step_lesson(int index) {
  if (index < 0 || index >= fa_num_decode_steps()) return nullptr;
  return fa::decode_steps()[static_cast<std::size_t>(index)]->lesson;
}

fa_status fa_decode_splits(const char* step, const fa_decode_problem* problem, int* num_splits) {
  return guarded([&] {
    const fa::DecodeStepInfo* s = nullptr;
    fa::DecodeProblem p;
    if (fa_status st = prepare_decode(step, problem, &s, &p); st != FA_OK) return st;
    if (!num_splits) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer num_splits is null");
    *num_splits = fa::decode_splits(*s, p);
    return FA_OK;
  });
}

fa_status fa_decode_workspace_bytes(const char* step, const fa_decode_problem* problem,
                                    int num_splits, size_t* bytes) {
  return guarded([&] {
    const fa::DecodeStepInfo* s = nullptr;
    fa::DecodeProblem p;
    if (fa_status st = prepare_decode(step, problem, &s, &p); st != FA_OK) return st;
    if (!bytes) return fail(FA_ERROR_INVALID_ARGUMENT, "pointer bytes is null");
    if (fa_status st = check_splits(*s, num_splits); st != FA_OK) return st;
    *bytes = decode_workspace(*s, p, splits_of(*s, p, num_splits)).total;
    return FA_OK;
  });
}

fa_status fa_decode(const char* step, const fa_decode_problem* problem, int num_splits,
                    const void* q, const void* k_new, const void* v_new, void* k_cache,
                    void* v_cache, void* o, float* lse, void* workspace, size_t workspace_bytes,
                    void* stream) {
  return guarded([&] {
    const fa::DecodeStepInfo* s = nullptr;
    fa::DecodeProblem p;
    if (fa_status st = prepare_decode(step, problem, &s, &p); st != FA_OK) return st;
    if (fa_status st = check_splits(*s, num_splits); st != FA_OK) return st;
    // The pointer checks of fa::check_decode_launch without the device's limits (a copy of
    // the step with no device check). The lengths and the table are not pointers of the
    // caller's here: their device copies will be in the workspace, checked next; the host
    // arrays (not null) stand in for them.
    fa::DecodeTensors t{
        q, k_new, v_new, k_cache, v_cache, problem->cache_lens, problem->block_table, o, lse};
    fa::DecodeStepInfo host_checks = *s;
    host_checks.check_device = nullptr;
    if (std::string e =
            fa::check_decode_launch(host_checks, p, t, std::max(num_splits, 1), fa::DeviceLimits{});
        !e.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT, e);

    const int splits = splits_of(*s, p, num_splits);  // a CUDA call when num_splits is 0
    const DecodeWorkspace w = decode_workspace(*s, p, splits);
    if (fa_status st = check_workspace_size(std::string("step ") + s->name, w.total, workspace,
                                            workspace_bytes);
        st != FA_OK)
      return st;
    if (std::string e = fa::check_decode_workspace(*s, p, splits, workspace); !e.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT, e);
    auto* base = static_cast<unsigned char*>(workspace);
    t.cache_lens = reinterpret_cast<const int*>(base + w.lens_offset);
    t.block_table =
        p.block_table.empty() ? nullptr : reinterpret_cast<const int*>(base + w.table_offset);
    // The device's limits before anything is written (run_decode checks them again).
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    if (std::string e = fa::check_decode_launch(*s, p, t, splits, fa::device_limits(device));
        !e.empty())
      return fail(FA_ERROR_INVALID_ARGUMENT, e);
    // From pageable host memory: each copy returns once the source has been staged, so the
    // vectors may go when this function returns; the stream orders it before the kernels.
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    CUDA_CHECK(cudaMemcpyAsync(base + w.lens_offset, p.cache_lens.data(),
                               p.cache_lens.size() * sizeof(int), cudaMemcpyHostToDevice,
                               cuda_stream));
    if (!p.block_table.empty())
      CUDA_CHECK(cudaMemcpyAsync(base + w.table_offset, p.block_table.data(),
                                 p.block_table.size() * sizeof(int), cudaMemcpyHostToDevice,
                                 cuda_stream));
    fa::run_decode(*s, p, t, splits, workspace, cuda_stream);
    return FA_OK;
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
