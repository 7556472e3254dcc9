// AVX2 + FMA building blocks shared by the host ops' vector kernels (x86-64 only; include after
// ops/simd.h and only where NPUFLOW_HAVE_AVX2_KERNELS). Accuracy: exp within 2 ulp (Cephes'
// polynomial), erf within 1.6e-7 absolute with no bias of one sign (see erf), far inside the
// encoder gates (relative L2 1e-5).
#pragma once

#include "ops/simd.h"

#if NPUFLOW_HAVE_AVX2_KERNELS
#include <immintrin.h>

namespace npuflow::avx2 {

NPUFLOW_TARGET_AVX2 inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

NPUFLOW_TARGET_AVX2 inline float horizontal_max(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x lane by lane: NaN stays NaN, below the smallest normal result 0, above the largest +inf.
NPUFLOW_TARGET_AVX2 inline __m256 exp(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 lo = _mm256_set1_ps(-87.3365447504019f);
  const __m256 in = x;
  // min/max return their second operand when one is NaN: x second keeps a NaN.
  x = _mm256_min_ps(hi, x);
  x = _mm256_max_ps(lo, x);
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  // 2^fx in two halves so fx = 128 (x near the top) does not overflow the exponent field early.
  const __m256i n = _mm256_cvttps_epi32(fx);
  const __m256i half_n = _mm256_srai_epi32(n, 1);
  const __m256 pow_a =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half_n, _mm256_set1_epi32(127)), 23));
  const __m256 pow_b = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(n, half_n), _mm256_set1_epi32(127)), 23));
  y = _mm256_mul_ps(_mm256_mul_ps(y, pow_a), pow_b);
  y = _mm256_andnot_ps(_mm256_cmp_ps(in, lo, _CMP_LT_OQ), y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(in, hi, _CMP_GT_OQ));
}

// erf in two pieces fitted for this kernel (least squares on Chebyshev-spaced points, checked in
// fp32 against double erf: within 1.6e-7 absolute): |x| < 1 as x * P(x^2), |x| >= 1 as
// 1 - e^(-x^2) Q(1/x). An error of a fixed sign (as Abramowitz & Stegun 7.1.26 has) is not enough:
// summed over a GELU's thousands of channels it biases the next projection.
NPUFLOW_TARGET_AVX2 inline __m256 erf(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 z = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(7.933349843369797e-05f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0.0008034805068746209f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0.005191213916987181f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0.02685539796948433f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0.11283625662326813f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0.3761262893676758f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.128379225730896f));
  const __m256 small = _mm256_mul_ps(a, p);
  const __m256 u = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(a, _mm256_set1_ps(1.0f)));
  __m256 q = _mm256_set1_ps(-0.036799389868974686f);
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.25539326667785645f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.7839522957801819f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(1.379658818244934f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-1.476818323135376f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.8658673763275146f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.05309372767806053f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.2903762757778168f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.004077594727277756f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.5635941028594971f));
  q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(3.240471050958149e-05f));
  const __m256 e = exp(_mm256_sub_ps(_mm256_setzero_ps(), z));
  const __m256 large = _mm256_fnmadd_ps(q, e, _mm256_set1_ps(1.0f));
  const __m256 r =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LT_OQ));
  return _mm256_or_ps(r, sign);
}

NPUFLOW_TARGET_AVX2 inline __m256 tanh(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 e = exp(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
  const __m256 r =
      _mm256_div_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), e), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  return _mm256_or_ps(r, sign);
}

}  // namespace npuflow::avx2
#endif
