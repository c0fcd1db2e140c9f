#include "steps/harness/cli.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "common/registry.h"

namespace fa::cli {

int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // prints the help, status 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's own statuses (100 and up) would hide the rule every program keeps: 2.
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    return refuse(what + " (see --help)");
  }
  return -1;
}

int refuse(const std::string& message) {
  std::cerr << "error: " << message << std::endl;
  return kBadInput;
}

int fail(const std::exception& e) {
  std::cerr << "error: " << e.what() << std::endl;
  return 1;
}

namespace {
// CLI11 2.1 reads integers with strtoll's base 0: "010" is 8 and "0x10" is 16. Only plain
// decimal is taken, "0" or digits without a leading zero, with an optional sign.
bool plain_decimal(const std::string& s) {
  const std::size_t d = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  return s.size() > d && s.find_first_not_of("0123456789", d) == std::string::npos &&
         (s[d] != '0' || s.size() == d + 1);
}
}  // namespace

int print_markdown(const std::string& text, const std::string& path) {
  std::cout << text;
  if (path.empty()) return 0;
  std::ofstream f(path);
  f << text;
  if (!f) {
    std::cerr << "error: --out-md: cannot write " << path << "\n";
    return 1;
  }
  return 0;
}

CLI::Validator int_range(long long lo, long long hi) {
  const CLI::Range range(lo, hi);
  return CLI::Validator(
      [range, lo, hi](std::string& s) -> std::string {
        if (!plain_decimal(s))
          return "Value " + s + " not in range " + std::to_string(lo) + " to " +
                 std::to_string(hi) + " (plain decimal integers only)";
        return range(s);
      },
      range.get_description());
}

CLI::Validator uint64_range() {
  const CLI::Range range(std::uint64_t{0}, ~std::uint64_t{0});
  return CLI::Validator(
      [range](std::string& s) -> std::string {
        // CLI11 reads "-1" as 2^64 - 1 and 2^64 as 2^64 - 1 (strtoull): refuse both.
        const std::string max = std::to_string(~std::uint64_t{0});
        std::string digits = s.substr(std::min(s.size(), s.find_first_not_of('0')));
        const bool too_big =
            digits.find_first_not_of("0123456789") == std::string::npos &&
            (digits.size() > max.size() || (digits.size() == max.size() && digits > max));
        if (s.find('-') != std::string::npos || too_big)
          return "Value " + s + " not in range 0 to " + max;
        if (!plain_decimal(s))
          return "Value " + s + " not in range 0 to " + max + " (plain decimal integers only)";
        return range(s);
      },
      range.get_description());
}

namespace {

// An option taking one of `names`, each turned into the enum by `parse_fn`.
template <typename T>
CLI::Option* add_enum(CLI::App& app, const std::string& name, T* out, const std::string& help,
                      const std::vector<std::string>& names, const char* current,
                      bool (*parse_fn)(const std::string&, T*)) {
  return app
      .add_option_function<std::string>(
          name, [out, parse_fn](const std::string& s) { parse_fn(s, out); }, help)
      ->check(CLI::IsMember(names))
      ->default_str(current);
}

bool parse_dist(const std::string& s, Distribution* out) { return parse_distribution(s, out); }

}  // namespace

CLI::Option* add_dtype(CLI::App& app, const std::string& name, DType* out,
                       const std::string& help) {
  return add_enum(app, name, out, help, {"fp32", "fp16", "bf16"}, dtype_name(*out), &parse_dtype);
}

CLI::Option* add_layout(CLI::App& app, Layout* out) {
  return add_enum(app, "--layout", out, "memory layout: bnhd ([B,N,H,d]) or bhnd ([B,H,N,d])",
                  {"bnhd", "bhnd"}, layout_name(*out), &parse_layout);
}

CLI::Option* add_dist(CLI::App& app, Distribution* out) {
  return add_enum(app, "--dist", out, "input distribution: normal, shifted or large",
                  {"normal", "shifted", "large"}, distribution_name(*out), &parse_dist);
}

CLI::Option* add_causal_choice(CLI::App& app, std::vector<bool>* out) {
  const char* current = out->size() == 2 ? "both" : (!out->empty() && (*out)[0]) ? "on" : "off";
  return app
      .add_option_function<std::string>(
          "--causal",
          [out](const std::string& s) {
            *out = s == "off"  ? std::vector<bool>{false}
                   : s == "on" ? std::vector<bool>{true}
                               : std::vector<bool>{false, true};
          },
          "causal mask: off, on or both")
      ->check(CLI::IsMember({"off", "on", "both"}))
      ->default_str(current);
}

CLI::Validator step_validator(bool allow_baseline) {
  return CLI::Validator(
      [allow_baseline](std::string& s) -> std::string {
        if (find_step(s) || (allow_baseline && s == "cublas_baseline")) return {};
        return s + " is not a registered step; known: " + step_names() +
               (allow_baseline ? ", cublas_baseline" : "");
      },
      "STEP");
}

void add_problem_options(CLI::App& app, Problem* p) {
  app.add_option("-b,--batch", p->batch, "batch size B")
      ->check(int_range(1))
      ->capture_default_str();
  app.add_option("--heads-q", p->heads_q, "query heads H_q")
      ->check(int_range(1))
      ->capture_default_str();
  app.add_option("--heads-kv", p->heads_kv, "key/value heads H_kv (GQA when < H_q)")
      ->check(int_range(1))
      ->capture_default_str();
  CLI::Option* nq =
      app.add_option("--n-q", p->n_q, "query rows N_q")->check(int_range(1))->capture_default_str();
  CLI::Option* nkv = app.add_option("--n-kv", p->n_kv, "key/value rows N_kv")
                         ->check(int_range(1))
                         ->capture_default_str();
  app.add_option_function<int>(
         "-n,--n", [p](int n) { p->n_q = p->n_kv = n; }, "sequence length: sets both N_q and N_kv")
      ->check(int_range(1))
      ->excludes(nq)
      ->excludes(nkv);
  app.add_option("-d,--d", p->head_dim, "head dimension d")
      ->check(int_range(1, Limits::kMaxHeadDim))
      ->capture_default_str();
  app.add_flag("--causal", p->causal, "causal mask (bottom-right aligned)");
}

int check_problem(const Problem& p) {
  const std::string e = validate(p);
  return e.empty() ? -1 : refuse(e);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

}  // namespace fa::cli
