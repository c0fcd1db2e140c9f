/// \file cuda_check.h
/// \brief Every CUDA call checked, every launch followed by a launch check.
#pragma once

#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace fa {

/// \brief Thrown when a CUDA call fails; what() names the call, the file and the line.
class CudaError : public std::runtime_error {
 public:
  /// \param code the CUDA error \param what the message
  CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  /// \return the CUDA error code
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

/// \brief Builds the message and throws CudaError. Used by CUDA_CHECK.
/// \param code the error \param expr the failed call, as text
/// \param file the source file \param line the line in it
[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* expr, const char* file,
                                          int line) {
  std::ostringstream os;
  os << file << ':' << line << ": " << expr << " failed: " << cudaGetErrorName(code) << " ("
     << cudaGetErrorString(code) << ')';
  throw CudaError(code, os.str());
}

}  // namespace fa

/// \brief Evaluates a CUDA runtime call and throws fa::CudaError with its text, file and line
/// if it did not return cudaSuccess.
#define CUDA_CHECK(expr)                                                                    \
  do {                                                                                      \
    const cudaError_t fa_err_ = (expr);                                                     \
    if (fa_err_ != cudaSuccess) ::fa::throw_cuda_error(fa_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// \brief Call right after a kernel launch: reports a bad launch configuration at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
