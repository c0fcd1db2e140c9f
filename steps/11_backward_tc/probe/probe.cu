// probe.cu — step 11's kernels checked piece by piece on tiny problems, before the suite
// (test_11_backward_tc): when that fails, this says which piece broke.
//
// Each case runs the step's backward (through the registry, as the suite does, on gradients
// and a workspace poisoned with NaN) and then reads back, besides dQ, dK and dV, the
// workspace the kernels leave behind:
//
//   D        the preprocess kernel's rowsum(dO ∘ O)                       (workspace, fp32)
//   dV       Pᵀ dO: Sᵀ = K Qᵀ, the mask, exp2 with L, Pᵀ → A fragments, ldmatrix.trans of dO
//   dK       dSᵀ Q: dPᵀ = V dOᵀ, D, dSᵀ → A fragments, ldmatrix.trans of Q, the scale
//   dQ_acc   dS K before the scale: dSᵀ through shared memory, ldmatrix.trans both ways, the
//            atomics                                                       (workspace, fp32)
//   dQ       the convert kernel: scale, 16 bits, Q's layout
//
// each against the double reference (reference/backward.h) by its relative error
// ‖got − ref‖ / ‖ref‖, which must stay below 2·10⁻² (bf16 keeps 8 bits: ~4·10⁻³ per rounding
// of P, dS and the result), then the suite's own verdict (reference/compare.h) on all three
// gradients. Reading the list top down: the first FAIL is the piece to look at. If D passes
// and dV fails, the recomputation of P is wrong (scores, mask, L); if dV passes and dK fails,
// dS or the Q product; if dK passes and dQ_acc fails, the dSᵀ tile in shared memory or the
// dQ product; if only dQ fails, the convert kernel.
//
// Cases, for d = 64 and 128, bf16 and fp16: one Q tile and one K/V tile (ragged), several of
// each (atomics from two CTAs), causal on the diagonal, causal with N_q > N_kv (rows that see
// no key: dQ exactly 0), GQA (the group summed in the CTA), the [B, H, N, d] layout, a NaN
// in the last key's K and V (the exact path's dQ: only the rows that see that key may turn
// NaN), a NaN in row 0's Q and row 1's dO (the exact path's dK and dV: only the keys those
// rows see may turn NaN), and the deterministic mode (dQ from one slab per CTA; a second run
// must be bitwise equal).
//
// Exit status: 0 all pass, 1 a failure, 77 no usable device or compute capability below 8.0.
//
//   build/bin/probe_11_backward_tc
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/registry.h"
#include "reference/compare.h"

