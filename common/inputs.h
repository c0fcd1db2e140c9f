// inputs.h — seeded random inputs, host-side tensors, and their device copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "problem.h"
#include "registry.h"

namespace fa {

/// \brief The input distributions every step is tested and measured on.
enum class Distribution {
  Normal,   ///< Q, K, V ~ N(0, 1)
  Shifted,  ///< Q, K, V ~ N(0.5, 1): a mean shift makes all scores of a row alike
  Large,    ///< Q, K ~ N(0, 5²): scores of magnitude ~100, exp() overflows without the max
};
const char* distribution_name(Distribution d);
bool parse_distribution(const std::string& s, Distribution* out);

/// \brief Q, K, V on the host as float, already rounded to the problem's dtype so that the
/// reference sees exactly the values the GPU sees.
struct HostInputs {
  Problem problem;
  std::vector<float> q, k, v;
  std::uint64_t seed = 0;
  Distribution dist = Distribution::Normal;
};

/// \brief Fresh random inputs from `seed` (mt19937_64).
HostInputs make_inputs(const Problem& p, Distribution dist, std::uint64_t seed);

/// \brief Rounds `x` to the nearest value representable in `t` (identity for fp32).
float round_to(DType t, float x);

/// \brief Device copies of the inputs in the problem's dtype, plus O and L, plus a step's
/// workspace. O and L are poisoned with NaN by poison(), so an unwritten element fails.
class DeviceProblem {
 public:
  /// \param in the inputs to upload \param workspace_bytes scratch for the step (may be 0)
  DeviceProblem(const HostInputs& in, std::size_t workspace_bytes);
  /// \brief Fills O and L with NaN.
  void poison();
  DeviceTensors tensors() const;
  void* workspace() const { return workspace_.get(); }
  /// \brief Copies O (converted to float) and L back to the host.
  void download(std::vector<float>* o, std::vector<float>* lse) const;
  /// \brief Bytes held on the device (Q, K, V, O, L, workspace).
  std::size_t device_bytes() const;

 private:
  Problem p_;
  DeviceBuffer q_, k_, v_, o_, lse_, workspace_;
};

/// \brief Uploads float values to `dst` as dtype `t` (dst holds n elements of t).
void upload_as(DType t, const float* src, std::size_t n, void* dst);
/// \brief Downloads n elements of dtype `t` from `src` into float.
void download_as(DType t, const void* src, std::size_t n, float* dst);

}  // namespace fa
