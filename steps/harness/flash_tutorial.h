/* flash_tutorial.h — C API: run any registered step on device pointers.
 *
 * Every call validates first (the same checks as the tour and the tests) and launches
 * nothing on bad input; the return code says what kind of error, fa_last_error() what
 * exactly (the parameter, its value and the limit). Used by scripts/flash_tutorial.py.
 */
#ifndef FLASH_TUTORIAL_H
#define FLASH_TUTORIAL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

/** Return codes. */
typedef enum {
  FA_OK = 0,
  FA_ERROR_INVALID_ARGUMENT = 1, /**< the problem or a pointer is not acceptable */
  FA_ERROR_UNKNOWN_STEP = 2,     /**< no step by that name */
  FA_ERROR_CUDA = 3,             /**< a CUDA call failed */
  FA_ERROR_INTERNAL = 4
} fa_status;

/** The problem, as in common/problem.h. dtype: 0 fp32, 1 fp16, 2 bf16. layout: 0 [B,N,H,d],
 * 1 [B,H,N,d]. scale 0 means 1/sqrt(head_dim). causal is bottom-right aligned. */
typedef struct {
  int batch, heads_q, heads_kv, n_q, n_kv, head_dim;
  float scale;
  int causal;
  int dtype;
  int layout;
} fa_problem;

/** Number of registered GPU steps. */
FA_API int fa_num_steps(void);
/** Folder name of step `index` (0-based), e.g. "04_flash_attention"; NULL if out of range. */
FA_API const char* fa_step_name(int index);
/** One line on what step `index` teaches; NULL if out of range. */
FA_API const char* fa_step_lesson(int index);
/** Checks that `step` can run `problem` (shapes, dtype, head_dim, features). */
FA_API fa_status fa_check(const char* step, const fa_problem* problem);
/** Device scratch bytes `step` needs for `problem`, in *bytes. */
FA_API fa_status fa_workspace_bytes(const char* step, const fa_problem* problem, size_t* bytes);
/** Runs `step` asynchronously on `stream` (a cudaStream_t, or NULL). q, k, v, o are in the
 * problem's dtype and layout; lse is fp32 [B, H_q, N_q]; workspace holds at least
 * fa_workspace_bytes bytes (may be NULL when that is 0). */
FA_API fa_status fa_run(const char* step, const fa_problem* problem, const void* q,
                        const void* k, const void* v, void* o, float* lse, void* workspace,
                        size_t workspace_bytes, void* stream);
/** The message of the last error on this thread ("" if none). */
FA_API const char* fa_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASH_TUTORIAL_H */
