/// \file inputs.h
/// \brief Seeded random inputs, host-side tensors, and their device copies.
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
/// \brief "normal", "shifted" or "large". \param d a distribution \return its name
const char* distribution_name(Distribution d);
/// \brief Parses a distribution_name(). \param s the name \param out receives it
/// \return whether \p s was a known name
bool parse_distribution(const std::string& s, Distribution* out);

/// \brief Q, K, V on the host as float, already rounded to the problem's dtype so that the
/// reference sees exactly the values the GPU sees.
struct HostInputs {
  Problem problem;  ///< the problem they were made for
  ///@{
  /// Q, K and V in the problem's layout, as float (values of the problem's dtype).
  std::vector<float> q, k, v;
  ///@}
  std::uint64_t seed = 0;                    ///< the seed they were made from
  Distribution dist = Distribution::Normal;  ///< the distribution they were drawn from
};

/// \brief Fresh random inputs from `seed` (mt19937_64).
/// \param p the problem \param dist the distribution \param seed the seed
/// \return Q, K and V, rounded to p.dtype
HostInputs make_inputs(const Problem& p, Distribution dist, std::uint64_t seed);

/// \brief Rounds `x` to the nearest value representable in `t` (identity for fp32).
/// \param t the type \param x the value \return the rounded value
float round_to(DType t, float x);

/// \brief Device copies of the inputs in the problem's dtype, plus O and L, plus a step's
/// workspace. O and L are poisoned with NaN by poison(), so an unwritten element fails.
class DeviceProblem {
 public:
  /// \param in the inputs to upload \param workspace_bytes scratch for the step (may be 0)
  DeviceProblem(const HostInputs& in, std::size_t workspace_bytes);
  /// \brief Fills O and L with NaN.
  void poison();
  /// \return the device pointers of Q, K, V, O and L
  DeviceTensors tensors() const;
  /// \return the step's workspace (null when it needs none)
  void* workspace() const { return workspace_.get(); }
  /// \brief Copies O (converted to float) and L back to the host.
  /// \param o receives O in Q's layout \param lse receives L, [B, H_q, N_q]
  void download(std::vector<float>* o, std::vector<float>* lse) const;
  /// \brief Bytes held on the device (Q, K, V, O, L, workspace).
  /// \return the total
  std::size_t device_bytes() const;

 private:
  Problem p_;
  DeviceBuffer q_, k_, v_, o_, lse_, workspace_;
};

/// \brief Uploads float values to `dst` as dtype `t` (dst holds n elements of t).
/// \param t the device type \param src n floats on the host \param n the count
/// \param dst device memory
void upload_as(DType t, const float* src, std::size_t n, void* dst);
/// \brief Downloads n elements of dtype `t` from `src` into float.
/// \param t the device type \param src device memory \param n the count
/// \param dst n floats on the host
void download_as(DType t, const void* src, std::size_t n, float* dst);

}  // namespace fa
