// device_limits.h — what the CPU tests of the registry share (test_validation.cpp,
// test_registry.cpp): a message check and the limits of a real device.
#pragma once

#include <string>

#include "common/registry.h"

namespace fa::test {

/// \brief Does the message `msg` contain `what`? \param msg a message \param what a part
/// \return whether it does
inline bool mentions(const std::string& msg, const std::string& what) {
  return msg.find(what) != std::string::npos;
}

/// \brief The limits an H200 reports (compute capability 9.0).
/// \return its DeviceLimits
inline DeviceLimits h200_limits() {
  DeviceLimits d;
  d.major = 9;
  d.sharedMemPerBlockOptin = 232448;
  d.maxGridSize[0] = 2147483647;
  d.maxGridSize[1] = d.maxGridSize[2] = 65535;
  return d;
}

}  // namespace fa::test
