// perf_formulas.cpp — prints common/perf.h's FLOP and byte counts, forward and backward, and
// the bytes a decoding step reads from its cache (DecodeProblem::kv_bytes_read, every sequence
// attending to N_kv keys) for a list of problems as JSON, for tests/check_perf_formulas.py, which
// recomputes them with scripts/fa_perf.py and fails on any difference (one source of truth for the
// formulas, written in two languages).
//
//   build/bin/perf_formulas > perf.json
#include <cstdio>

#include "common/decode.h"
#include "common/perf.h"
#include "common/problem.h"

namespace {

struct Case {
  int batch, heads_q, heads_kv, n_q, n_kv, d;
  bool causal;
  fa::DType dtype;
};

// Square and rectangular (N_q ≠ N_kv both ways), causal and not, MHA, GQA and MQA, every
// dtype, the benchmark shapes (hidden size 2048, B·N = 16384) and sizes past 2³¹ elements.
constexpr Case kCases[] = {
    {1, 1, 1, 1, 1, 1, false, fa::DType::F32},
    {2, 4, 2, 128, 128, 64, false, fa::DType::F32},
    {2, 4, 2, 128, 128, 64, true, fa::DType::F16},
    {1, 8, 1, 100, 300, 96, true, fa::DType::BF16},
    {3, 6, 3, 300, 100, 32, true, fa::DType::F32},
    {3, 6, 3, 300, 100, 32, false, fa::DType::BF16},
    {32, 32, 32, 512, 512, 64, false, fa::DType::BF16},
    {4, 32, 32, 4096, 4096, 64, true, fa::DType::F16},
    {8, 16, 16, 2048, 2048, 128, false, fa::DType::F32},
    {1, 16, 16, 16384, 16384, 128, true, fa::DType::BF16},
    {1, 64, 8, 1, 65536, 128, false, fa::DType::F16},
    {16, 64, 4, 16384, 32768, 256, true, fa::DType::F32},
};

}  // namespace

int main() {
  std::printf("[\n");
  const int n = static_cast<int>(sizeof kCases / sizeof kCases[0]);
  for (int i = 0; i < n; ++i) {
    const Case& c = kCases[i];
    fa::Problem p = fa::make_problem(c.batch, c.heads_q, c.heads_kv, c.n_q, c.n_kv, c.d, c.causal);
    p.dtype = c.dtype;
    fa::DecodeProblem dec;  // B sequences of N_kv keys, one new token each
    dec.batch = c.batch;
    dec.heads_q = c.heads_q;
    dec.heads_kv = c.heads_kv;
    dec.head_dim = c.d;
    dec.dtype = c.dtype;
    dec.q_len = 1;
    dec.cache_lens.assign(c.batch, c.n_kv - 1);
    dec.n_max = c.n_kv;
    std::printf(
        " {\"batch\": %d, \"heads_q\": %d, \"heads_kv\": %d, \"n_q\": %d, \"n_kv\": %d, "
        "\"d\": %d, \"causal\": %s, \"dtype\": \"%s\", \"flops\": %.17g, "
        "\"min_io_bytes\": %.17g, \"nxn_matrix_bytes\": %.17g, \"backward_flops\": %.17g, "
        "\"backward_min_io_bytes\": %.17g, \"decode_kv_bytes\": %.17g}%s\n",
        c.batch, c.heads_q, c.heads_kv, c.n_q, c.n_kv, c.d, c.causal ? "true" : "false",
        fa::dtype_name(c.dtype), fa::attention_flops(p), fa::min_io_bytes(p),
        fa::nxn_matrix_bytes(p), fa::attention_backward_flops(p), fa::backward_min_io_bytes(p),
        dec.kv_bytes_read(), i + 1 < n ? "," : "");
  }
  std::printf("]\n");
  return 0;
}
