// variants.cu — the measured table of versions of chapter 07.
//
// Runs step 07's kernel in several configurations (variants_d64.cu, variants_d128.cu): first
// each is checked against the double reference on small awkward problems (the tests' judge,
// compare.h), then timed on the benchmark shapes of docs/conventions.md (B·N = 16384, H·d = 2048,
// bf16, [B, N, H, d]) next to the registered steps 05 and 07, in one process. A variant that fails
// its check is reported and not timed (steps/harness/variants_table.h).
//
//   build/bin/variants_07 --d 128 --ns 1024,4096,16384 --out-md docs/results/h200-variants.md
#include "variants.h"

int main(int argc, char** argv) {
  fa::variants::Table table;
  table.program = "variants_07";
  table.title = "Step 07, version by version";
  table.head_dims = {64, 128};
  table.steps = {"05_tensor_cores", "07_flash_attention_2"};
  table.step_change = [](const fa::StepInfo& s) -> std::string {
    return s.number == 5 ? "step 05: WMMA, S and P through shared memory"
                         : "step 07 as registered (FwdConfig)";
  };
  table.variants_for = [](int d) {
    std::vector<fa::step07::Variant> v;
    if (d == 64) fa::step07::add_d64_variants(v);
    if (d == 128) fa::step07::add_d128_variants(v);
    return v;
  };
  return fa::variants::run_main(table, argc, argv);
}
