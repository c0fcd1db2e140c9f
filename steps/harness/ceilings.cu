// ceilings.cu — what this GPU reaches at its best, the ceilings the chapters' floors divide by:
// dense matrix products through cuBLAS (bf16 and fp16 with fp32 accumulation, fp32 SGEMM with
// TF32 off, TF32) and device-to-device copy bandwidth. docs/conventions.md (Ceilings) says
// how each is counted; scripts/ceilings.sh runs this program and keeps the JSON in
// docs/results/<gpu>-ceilings.json.
//
//   build/bin/ceilings                                   # table on stdout
//   build/bin/ceilings --out docs/results/h200-ceilings.json --commit abc1234
//
// Every operand is filled with full-entropy random values (uniform in [-1, 1), every
// significant bit random), each figure is the median of repeated CUDA-event timings after untimed
// warm-up runs, and each matrix product is checked on a sample of outputs against the host's
// double-precision sum (a fast wrong answer is not a ceiling). Without a usable CUDA device
// it says so and exits with status 77.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/launch.h"
#include "common/perf.h"
#include "steps/harness/cli.h"

namespace {

void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: " + cublasGetStatusString(st));
}

// The value of element i of operand `seed`: uniform in [-1, 1) with every one of fp32's 24
// significant bits random, from a 64-bit mix of both (splitmix64). Full-entropy data, not a
// few bits: on a tensor core, operands with mostly-zero mantissas (small integers, ±k/64)
// switch fewer bits, draw less power, and run measurably faster than real data would.
__host__ __device__ inline float random_value(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) / 8388608.0f - 1.0f;  // 24 random bits over 2^23, minus 1
}

template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T>
__global__ void fill_random(T* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = from_float<T>(random_value(seed, i));
}

template <typename T>
void fill(T* x, std::size_t n, std::uint64_t seed) {
  fill_random<T><<<1024, 256>>>(x, n, seed);
  CUDA_CHECK(cudaGetLastError());
}

float to_float(float x) { return x; }
float to_float(__half x) { return __half2float(x); }
float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// One measured figure, as the table and the JSON show it.
struct Figure {
  std::string name, label, units, method;
  double value = 0, median_ms = 0;
  std::string check;  // how the result was checked, and the worst error seen
};

struct Settings {
  int size = 8192, warmup = 5, reps = 20, samples = 16;
  int copy_mib = 2048;
};

