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
#include <cuda_runtime_api.h>

#include <cstdio>
#endif

int main(int argc, char** argv) {
#ifdef FA_GPU_TESTS
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s); GPU tests were not run\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
