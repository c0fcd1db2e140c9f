// backward_case.h — one backward problem's inputs, expected gradients and device run, shared by
// the backward GPU suite (test_backward.cpp) and the sweep (sweep.cpp).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "reference/compare.h"

namespace fa::test {

/// \brief The gradients a backward step returned, as floats.
struct Grads {
  std::vector<float> dq, dk, dv;  ///< in Q's and K's layouts
};

/// \brief dO ~ N(0, 1) in the problem's dtype (the Q of inputs drawn from another seed) and
/// the double reference's O, L and gradients for `in`. \param in the inputs \param seed
/// their seed \return what the reference expects
inline ref::ExpectedBackward backward_expected(const HostInputs& in, std::uint64_t seed) {
  std::vector<float> d_o =
      make_inputs(in.problem, Distribution::Normal, seed ^ 0x9e3779b97f4a7c15ull).q;
  return ref::expected_backward(in, std::move(d_o));
}

/// \brief Runs `step`'s backward on the device with the reference's O and L, its gradients and
/// workspace poisoned with NaN first. \param step the step \param in the inputs \param want
/// the reference's O, L and dO \return the gradients
inline Grads run_backward_case(const StepInfo& step, const HostInputs& in,
                               const ref::ExpectedBackward& want) {
  const Problem& p = in.problem;
  DeviceBackward dev(in, want.o, want.lse, want.d_o,
                     step.backward_workspace_bytes ? step.backward_workspace_bytes(p) : 0);
  dev.poison();
  run_backward(step, p, dev.tensors(), dev.workspace());
  Grads g;
  dev.download(&g.dq, &g.dk, &g.dv);
  return g;
}

}  // namespace fa::test
