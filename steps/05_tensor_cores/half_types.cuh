// half_types.cuh — the two 16-bit element types this step computes in, behind one interface.
//
//   fp16 (__half):          1 sign, 5 exponent, 10 mantissa bits: max 65504, eps 2^-10
//   bf16 (__nv_bfloat16):   1 sign, 8 exponent,  7 mantissa bits: fp32's range, eps 2^-7
//
// The tensor cores multiply either type exactly and add the products in fp32, so the only
// rounding this step adds to step 04's fp32 algorithm is at the three places where a value is
// stored in 16 bits: the inputs (given), P before the P V product, and O at the end.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>

namespace fa::step05 {

/// \brief Two floats → two 16-bit values, round to nearest even, packed in 32 bits (`lo` in
/// the low half, i.e. at the lower address once stored). Pairs because the hardware converts
/// two floats in one instruction (F2FP.PACK_AB) and the stores want whole 32-bit words; plain
/// `unsigned` words because a uint2 / uint4 of them is stored as ONE 8- or 16-byte instruction
/// (a struct of __half2 members is copied member by member: four 4-byte stores).
template <class T>
struct Half;

template <>
struct Half<__half> {
  __device__ __forceinline__ static unsigned pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    unsigned bits;
    memcpy(&bits, &v, sizeof(bits));
    return bits;
  }
};

template <>
struct Half<__nv_bfloat16> {
  __device__ __forceinline__ static unsigned pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    unsigned bits;
    memcpy(&bits, &v, sizeof(bits));
    return bits;
  }
};

}  // namespace fa::step05
