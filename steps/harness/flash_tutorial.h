/** \file flash_tutorial.h
 * \brief C API: run any registered step, forward or backward, on device pointers.
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

/** \brief Return codes. On any code but FA_OK, fa_last_error() holds one line naming the
 * argument, its value and the limit (README, "Limits and errors"). */
typedef enum {
  FA_OK = 0,                     /**< success (fa_last_error() is then "") */
  FA_ERROR_INVALID_ARGUMENT = 1, /**< a null pointer (problem, bytes, q, k, v, o, lse, d_o,
                                      dq, dk, dv, a needed workspace), a misaligned pointer, a
                                      workspace too small, a dtype or layout out of range, a
                                      pass the step does not have, or a problem the step
                                      cannot run */
  FA_ERROR_UNKNOWN_STEP = 2,     /**< no step by that name, or the name is NULL */
  FA_ERROR_CUDA = 3,             /**< a CUDA call failed (only fa_run and fa_backward make
                                      any, after every check above passed) */
  FA_ERROR_INTERNAL = 4          /**< any other exception (see fa_last_error) */
} fa_status;

/** \brief The problem, as in common/problem.h. dtype: 0 fp32, 1 fp16, 2 bf16. layout: 0 [B,N,H,d],
 * 1 [B,H,N,d]. scale 0 means 1/sqrt(head_dim). causal is bottom-right aligned. */
typedef struct {
  /**@{*/
  /** The shape: B, H_q, H_kv, N_q, N_kv and d, as in fa::Problem. */
  int batch, heads_q, heads_kv, n_q, n_kv, head_dim;
  /**@}*/
  float scale; /**< softmax scale; 0 means 1/sqrt(head_dim) */
  int causal;  /**< nonzero: causal mask, bottom-right aligned */
  int dtype;   /**< 0 fp32, 1 fp16, 2 bf16 */
  int layout;  /**< 0 [B,N,H,d], 1 [B,H,N,d] */
} fa_problem;

/** \brief Number of registered GPU steps. \return the count */
FA_API int fa_num_steps(void);
/** \brief Folder name of step `index` (0-based), e.g. "04_flash_attention"; NULL if out of
 * range. \param index 0 .. fa_num_steps() - 1 \return the name, a static string */
FA_API const char* fa_step_name(int index);
/** \brief One line on what step `index` teaches; NULL if out of range.
 * \param index 0 .. fa_num_steps() - 1 \return the lesson, a static string */
FA_API const char* fa_step_lesson(int index);
/** \brief Which passes a step has: bits of fa_step_passes(). */
typedef enum {
  FA_PASS_FORWARD = 1, /**< the step runs the forward pass (fa_run) */
  FA_PASS_BACKWARD = 2 /**< the step runs the backward pass (fa_backward) */
} fa_pass;
/** \brief The passes step `index` runs: FA_PASS_FORWARD, FA_PASS_BACKWARD or both, OR-ed;
 * 0 if `index` is out of range (every registered step has at least one pass).
 * \param index 0 .. fa_num_steps() - 1 \return the fa_pass bits, or 0 */
FA_API int fa_step_passes(int index);
/** \brief Checks that `step` can run `problem` (shapes, dtype, head_dim, features), for
 * whichever passes it has (fa_step_passes).
 * \param step a step name (as in fa_step_name, or its number or slug)
 * \param problem the problem \return FA_OK, or the error (then see fa_last_error) */
FA_API fa_status fa_check(const char* step, const fa_problem* problem);
/** \brief Device scratch bytes `step`'s forward pass needs for `problem`, in *bytes. A step
 * without a forward pass is refused (FA_ERROR_INVALID_ARGUMENT).
 * \param step a step name \param problem the problem \param bytes receives the size
 * \return FA_OK, or the error (then see fa_last_error) */
FA_API fa_status fa_workspace_bytes(const char* step, const fa_problem* problem, size_t* bytes);
/** \brief Runs `step` asynchronously on `stream` (a cudaStream_t, or NULL). q, k, v, o are in
 * the problem's dtype and layout; lse is fp32 [B, H_q, N_q]; workspace holds at least
 * fa_workspace_bytes bytes (may be NULL when that is 0).
 * \param step a step name \param problem the problem
 * \param q Q \param k K \param v V \param o O (written) \param lse L (written)
 * \param workspace device scratch \param workspace_bytes its size in bytes
 * \param stream a cudaStream_t, or NULL for the default stream
 * \return FA_OK once launched, or the error (then see fa_last_error); nothing is launched
 * on an error. The checks, in order, all before the first CUDA call: the step name (and that
 * it has a forward pass), the
 * problem (as fa_check), the pointers q, k, v, o, lse (not NULL; q, k, v, o aligned to the
 * step's vector loads, 16 bytes for steps 04-08; lse to 4), then the workspace (at least
 * fa_workspace_bytes, not NULL when that is above 0). Then the device's limits (grid,
 * shared memory) and the launch. */
