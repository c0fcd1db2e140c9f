// append.cu — step 12's first kernel: this step's new keys and values into the cache.
//
// grid (q_len, B), block 128 threads: block (i, b) copies row i of sequence b's new K and V,
// H_kv · d elements each, to position cache_lens[b] + i of the cache — through the block table
// for a paged cache — in 16-byte pieces. The attention kernel, launched after it on the same
// stream, then reads the new rows like any other: the new tokens attend to themselves.
#include "decode_kernel.cuh"

namespace fa::step12 {
namespace {

constexpr int kAppendThreads = 128;

__global__ void __launch_bounds__(kAppendThreads)
    append_kernel(const __grid_constant__ DecodeParams p) {
  const int i = blockIdx.x, b = blockIdx.y;
  const int64_t dst = cache_row(p, b, p.cache_lens[b] + i);
  if (dst < 0) return;  // outside the cache (a device table that disagrees with the host's)
  const int64_t row_elems = int64_t{p.heads_kv} * p.head_dim;  // a multiple of 8 (d = 64, 128)
  const int64_t src = (int64_t{b} * p.q_len + i) * row_elems;
  // 16-bit elements: a row is row_elems / 8 pieces of 16 bytes, every one aligned.
  const uint4* k_src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.k_new) + src);
  const uint4* v_src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.v_new) + src);
  uint4* k_dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.k_cache) + dst);
  uint4* v_dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.v_cache) + dst);
  const int chunks = static_cast<int>(row_elems / 8);
  for (int c = threadIdx.x; c < chunks; c += kAppendThreads) {
    k_dst[c] = k_src[c];
    v_dst[c] = v_src[c];
  }
}

}  // namespace

void run_append(const DecodeParams& p, cudaStream_t stream) {
  append_kernel<<<dim3(p.q_len, p.batch), kAppendThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fa::step12