namespace {

using fa::Problem;

constexpr double kMaxRelative = 2e-2;

/// ‖got − ref‖ / ‖ref‖ over every element (NaN if either holds a NaN).
template <class Ref>
double relative_error(const std::vector<float>& got, const std::vector<Ref>& ref, double scale) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double r = static_cast<double>(ref[i]) * scale;
    num += (got[i] - r) * (got[i] - r);
    den += r * r;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool report(const std::string& name, const char* piece, double rel) {
  const bool ok = rel <= kMaxRelative;  // false for NaN
  std::printf("  %-4s %-8s relative error %.2e  %s\n", ok ? "PASS" : "FAIL", piece, rel,
              name.c_str());
  return ok;
}

/// Where a case plants NaN (batch 0, head 0): nowhere, in K and V of the last key (the
/// exact path's dQ), or in Q of row 0 and dO of row 1 (the exact path's dK and dV).
enum class Nan { kNone, kLastKey, kFirstRows };

/// Runs one case.
bool probe_case(const fa::StepInfo& step, Problem p, std::uint64_t seed, Nan nan) {
  const std::string name = p.describe() + (nan == Nan::kLastKey     ? " NaN in the last key"
                                           : nan == Nan::kFirstRows ? " NaN in rows 0 and 1"
                                                                    : "");
  fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, seed);
  std::vector<float> d_o = fa::make_inputs(p, fa::Distribution::Normal, seed ^ 0x9e37ull).q;
  if (nan == Nan::kLastKey) {
    const auto at = static_cast<std::size_t>((p.n_kv - 1) * p.kv_strides().row);
    in.k[at + 3] = NAN;
    in.v[at + 2] = NAN;
  } else if (nan == Nan::kFirstRows) {
    const auto row = static_cast<std::size_t>(p.q_strides().row);
    in.q[1] = NAN;
    d_o[row + 5] = NAN;
  }
  const fa::ref::ExpectedBackward want = fa::ref::expected_backward(in, d_o);
  const std::size_t ws_bytes = step.backward_workspace_bytes(p);
  fa::DeviceBackward dev(in, want.o, want.lse, want.d_o, ws_bytes);
  dev.poison();
  try {
    fa::run_backward(step, p, dev.tensors(), dev.workspace());
    CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::printf("  FAIL launch   %s: %s\n", name.c_str(), e.what());
    return false;
  }
  std::vector<float> dq, dk, dv, ws(ws_bytes / sizeof(float));
  dev.download(&dq, &dk, &dv);
  CUDA_CHECK(cudaMemcpy(ws.data(), dev.workspace(), ws_bytes, cudaMemcpyDeviceToHost));
  const std::size_t nq = static_cast<std::size_t>(p.q_elems());
  // D is the workspace's last B · H_q · N_q floats in either mode.
  const std::vector<float> delta(ws.end() - p.lse_elems(), ws.end());

  bool ok = true;
  if (nan == Nan::kNone) {
    // dQ_acc is in [B, H_q, N_q, d] order; the reference's dQ is in Q's layout.
    std::vector<double> ref_acc(nq);
    const fa::Strides s = p.q_strides();
    std::size_t e = 0;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h)
        for (int i = 0; i < p.n_q; ++i)
          for (int x = 0; x < p.head_dim; ++x)
            ref_acc[e++] =
                want.ref.dq[static_cast<std::size_t>(b * s.batch + h * s.head + i * s.row + x)];
    const std::vector<float> acc(ws.begin(), ws.begin() + static_cast<std::ptrdiff_t>(nq));
    ok &= report(name, "D", relative_error(delta, want.ref.delta, 1.0));
    ok &= report(name, "dV", relative_error(dv, want.ref.dv, 1.0));
    ok &= report(name, "dK", relative_error(dk, want.ref.dk, 1.0));
    if (!p.deterministic)  // deterministic: one slab per CTA, summed by the convert kernel
      ok &= report(name, "dQ_acc", relative_error(acc, ref_acc, 1.0 / p.softmax_scale()));
    ok &= report(name, "dQ", relative_error(dq, want.ref.dq, 1.0));
  } else if (nan == Nan::kLastKey) {
    // Only rows that see the last key (head 0) may hold a NaN in dQ.
    const fa::Strides s = p.q_strides();
    bool finite = true;
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.n_q; ++i) {
        if (h / p.group_size() == 0 && p.kv_end(i) == p.n_kv) continue;
        for (int x = 0; x < p.head_dim; ++x)
          finite &= std::isfinite(dq[static_cast<std::size_t>(h * s.head + i * s.row + x)]);
      }
    std::printf("  %-4s %-8s dQ finite where the NaN key is hidden  %s\n", finite ? "PASS" : "FAIL",
                "mask", name.c_str());
    ok &= finite;
  } else {
    // Only keys that row 0 or row 1 (head 0) sees may hold a NaN in dK and dV.
    const fa::Strides s = p.kv_strides();
    bool finite = true;
    for (int h = 0; h < p.heads_kv; ++h)
      for (int j = h == 0 ? p.kv_end(1) : 0; j < p.n_kv; ++j)
        for (int x = 0; x < p.head_dim; ++x) {
          const auto at = static_cast<std::size_t>(h * s.head + j * s.row + x);
          finite &= std::isfinite(dk[at]) && std::isfinite(dv[at]);
        }
    std::printf("  %-4s %-8s dK, dV finite where the NaN rows are hidden  %s\n",
                finite ? "PASS" : "FAIL", "mask", name.c_str());
    ok &= finite;
  }
  if (p.causal && p.n_q > p.n_kv) {  // rows 0 … N_q − N_kv − 1 see no key: dQ exactly 0
    const fa::Strides s = p.q_strides();
    bool zero = true;
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; p.kv_end(i) == 0; ++i)
        for (int x = 0; x < p.head_dim; ++x)
          zero &= dq[static_cast<std::size_t>(h * s.head + i * s.row + x)] == 0.f;
    std::printf("  %-4s %-8s dQ = 0 on rows that see no key  %s\n", zero ? "PASS" : "FAIL",
                "masked", name.c_str());
    ok &= zero;
  }
  if (p.deterministic) {  // a second run, bitwise the same
    fa::DeviceBackward again(in, want.o, want.lse, want.d_o, ws_bytes);
    again.poison();
    fa::run_backward(step, p, again.tensors(), again.workspace());
    std::vector<float> dq2, dk2, dv2;
    again.download(&dq2, &dk2, &dv2);
    const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    const bool repeat = same(dq, dq2) && same(dk, dk2) && same(dv, dv2);
    std::printf("  %-4s %-8s a second run is bitwise the same  %s\n", repeat ? "PASS" : "FAIL",
                "repeat", name.c_str());
    ok &= repeat;
  }
  const std::string v = fa::ref::verdict_backward(p, dq, dk, dv, want);
  std::printf("  %-4s %-8s %s%s%s\n", v.empty() ? "PASS" : "FAIL", "verdict", name.c_str(),
              v.empty() ? "" : ": ", v.c_str());
  return ok && v.empty();
}

}  // namespace

