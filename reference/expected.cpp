#include "expected.h"

#include "compare.h"

namespace fa::ref {

Expected expected_for(const HostInputs& in) {
  const Problem& p = in.problem;
  Expected e;
  e.ref = attention(p, in.q.data(), in.k.data(), in.v.data());
  e.plain_o = attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &e.plain_lse);
  e.score_rounding = score_rounding_error(p, in.q.data(), in.k.data(), in.v.data());
  return e;
}

std::string verdict(const Problem& p, const std::vector<float>& o, const std::vector<float>& lse,
                    const Expected& want) {
  std::string e = judge(compare_output(p, o, want.ref.o),
                        compare_output(p, want.plain_o, want.ref.o), "O", p.dtype, p.dtype,
                        want.score_rounding);
  if (e.empty())
    e = judge(compare_lse(p, lse, want.ref.lse), compare_lse(p, want.plain_lse, want.ref.lse),
              "L", p.dtype);
  return e;
}

}  // namespace fa::ref
