/** \file flash_tutorial.h
 * \brief C API: run any registered step, forward or backward, on device pointers; and the
 * decoding steps (a few new tokens per sequence against a contiguous or paged K/V cache).
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
                                      dq, dk, dv; k_new, v_new, k_cache, v_cache, cache_lens,
                                      block_table, num_splits; a needed workspace), a
                                      misaligned pointer, a workspace too small, a dtype,
                                      layout, cache kind or split count out of range, a pass
                                      the step does not have, or a problem the step cannot
                                      run */
  FA_ERROR_UNKNOWN_STEP = 2,     /**< no step by that name, or the name is NULL */
  FA_ERROR_CUDA = 3,             /**< a CUDA call failed (only fa_run, fa_backward and
                                      fa_decode make any, after every check above passed, and
                                      fa_decode_splits, and fa_decode_workspace_bytes with
                                      num_splits 0, which read the current device) */
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
 * d_o, dq, dk, dv (not NULL; aligned to the step's loads, lse to 4), then the workspace (as for
 * fa_run, and 16-byte aligned when one is needed). Then the device's limits and the launch. */
FA_API fa_status fa_backward(const char* step, const fa_problem* problem, const void* q,
                             const void* k, const void* v, const void* o, const float* lse,
                             const void* d_o, void* dq, void* dk, void* dv, void* workspace,
                             size_t workspace_bytes, void* stream);
/** \brief Which cache a decoding step reads and appends into: fa_decode_problem::cache. */
typedef enum {
  FA_CACHE_CONTIGUOUS = 0, /**< K and V are [B, N_max, H_kv, d]: N_max rows per sequence */
  FA_CACHE_PAGED = 1       /**< K and V are a pool [num_pages, page_size, H_kv, d] of pages,
                                found through a block table [B, max_pages] */
} fa_cache_kind;

/** \brief A decoding step, as fa::DecodeProblem (common/decode.h): q_len new tokens of each of
 * B sequences attend to everything their sequence has cached, causal among the new tokens
 * (bottom-right aligned). cache_lens and block_table are HOST arrays: they are validated on the
 * host (every length against n_max or the pages, every used table entry against num_pages)
 * and copied into the workspace for the kernels; the caller may reuse them as soon as
 * fa_decode returns. */
typedef struct {
  int batch;              /**< B, sequences */
  int heads_q;            /**< H_q, query (and output) heads */
  int heads_kv;           /**< H_kv, key/value heads; H_q must be a multiple of it (GQA, MQA) */
  int head_dim;           /**< d */
  int q_len;              /**< new tokens of every sequence in this step, 1..16 */
  float scale;            /**< softmax scale; 0 means 1/sqrt(head_dim) */
  int dtype;              /**< 0 fp32, 1 fp16, 2 bf16: Q, the new K/V, the cache and O */
  int cache;              /**< FA_CACHE_CONTIGUOUS or FA_CACHE_PAGED */
  int n_max;              /**< contiguous cache: rows per sequence (ignored when paged) */
  int page_size;          /**< paged cache: rows per page, 16..256 (ignored when contiguous) */
  int num_pages;          /**< paged cache: pages in the pool (ignored when contiguous) */
  int max_pages;          /**< paged cache: columns of block_table (ignored when contiguous) */
  const int* cache_lens;  /**< host array of batch ints: keys each sequence holds before the
                               step (the new rows go to cache_lens[b] .. + q_len - 1) */
  const int* block_table; /**< paged cache: host array [batch, max_pages] of pool page indices
                               (page j of sequence b is entry b * max_pages + j; entries past
                               the pages a sequence uses are not read); NULL when contiguous */
} fa_decode_problem;

/** \brief Number of registered decoding steps (listed apart from fa_num_steps()).
 * \return the count */
FA_API int fa_num_decode_steps(void);
/** \brief Folder name of decoding step `index` (0-based), e.g. "12_decode"; NULL if out of
 * range. \param index 0 .. fa_num_decode_steps() - 1 \return the name, a static string */
