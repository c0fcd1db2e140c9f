// variants.cu — step 11's backward, version by version: the main kernel in several
// configurations (variants_d64.cu, variants_d128.cu and the 2-D kernel's
// variants_d64_2d.cu, variants_d128_2d.cu), each first checked against the double
// reference on small awkward problems (dQ, dK and dV judged by the backward suite's verdict,
// one problem in the deterministic mode), then timed on the benchmark shapes of
// docs/conventions.md (B·N = 16384, H·d = 2048, bf16, [B, N, H, d]) next to the registered
// step 11, in one process, on O and L made by step 07's forward (steps/harness/variants_table.h).
//
//   build/bin/variants_11 --ns 1024,4096,16384 --reps 20 --out-md docs/results/h200-variants-11.md
#include "variants.h"

int main(int argc, char** argv) {
  fa::variants::Table table;
  table.program = "variants_11";
  table.title = "Step 11's backward, version by version";
  table.head_dims = {64, 128};
  table.steps = {"11_backward_tc"};
  table.step_change = [](const fa::StepInfo&) -> std::string {
    return "step 11 as registered (BwdConfig)";
  };
  table.variants_for = [](int d) {
    std::vector<fa::step11::Variant> v;
    if (d == 64) {
      fa::step11::add_d64_variants(v);
      fa::step11::add_d64_2d_variants(v);
    }
    if (d == 128) {
      fa::step11::add_d128_variants(v);
      fa::step11::add_d128_2d_variants(v);
    }
    return v;
  };
  table.backward = true;
  table.forward_step = "07_flash_attention_2";
  return fa::variants::run_main(table, argc, argv);
}
