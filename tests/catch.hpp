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