FA_API const char* fa_decode_step_name(int index);
/** \brief One line on what decoding step `index` teaches; NULL if out of range.
 * \param index 0 .. fa_num_decode_steps() - 1 \return the lesson, a static string */
FA_API const char* fa_decode_step_lesson(int index);
/** \brief The split count decoding `step`'s rule picks for `problem` on the current CUDA
 * device (it reads the device's SM count: FA_ERROR_CUDA without one). Pass it, or any count
 * from 1 to the step's limit, to fa_decode_workspace_bytes and fa_decode.
 * \param step a decoding step name (as in fa_decode_step_name, or its number or slug)
 * \param problem the decoding problem \param num_splits receives the count
 * \return FA_OK, or the error (then see fa_last_error) */
FA_API fa_status fa_decode_splits(const char* step, const fa_decode_problem* problem,
                                  int* num_splits);
/** \brief Device scratch bytes fa_decode needs for `problem` with `num_splits` splits: the
 * step's partial O and L per split, then room for the copies of cache_lens and block_table.
 * The problem is checked as by fa_decode; no device is needed unless num_splits is 0 (the
 * step's rule on the current device, as fa_decode_splits).
 * \param step a decoding step name \param problem the decoding problem
 * \param num_splits 1 .. the step's limit, or 0 for the step's rule \param bytes receives the
 * size \return FA_OK, or the error (then see fa_last_error) */
FA_API fa_status fa_decode_workspace_bytes(const char* step, const fa_decode_problem* problem,
                                           int num_splits, size_t* bytes);
/** \brief Runs decoding `step` asynchronously on `stream`: appends this step's new keys and
 * values into the cache at rows cache_lens[b] .. cache_lens[b] + q_len - 1 of each sequence
 * (through the block table when paged), then attends (split-KV) and writes O and L. q, o are
 * [B, q_len, H_q, d], k_new and v_new [B, q_len, H_kv, d], all in the problem's dtype; the
 * caches are [B, n_max, H_kv, d] (contiguous) or [num_pages, page_size, H_kv, d] (paged);
 * lse is fp32 [B, H_q, q_len]. workspace holds at least fa_decode_workspace_bytes bytes for the
 * same num_splits, aligned like the tensors.
 * \param step a decoding step name \param problem the decoding problem
 * \param num_splits 1 .. the step's limit, or 0 for the step's rule (fa_decode_splits)
 * \param q Q \param k_new this step's new keys \param v_new this step's new values
 * \param k_cache the K cache (appended into) \param v_cache the V cache (appended into)
 * \param o O (written) \param lse L (written) \param workspace device scratch
 * \param workspace_bytes its size in bytes
 * \param stream a cudaStream_t, or NULL for the default stream
 * \return FA_OK once launched, or the error (then see fa_last_error); nothing is copied or
 * launched on an error. The checks, in order: the step name; the problem (the enums, the
 * cache_lens and block_table pointers, then fa::validate: shapes, q_len, every length against
 * n_max or its pages, at most 2^30 rows per sequence, 2^40 elements per cache (the kernels
 * address the cache with 64-bit offsets) and 2^31 rows per page pool (num_pages * page_size),
 * every used block-table entry in [0, num_pages), no
 * page appended into twice; then the step's dtype and head dim); num_splits; the pointers q, k_new,
 * v_new, k_cache, v_cache, o, lse (not NULL, aligned to the step's 16-byte copies, lse to 4); the
 * split count of the step's rule when num_splits is 0 (a CUDA call); workspace_bytes and the
 * workspace (not NULL, aligned); the device's limits (grid, shared memory, compute
 * capability). With num_splits from 1 up, everything before the device's limits is checked
 * without a CUDA call. Then the copies of cache_lens and block_table into the workspace and
 * the launches. */
FA_API fa_status fa_decode(const char* step, const fa_decode_problem* problem, int num_splits,
                           const void* q, const void* k_new, const void* v_new, void* k_cache,
                           void* v_cache, void* o, float* lse, void* workspace,
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