int main() {
  using namespace fa;
  if (const std::string why = no_usable_device(); !why.empty()) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const DeviceLimits limits = device_limits(device);
  if (limits.major < 8) {
    std::printf("SKIPPED: compute capability %d.%d; step 11 needs 8.0 or newer\n", limits.major,
                limits.minor);
    return 77;
  }
  const StepInfo* step = find_step("11_backward_tc");
  if (!step || !step->backward) {
    std::printf("FAIL: step 11_backward_tc is not registered with a backward pass\n");
    return 1;
  }
  bool ok = true;
  std::uint64_t seed = 1100;
  for (DType t : {DType::BF16, DType::F16})
    for (int d : {64, 128}) {
      struct Case {
        Problem p;
        Nan nan;
      };
      const Case cases[] = {
          {make_problem(1, 1, 1, 20, 50, d, false), Nan::kNone},    // one tile each, ragged
          {make_problem(1, 1, 1, 100, 200, d, false), Nan::kNone},  // two K/V CTAs, Q tiles
          {make_problem(1, 2, 2, 77, 77, d, true), Nan::kNone},     // causal, the diagonal
          {make_problem(1, 2, 2, 100, 36, d, true), Nan::kNone},    // rows that see no key
          {make_problem(2, 4, 2, 70, 150, d, true), Nan::kNone},    // GQA, causal, N_q < N_kv
          {make_problem(1, 4, 1, 40, 40, d, false, Layout::BHND), Nan::kNone},  // MQA, BHND
          {make_problem(1, 2, 2, 77, 77, d, true), Nan::kLastKey},    // the exact path: dQ
          {make_problem(1, 2, 2, 77, 77, d, true), Nan::kFirstRows},  // and dK, dV
          {make_problem(1, 2, 1, 100, 300, d, true), Nan::kNone},  // deterministic (last): 3 slabs
      };
      for (std::size_t n = 0; n < std::size(cases); ++n) {
        Case c = cases[n];
        c.p.dtype = t;
        c.p.deterministic = n + 1 == std::size(cases);
        ok &= probe_case(*step, c.p, seed++, c.nan);
      }
    }
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}