// A device buffer freed on every path out.
struct Buffer {
  void* p = nullptr;
  explicit Buffer(std::size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// C = A·B, all n × n, column-major, through cublasGemmEx; timed, then checked on a sample.
template <typename T>
Figure gemm(cublasHandle_t h, const Settings& s, cudaDataType_t type, cublasComputeType_t compute,
            const char* name, const char* label, const char* method, double out_eps) {
  const int n = s.size;
  const std::size_t elems = std::size_t(n) * n;
  Buffer a(elems * sizeof(T)), b(elems * sizeof(T)), c(elems * sizeof(T));
  const std::uint64_t seed_a = 11, seed_b = 12;
  fill(static_cast<T*>(a.p), elems, seed_a);
  fill(static_cast<T*>(b.p), elems, seed_b);
  CUDA_CHECK(cudaMemset(c.p, 0, elems * sizeof(T)));
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    cublas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, type, n, b.p, type,
                              n, &beta, c.p, type, n, compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  };
  const double ms = fa::time_median_ms(run, s.warmup, s.reps);
  CUDA_CHECK(cudaDeviceSynchronize());

  // Check: sampled C(i, j) against Σ_l A(i, l)·B(l, j) in double (A(i, l) is element i + l·n).
  double worst = 0;
  for (int t = 0; t < s.samples; ++t) {
    const int i = int((std::uint64_t(t) * 2654435761u + 7) % n);
    const int j = int((std::uint64_t(t) * 40503u + 3 * t + 1) % n);
    T got_raw;
    CUDA_CHECK(cudaMemcpy(&got_raw, static_cast<const T*>(c.p) + i + std::size_t(j) * n, sizeof(T),
                          cudaMemcpyDeviceToHost));
    // Row i of A (stride n) and column j of B (contiguous) as stored, so the check sees the
    // operands after their rounding to T.
    std::vector<T> row(n), col(n);
    CUDA_CHECK(cudaMemcpy2D(row.data(), sizeof(T), static_cast<const T*>(a.p) + i,
                            std::size_t(n) * sizeof(T), sizeof(T), n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(col.data(), static_cast<const T*>(b.p) + std::size_t(j) * n,
                          std::size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
    double want = 0, mag = 0;
    for (int l = 0; l < n; ++l) {
      const double x = to_float(row[l]), y = to_float(col[l]);
      want += x * y;
      mag += std::abs(x * y);
    }
    const double got = to_float(got_raw);
    // Rounding the output to its format, plus fp32 accumulation error (loose: it must only
    // catch a wrong product, which is off by the size of the sum itself).
    const double tol = out_eps * std::abs(want) + 1e-4 * mag;
    const double err = std::abs(got - want);
    if (!(err <= tol)) {
      std::ostringstream os;
      os << name << ": C(" << i << ", " << j << ") = " << got << ", expected " << want
         << " (tolerance " << tol << "); the product is wrong, its time is no ceiling";
      throw std::runtime_error(os.str());
    }
    worst = std::max(worst, err / std::max(std::abs(want), 1e-30));
  }
  Figure f;
  f.name = name;
  f.label = label;
  f.units = "TFLOP/s";
  f.median_ms = ms;
  f.value = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
  std::ostringstream m;
  m << method << ", " << n << " x " << n << " x " << n << ", 2*n^3 FLOPs over the median of "
    << s.reps << " CUDA-event timings after " << s.warmup << " warm-up runs";
  f.method = m.str();
  std::ostringstream chk;
  chk << s.samples << " sampled outputs against the host's double sum, largest relative error "
      << worst;
  f.check = chk.str();
  return f;
}

Figure copy_bandwidth(const Settings& s) {
  const std::size_t bytes = std::size_t(s.copy_mib) << 20;
  const std::size_t words = bytes / sizeof(float);
  Buffer src(bytes), dst(bytes);
  fill(static_cast<float*>(src.p), words, 21);
  CUDA_CHECK(cudaMemset(dst.p, 0, bytes));
  auto run = [&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice)); };
  const double ms = fa::time_median_ms(run, s.warmup, s.reps);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int t = 0; t < s.samples; ++t) {
    const std::size_t i = (std::size_t(t) * 2654435761u + 5) % words;
    float got = 0;
    CUDA_CHECK(cudaMemcpy(&got, static_cast<const float*>(dst.p) + i, sizeof(float),
                          cudaMemcpyDeviceToHost));
    if (got != random_value(21, i))
      throw std::runtime_error("copy: element " + std::to_string(i) + " was not copied");
  }
  Figure f;
  f.name = "copy_tbps";
  f.label = "device-to-device copy";
  f.units = "TB/s";
  f.median_ms = ms;
  f.value = 2.0 * double(bytes) / (ms * 1e-3) / 1e12;
  std::ostringstream m;
  m << "cudaMemcpyAsync device to device of " << s.copy_mib << " MiB; bytes read + bytes "
    << "written (2 x " << bytes << ") over the median of " << s.reps << " CUDA-event timings after "
    << s.warmup << " warm-up runs; 1 TB = 1e12 bytes";
  f.method = m.str();
  f.check = std::to_string(s.samples) + " sampled elements equal to the source";
  return f;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string version_text(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Measure this GPU's ceilings: cuBLAS matrix products (bf16, fp16, fp32 SGEMM "
      "with TF32 off, TF32) and device-to-device copy bandwidth."};
  Settings s;
  std::string out, commit, driver, command;
  app.add_option("--size", s.size, "n of the n x n x n matrix products")
      ->check(fa::cli::int_range(64, 32768))
      ->capture_default_str();
  app.add_option("--copy-mib", s.copy_mib, "MiB copied per timed copy")
      ->check(fa::cli::int_range(1, 65536))
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "untimed runs before timing")
      ->check(fa::cli::int_range(0, 1000))
      ->capture_default_str();
  app.add_option("--reps", s.reps, "timed runs; the median is reported")
      ->check(fa::cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--samples", s.samples, "outputs checked against the host")
      ->check(fa::cli::int_range(1, 1024))
      ->capture_default_str();
  app.add_option("--out", out, "write the figures as JSON to this file");
  app.add_option("--commit", commit, "git commit to record in the JSON");
  app.add_option("--driver", driver, "driver version to record (e.g. nvidia-smi's)");
  app.add_option("--command", command, "command line to record (default: this one)");
  FA_CLI_PARSE(app, argc, argv);
  if (command.empty()) {
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  }

  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::printf("ceilings: no usable CUDA device (%s); nothing measured\n", why.c_str());
    return 77;
  }

