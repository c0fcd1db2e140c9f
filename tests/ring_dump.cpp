// ring_dump.cpp — the ring reference's arithmetic as JSON, for tests/check_ring_plan.py, which
// compares steps/13_ring_attention/ring_plan.py (the Python mirror the GPU step runs) with it.
//
// Reads one case per line on stdin:
//   batch heads_q heads_kv n_q n_kv head_dim dtype causal ranks layout flops_per_s bytes_per_s
// (dtype fp32|fp16|bf16, causal 0|1, layout contiguous|zigzag) and writes one JSON object per
// line: {"work": [[…] per rank], "time": {…}, "min_hidden_n": N} for N_q = N_kv, or
// {"error": "<the refusal's message>"} when the reference refuses the case. Exit status 2 on a
// line it cannot read.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/problem.h"
#include "reference/ring.h"

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string number(double x) {
  if (std::isinf(x)) return x > 0 ? "1e999" : "-1e999";
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

std::string dump(const fa::Problem& p, int ranks, fa::ref::RingLayout layout, double flops,
                 double bytes) {
  std::ostringstream os;
  const std::vector<std::int64_t> work = fa::ref::ring_work(p, ranks, layout);
  os << "{\"work\": [";
  for (int r = 0; r < ranks; ++r) {
    os << (r ? ", [" : "[");
    for (int s = 0; s < ranks; ++s) os << (s ? ", " : "") << work[std::size_t(r) * ranks + s];
    os << "]";
  }
  os << "]";
  if (p.n_q == p.n_kv) {
    const fa::ref::RingTime t = fa::ref::ring_time(p, ranks, layout, flops, bytes);
    os << ", \"time\": {\"step_s\": [";
    for (std::size_t s = 0; s < t.step_s.size(); ++s) os << (s ? ", " : "") << number(t.step_s[s]);
    os << "], \"total_s\": " << number(t.total_s) << ", \"compute_s\": " << number(t.compute_s)
       << ", \"send_s\": " << number(t.send_s)
       << ", \"hidden_fraction\": " << number(t.hidden_fraction)
       << ", \"exposed_steps\": " << t.exposed_steps << "}";
    os << ", \"min_hidden_n\": " << fa::ref::ring_min_hidden_n(p, ranks, layout, flops, bytes);
  }
  os << "}";
  return os.str();
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    fa::Problem p;
    int causal = 0, ranks = 0;
    std::string dtype, layout, flops_text, bytes_text;
    char* flops_end = nullptr;
    char* bytes_end = nullptr;
    const bool read = static_cast<bool>(in >> p.batch >> p.heads_q >> p.heads_kv >> p.n_q >>
                                        p.n_kv >> p.head_dim >> dtype >> causal >> ranks >>
                                        layout >> flops_text >> bytes_text);
    // strtod reads "inf" (an infinite bandwidth), which operator>> does not.
    const double flops = read ? std::strtod(flops_text.c_str(), &flops_end) : 0;
    const double bytes = read ? std::strtod(bytes_text.c_str(), &bytes_end) : 0;
    if (!read || *flops_end != '\0' || *bytes_end != '\0' || !fa::parse_dtype(dtype, &p.dtype) ||
        (layout != "contiguous" && layout != "zigzag")) {
      std::cerr << "ring_dump: cannot read the case: " << line << "\n";
      return 2;
    }
    p.causal = causal != 0;
    const auto rl =
        layout == "zigzag" ? fa::ref::RingLayout::Zigzag : fa::ref::RingLayout::Contiguous;
    try {
      std::cout << dump(p, ranks, rl, flops, bytes) << "\n";
    } catch (const std::invalid_argument& e) {
      std::cout << "{\"error\": " << quoted(e.what()) << "}\n";
    }
  }
  return 0;
}
