// catch.hpp — one include for Catch2 3.x (preferred) and 2.13 (Debian 12).
// Test files include this instead of a Catch2 header; tests/main.cpp provides main().
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define FA_CATCH_VERSION 3
#else
#include <catch2/catch.hpp>
#define FA_CATCH_VERSION 2
#endif

namespace fa::test {
/// \brief Records that a test case skipped itself (FA_SKIP). main() (tests/main.cpp) then ends
/// a run that failed nothing with status 77, which ctest reports as skipped (SKIP_RETURN_CODE):
/// a test that did not run is never counted as passed.
void record_skip();
/// \return whether a test case of this run skipped itself
bool skipped();
}  // namespace fa::test

/// FA_SKIP(message): the test case stops here, reported as skipped. Catch2 3.3 and later have
/// SKIP; before it, and in 2.13, a warning with the message, and the test case returns (call it
/// in the test case's own body, not in a lambda or a helper).
#if defined(SKIP)
#define FA_SKIP(message)      \
  do {                        \
    ::fa::test::record_skip(); \
    SKIP(message);            \
  } while (0)
#else
#define FA_SKIP(message)           \
  do {                             \
    ::fa::test::record_skip();     \
    WARN("SKIPPED: " << message);  \
    return;                        \
  } while (0)
#endif
