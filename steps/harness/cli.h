/// \file cli.h
/// \brief The command line every program shares: the problem options, the enum options
/// (dtype, layout, input distribution, causal off/on/both) as CLI11 validators, and one
/// rule for bad input — one line on stderr naming the option, its value and the accepted
/// range, exit status 2, before any GPU is looked for. `--help` still exits 0.
#pragma once

#include <CLI/CLI.hpp>

#include <climits>
#include <exception>
#include <string>
#include <vector>

#include "common/inputs.h"
#include "common/problem.h"

namespace fa::cli {

/// Exit status of every program for input it refuses.
constexpr int kBadInput = 2;

/// \brief Parses the command line. Returns -1 when the program should go on; otherwise the
/// status to exit with: 0 after --help (printed), kBadInput after a parse or validation error
/// (printed as one line "error: <option>: <what>" on stderr).
/// \param app the application \param argc argument count \param argv arguments
/// \return -1, 0 or kBadInput
int parse(CLI::App& app, int argc, char** argv);

/// \brief Prints "error: <message>" on stderr. \param message what was wrong
/// \return kBadInput
int refuse(const std::string& message);

/// \brief For main()'s function-try-block: prints "error: <what>" on stderr (a CUDA failure,
/// host memory exhausted) so that no exception ends a program uncaught.
/// \param e the exception \return 1
int fail(const std::exception& e);

/// \brief Prints a program's Markdown result on stdout and, when `path` is not empty, writes it
/// there too (--out-md). \param text the Markdown \param path the file, or "" \return 0, or 1
/// after "error: --out-md: cannot write PATH" on stderr
int print_markdown(const std::string& text, const std::string& path);

/// \brief An integer option's range, checked by CLI11 on the text before conversion, so
/// "abc" and "3000000000" are refused with the option's name and this range; only plain
/// decimal is taken ("010" and "0x10", which CLI11 2.1 would read as octal and hex, are not).
/// \param lo smallest accepted value \param hi largest accepted value \return the validator
CLI::Validator int_range(long long lo, long long hi = INT_MAX);

/// \brief Any unsigned 64-bit value (a seed), in plain decimal, refusing "-1" and values
/// past 2^64 - 1 rather than wrapping them around.
/// \return the validator
CLI::Validator uint64_range();

/// \brief --dtype style option: fp32, fp16 or bf16. \param app the application
/// \param name the option's name(s) \param out receives the type \param help the help text
/// \return the option
CLI::Option* add_dtype(CLI::App& app, const std::string& name, DType* out, const std::string& help);
/// \brief --layout: bnhd or bhnd. \param app the application \param out receives the layout
/// \return the option
CLI::Option* add_layout(CLI::App& app, Layout* out);
/// \brief --dist: normal, shifted or large. \param app the application
/// \param out receives the distribution \return the option
CLI::Option* add_dist(CLI::App& app, Distribution* out);
/// \brief --causal off, on or both: the causal settings to run, in that order.
/// \param app the application \param out receives {false}, {true} or {false, true}
/// \return the option
CLI::Option* add_causal_choice(CLI::App& app, std::vector<bool>* out);

/// \brief A registered step by name, number or slug (fa::find_step); with
/// \p allow_baseline, also "cublas_baseline". The message lists the known names.
/// \param allow_baseline accept the cuBLAS baseline's name \return the validator
CLI::Validator step_validator(bool allow_baseline);

/// \brief The shape options of one attention problem: -b/--batch, --heads-q, --heads-kv,
/// -n/--n (both lengths), --n-q, --n-kv, -d/--d and --causal, each with its range; the
/// problem-level rules (heads grouping, 32-bit index limit) are validate()'s, see
/// check_problem(). The defaults are \p p's values.
/// \param app the application \param p receives the values
void add_problem_options(CLI::App& app, Problem* p);

/// \brief fa::validate(p) as a refusal: "" when valid, else prints it.
/// \param p the problem \return -1 when valid, else kBadInput (after printing the message)
int check_problem(const Problem& p);

/// \brief "512.0 MiB": bytes in binary units. \param bytes a size \return its text
std::string human_bytes(double bytes);

}  // namespace fa::cli

/// Parses `app` with fa::cli::parse and returns from main() with its status when it asks to.
#define FA_CLI_PARSE(app, argc, argv)                                                            \
  do {                                                                                           \
    if (const int fa_cli_status_ = ::fa::cli::parse((app), (argc), (argv)); fa_cli_status_ >= 0) \
      return fa_cli_status_;                                                                     \
  } while (0)
