// gbench.h — what the Google Benchmark programs (bench_all, bench_decode) share: the command
// line after CLI11 (what CLI11 left, app.allow_extras(), goes to Google Benchmark, which
// takes its --benchmark_* flags; anything else is refused, and so is a --benchmark_min_time
// it would only reject once running), the timed loop (each call after the GPU spin, timed
// with CUDA events, manual time) and the exit status.
#pragma once

#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/perf.h"
#include "steps/harness/cli.h"
#include "steps/harness/spin.h"

namespace fa::bench {

/// \brief Hands the arguments CLI11 left to benchmark::Initialize. \param app the parsed
/// application (allow_extras) \param argv0 the program's name \return -1 to go on, or
/// fa::cli::kBadInput after printing the refusal
inline int init_benchmark(const CLI::App& app, char* argv0) {
  std::vector<std::string> rest = app.remaining();
  // Google Benchmark checks --benchmark_min_time only when it runs, by aborting (1.8), or
  // leaves a value it cannot read unconsumed (1.7, refused below as an unknown option). Check
  // the form here: seconds ("0.5"; 1.8 also takes "0.5s") or iterations ("100x", 1.8 only).
  static const std::regex kMinTime(R"(([0-9]+\.?[0-9]*|\.[0-9]+)s?|[0-9]+x)");
  for (const std::string& s : rest) {
    const std::string flag = "--benchmark_min_time=";
    if (s.rfind(flag, 0) == 0 && !std::regex_match(s.substr(flag.size()), kMinTime))
      return fa::cli::refuse(s.substr(0, flag.size() - 1) + " (" + s.substr(flag.size()) +
                             ") must be seconds, e.g. 0.5 or 0.5s, or iterations, e.g. 100x");
  }
  static std::vector<std::string> kept;  // benchmark::Initialize keeps pointers into argv
  kept = std::move(rest);
  std::vector<char*> gb_argv = {argv0};
  for (std::string& s : kept) gb_argv.push_back(s.data());
  gb_argv.push_back(nullptr);
  int gb_argc = static_cast<int>(gb_argv.size()) - 1;
  benchmark::Initialize(&gb_argc, gb_argv.data());
  if (gb_argc > 1)
    return fa::cli::refuse(std::string("unknown option ") + gb_argv[1] +
                           " (neither this program's nor a --benchmark_* flag; see --help)");
  return -1;
}

/// \brief The timed loop of a benchmark: every iteration queues the GPU spin (spin.h), then
/// times one `call` with CUDA events on the default stream and reports it as the iteration's
/// manual time. \param state the benchmark's state \param call the work to time (warmed up
/// by the caller) \param spin_cycles the spin's clock cycles (0: none)
/// \return the times, in milliseconds, one per iteration
inline std::vector<double> time_calls(benchmark::State& state, const std::function<void()>& call,
                                      long long spin_cycles) {
  std::vector<double> ms;
  EventTimer timer;
  for (auto _ : state) {
    gpu_spin(spin_cycles);  // the same duty cycle as the peers (docs/conventions.md, Timing)
    timer.start();
    call();
    const double t = timer.stop_ms();
    state.SetIterationTime(t * 1e-3);
    ms.push_back(t);
  }
  return ms;
}

/// \brief After RunSpecifiedBenchmarks: says how many benchmarks stopped with an error.
/// \param failed their names \return main's exit status, 0 when none did, else 1
inline int benchmarks_status(const std::set<std::string>& failed) {
  if (failed.empty()) return 0;
  std::fprintf(stderr, "%zu benchmark%s stopped with an error (see ERROR OCCURRED above)\n",
               failed.size(), failed.size() == 1 ? "" : "s");
  return 1;
}

}  // namespace fa::bench
