// main.cpp — the one main() of every test program, for Catch2 3.x and 2.13 alike.
//
// GPU test programs (built with FA_GPU_TESTS) first look for a usable CUDA device. Without
// one they print why and exit with 77, which ctest reports as "skipped" — a GPU test that
// did not run must never be counted as passed.
#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#ifdef FA_GPU_TESTS
#include <cstdio>
#include <string>

#include "common/launch.h"
#endif

int main(int argc, char** argv) {
#ifdef FA_GPU_TESTS
  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::printf("SKIPPED: no usable CUDA device (%s); GPU tests were not run\n", why.c_str());
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