  try {
    int dev = 0, runtime = 0, driver_api = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    CUDA_CHECK(cudaDriverGetVersion(&driver_api));

    // Memory: three n x n fp32 matrices, or the two copy buffers, whichever is larger.
    const double gemm_bytes = 3.0 * s.size * double(s.size) * 4;
    const double copy_bytes = 2.0 * (std::size_t(s.copy_mib) << 20);
    std::size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (gemm_bytes > 0.9 * free_b)
      throw std::invalid_argument("--size " + std::to_string(s.size) + " needs " +
                                  std::to_string(std::int64_t(gemm_bytes) >> 20) +
                                  " MiB; at most 90% of the " + std::to_string(free_b >> 20) +
                                  " MiB free may be used");
    if (copy_bytes > 0.9 * free_b)
      throw std::invalid_argument("--copy-mib " + std::to_string(s.copy_mib) + " needs " +
                                  std::to_string(2 * s.copy_mib) + " MiB; at most 90% of the " +
                                  std::to_string(free_b >> 20) + " MiB free may be used");

    cublasHandle_t h = nullptr;
    cublas_check(cublasCreate(&h), "cublasCreate");
    cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    std::vector<Figure> figs;
    try {
      figs.push_back(gemm<__nv_bfloat16>(
          h, s, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16_tflops", "bf16 matmul (tensor cores)",
          "cublasGemmEx, bf16 A, B and C, CUBLAS_COMPUTE_32F (fp32 accumulation)", 1.0 / 256));
      figs.push_back(gemm<__half>(
          h, s, CUDA_R_16F, CUBLAS_COMPUTE_32F, "fp16_tflops", "fp16 matmul (tensor cores)",
          "cublasGemmEx, fp16 A, B and C, CUBLAS_COMPUTE_32F (fp32 accumulation)", 1.0 / 2048));
      figs.push_back(gemm<float>(
          h, s, CUDA_R_32F, CUBLAS_COMPUTE_32F, "fp32_tflops", "fp32 SGEMM (CUDA cores, TF32 off)",
          "cublasGemmEx, fp32 A, B and C, CUBLAS_COMPUTE_32F (fp32 FFMA, no TF32)", 1e-6));
      figs.push_back(gemm<float>(h, s, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "tf32_tflops",
                                 "TF32 matmul (tensor cores)",
                                 "cublasGemmEx, fp32 A, B and C, CUBLAS_COMPUTE_32F_FAST_TF32",
                                 1e-6));
    } catch (...) {
      cublasDestroy(h);
      throw;
    }
    cublasDestroy(h);
    figs.push_back(copy_bandwidth(s));

    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));

    std::printf("Ceilings of %s (%d SMs), CUDA runtime %s, driver API %s%s%s, %s\n", prop.name,
                prop.multiProcessorCount, version_text(runtime).c_str(),
                version_text(driver_api).c_str(), driver.empty() ? "" : ", driver ", driver.c_str(),
                date);
    std::printf("%-36s %12s  %-8s %10s\n", "figure", "value", "units", "median ms");
    for (const Figure& f : figs)
      std::printf("%-36s %12.2f  %-8s %10.3f\n", f.label.c_str(), f.value, f.units.c_str(),
                  f.median_ms);

    if (!out.empty()) {
      std::ostringstream js;
      js << "{\n  \"gpu\": " << json_string(prop.name)
         << ",\n  \"sm_count\": " << prop.multiProcessorCount << ",\n  \"compute_capability\": \""
         << prop.major << '.' << prop.minor << "\",\n  \"driver\": " << json_string(driver)
         << ",\n  \"cuda_driver_api\": \"" << version_text(driver_api)
         << "\",\n  \"cuda_runtime\": \"" << version_text(runtime) << "\",\n  \"date\": \"" << date
         << "\",\n  \"commit\": " << json_string(commit)
         << ",\n  \"command\": " << json_string(command) << ",\n  \"figures\": {";
      for (std::size_t i = 0; i < figs.size(); ++i) {
        const Figure& f = figs[i];
        char value[64], median[64];
        std::snprintf(value, sizeof value, "%.4g", f.value);
        std::snprintf(median, sizeof median, "%.6g", f.median_ms);
        js << (i ? "," : "") << "\n    " << json_string(f.name)
           << ": {\"label\": " << json_string(f.label) << ", \"value\": " << value
           << ", \"units\": " << json_string(f.units) << ", \"median_ms\": " << median
           << ", \"method\": " << json_string(f.method) << ", \"check\": " << json_string(f.check)
           << "}";
      }
      js << "\n  }\n}\n";
      std::ofstream file(out);
      if (!(file << js.str()))
        throw std::runtime_error("--out " + out + ": could not write the file");
      std::printf("wrote %s\n", out.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ceilings: %s\n", e.what());
    return 1;
  }
  return 0;
}
