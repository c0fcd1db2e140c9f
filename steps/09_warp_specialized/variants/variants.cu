// variants.cu — chapter 09's ablation: step 09's kernel with its techniques added one at a
// time (variants_d64.cu, variants_d128.cu) and with other tiles (variants_d128_tiles.cu), each
// checked against the double reference, then timed next to the registered steps 08 and 09 in
// one process (steps/harness/variants_table.h).
//
//   build/bin/variants_09 --ns 1024,4096,16384 --out-md docs/results/h200-variants-09.md
#include "variants.h"

int main(int argc, char** argv) {
  fa::variants::Table table;
  table.program = "variants_09";
  table.title = "Step 09, technique by technique";
  table.head_dims = {64, 128};
  table.steps = {"08_tma_wgmma", "09_warp_specialized"};
  table.step_change = [](const fa::StepInfo& s) -> std::string {
    return s.number == 8 ? "step 08: every warpgroup loads, multiplies and exponentiates in turn"
                         : "step 09 as registered (FwdConfig)";
  };
  table.variants_for = [](int d) {
    std::vector<fa::step09::Variant> v;
    if (d == 64) fa::step09::add_d64_variants(v);
    if (d == 128) {
      fa::step09::add_d128_variants(v);
      fa::step09::add_d128_tile_variants(v);
    }
    return v;
  };
  return fa::variants::run_main(table, argc, argv);
}
