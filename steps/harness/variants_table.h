// variants_table.h — the program behind a step's table of versions (bin/variants_NN): one
// kernel in several configurations, each first checked against the double reference on small
// awkward problems, then timed on the benchmark shapes next to registered steps, in one
// process, and written out as a Markdown table. A table times the forward pass, or the
// backward (Table::backward: dQ, dK, dV judged by the backward suite's verdict, timed on O
// and L made by a registered forward step).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::variants {

/// \brief One configuration of a step's kernel, launchable on any bf16 problem of its head dim:
/// `run` for a forward table, `backward` (and its workspace) for a backward table.
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
  /// Runs the backward pass (dQ, dK, dV) on `t` with `workspace`, on the default stream.
  std::function<void(const Problem&, const BackwardTensors&, void* workspace)> backward;
  /// The device scratch `backward` needs for a problem (its contents on entry do not matter).
  std::function<std::size_t(const Problem&)> backward_workspace_bytes;
};

/// \brief Sets v.regs and v.spill from the compiled `kernel` (a __global__ function's address):
/// its registers per thread and local-memory bytes, as ptxas reported them.
void set_kernel_counts(Variant& v, const void* kernel);

/// \brief What a step's variants program is made of.
struct Table {
  std::string program;             ///< "variants_07"
  std::string title;               ///< the Markdown heading, e.g. "Step 07, version by version"
  std::vector<int> head_dims;      ///< the head dims variants are compiled for
  std::vector<std::string> steps;  ///< registered steps timed first, on the same inputs
  std::function<std::string(const StepInfo&)> step_change;  ///< their "change" column
  std::function<std::vector<Variant>(int)> variants_for;    ///< the variants of one head dim
  bool backward = false;     ///< time the backward passes (steps' and variants'), not the forward
  std::string forward_step;  ///< backward: the registered step that makes O and L to time on
};

/// \brief The whole program: parses --d, --ns, --reps, --warmup, --out-md, --meta; checks
/// every variant (a failing one is reported and not timed), times the steps and the variants
/// (forward, or backward with Table::backward), prints the tables and writes them to
/// --out-md. \return the process's exit status (77: no device)
int run_main(const Table& table, int argc, char** argv);

}  // namespace fa::variants