FA_API fa_status fa_run(const char* step, const fa_problem* problem, const void* q, const void* k,
                        const void* v, void* o, float* lse, void* workspace, size_t workspace_bytes,
                        void* stream);
/** \brief Device scratch bytes `step`'s backward pass needs for `problem`, in *bytes. A step
 * without a backward pass is refused (FA_ERROR_INVALID_ARGUMENT).
 * \param step a step name \param problem the problem \param bytes receives the size
 * \return FA_OK, or the error (then see fa_last_error) */
FA_API fa_status fa_backward_workspace_bytes(const char* step, const fa_problem* problem,
                                             size_t* bytes);
/** \brief Runs `step`'s backward pass asynchronously on `stream`: dq, dk and dv from q, k, v,
 * the forward's o and lse, and d_o (the gradient of the loss with respect to o). q, k, v, o,
 * d_o, dq, dk and dv are in the problem's dtype and layout (dq and d_o shaped like q, dk and
 * dv like k; dk and dv summed over each group of query heads); lse is the forward's fp32
 * [B, H_q, N_q]. workspace holds at least fa_backward_workspace_bytes bytes (may be NULL when
 * that is 0); its contents on entry do not matter.
 * \param step a step name \param problem the problem
 * \param q Q \param k K \param v V \param o O, the forward's output \param lse L, the forward's
 * row logsumexp \param d_o dO \param dq dQ (written) \param dk dK (written) \param dv dV
 * (written) \param workspace device scratch \param workspace_bytes its size in bytes
 * \param stream a cudaStream_t, or NULL for the default stream
 * \return FA_OK once launched, or the error (then see fa_last_error); nothing is launched on
 * an error. The checks, in order, all before the first CUDA call, as for fa_run: the step name
 * (and that it has a backward pass), the problem (as fa_check), the pointers q, k, v, o, lse,
 * d_o, dq, dk, dv (not NULL; aligned to the step's loads, lse to 4), then the workspace. Then
 * the device's limits and the launch. */
FA_API fa_status fa_backward(const char* step, const fa_problem* problem, const void* q,
                             const void* k, const void* v, const void* o, const float* lse,
                             const void* d_o, void* dq, void* dk, void* dv, void* workspace,
                             size_t workspace_bytes, void* stream);
/** \brief What fa_merge combines: `parts` partial results of the same query rows over
 * disjoint key sets (the forward pass's O and L of each), e.g. one per step of a ring
 * (steps/13_ring_attention). */
typedef struct {
  int parts;    /**< partials per row, 1 .. 1024 */
  int batch;    /**< B >= 1 */
  int heads;    /**< H >= 1 */
  int rows;     /**< query rows per (batch, head) >= 1 */
  int head_dim; /**< 64 or 128 */
  int dtype;    /**< of every O: 1 fp16, 2 bf16 */
  int layout;   /**< of every O: 0 [B,rows,H,d], 1 [B,H,rows,d] */
} fa_merge_problem;

/** \brief Merges `parts` partial results per row into one, asynchronously on `stream`, in
 * fp32: L = log Σ_s exp(L_s), O = Σ_s exp(L_s − L)·O_s (step 12's combine of its splits, the
 * same code). A partial with L_s = −inf (the row saw no key there) is skipped and its O_s never
 * read; a row whose every partial is empty gets O = 0, L = −inf; a NaN L_s makes the row NaN.
 * \param problem the shapes \param o_parts the partials' O, one after another, each in the
 * problem's dtype and layout \param lse_parts their L, fp32 [parts][B, H, rows] \param o the
 * merged O (written; the shape of one partial) \param lse the merged L (written, fp32
 * [B, H, rows]) \param stream a cudaStream_t, or NULL for the default stream
 * \return FA_OK once launched, or the error (then see fa_last_error); nothing is launched on
 * an error. The checks, in order, before the first CUDA call: the problem (a dtype or layout
 * code out of range, parts, batch, heads, rows, head_dim, dtype), then the pointers (not NULL;
 * o_parts and o aligned to 16 bytes, lse_parts and lse to 4). */
FA_API fa_status fa_merge(const fa_merge_problem* problem, const void* o_parts,
                          const float* lse_parts, void* o, float* lse, void* stream);
/** \brief The message of the last error on this thread ("" if none).
 * \return the message, valid until the next call on this thread */
FA_API const char* fa_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASH_TUTORIAL_H */
