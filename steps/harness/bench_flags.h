// bench_flags.h — the benchmark programs' command line after CLI11: what CLI11 left
// (app.allow_extras()) goes to Google Benchmark, which takes its --benchmark_* flags; anything
// else is refused, and so is a --benchmark_min_time it would only reject once running.
#pragma once

#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>

#include <regex>
#include <string>
#include <vector>

#include "steps/harness/cli.h"

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

}  // namespace fa::bench
