// main.cpp — the one main() of every test program, for Catch2 3.x and 2.13 alike.
//
// GPU test programs (built with FA_GPU_TESTS) first look for a usable CUDA device. Without
// one — or when the device is one their step refuses outright (step 08 runs on compute
// capability 9.0 only) — they print why and exit with 77, which ctest reports as "skipped":
// a GPU test that did not run must never be counted as passed. For the same reason a run in
// which a test case skipped itself (FA_SKIP, tests/catch.hpp: e.g. too little free GPU memory
// for its case) and nothing failed also exits with 77.
#include <cstdio>

#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#ifdef FA_GPU_TESTS
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "common/launch.h"

namespace {

/// \brief "" when some step this program tests can run on the current device; otherwise why
/// the first cannot: its check_device refuses even the smallest problem it supports (step 08,
/// sm_90a code, on a GPU other than compute capability 9.0). Programs without steps: "".
std::string no_step_runs_here() {
  if (fa::steps().empty() && fa::decode_steps().empty()) return {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return {};  // run_step will report the error
  const fa::DeviceLimits limits = fa::device_limits(device);
  std::string first_reason;
  auto runs_here = [&](const std::string& why) {
    if (first_reason.empty()) first_reason = why;
    return why.empty();
  };
  for (const fa::StepInfo* s : fa::steps())
    if (runs_here(fa::device_refusal(*s, limits))) return {};
  for (const fa::DecodeStepInfo* s : fa::decode_steps())  // the decoding steps' programs
    if (runs_here(fa::device_refusal(*s, limits))) return {};
  return first_reason;
}

}  // namespace
#endif

namespace fa::test {
namespace {
bool g_skipped = false;
}  // namespace
void record_skip() { g_skipped = true; }
bool skipped() { return g_skipped; }
}  // namespace fa::test

int main(int argc, char** argv) {
#ifdef FA_GPU_TESTS
  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::printf("SKIPPED: no usable CUDA device (%s); GPU tests were not run\n", why.c_str());
    return 77;
  }
  if (const std::string why = no_step_runs_here(); !why.empty()) {
    std::printf("SKIPPED: %s; GPU tests were not run\n", why.c_str());
    return 77;
  }
#endif
  const int status = Catch::Session().run(argc, argv);
  // A test case skipped itself (FA_SKIP, tests/catch.hpp) and nothing failed: 77, skipped, not
  // passed. Catch2 3.3+ itself returns 4 when every test case was skipped.
  if (fa::test::skipped() && (status == 0 || status == 4)) {
    std::printf("SKIPPED: a test case of this run skipped itself (see above)\n");
    return 77;
  }
  return status;
}
