// variants_table.h — the program behind a step's table of versions (bin/variants_NN): one
// kernel in several configurations, each first checked against the double reference on small
// awkward problems, then timed on the benchmark shapes next to registered steps, in one
// process, and written out as a Markdown table.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::variants {

/// \brief One configuration of a step's kernel, launchable on any bf16 problem of its head dim.
struct Variant {
  std::string name;    ///< short label, e.g. "v2"
  std::string change;  ///< what it changes against the row before
  std::string config;  ///< tiles, warps, stages and switches
  int head_dim = 0;    ///< the head dim it is compiled for
  int smem_bytes = 0;  ///< dynamic shared memory per block
  int regs = 0;        ///< registers per thread of the non-causal kernel
  int spill = 0;       ///< local-memory bytes per thread of the non-causal kernel
  /// Runs the forward pass (causal or not, by the problem) on `t`, on the default stream.
  std::function<void(const Problem&, const DeviceTensors&)> run;
};

/// \brief What a step's variants program is made of.
struct Table {
  std::string program;             ///< "variants_07"
  std::string title;               ///< the Markdown heading, e.g. "Step 07, version by version"
  std::vector<int> head_dims;      ///< the head dims variants are compiled for
  std::vector<std::string> steps;  ///< registered steps timed first, on the same inputs
  std::function<std::string(const StepInfo&)> step_change;  ///< their "change" column
  std::function<std::vector<Variant>(int)> variants_for;    ///< the variants of one head dim
};

/// \brief The whole program: parses --d, --ns, --reps, --warmup, --out-md, --meta; checks
/// every variant (a failing one is reported and not timed), times the steps and the variants,
/// prints the tables and writes them to --out-md. \return the process's exit status (77: no
/// device)
int run_main(const Table& table, int argc, char** argv);

}  // namespace fa::variants
