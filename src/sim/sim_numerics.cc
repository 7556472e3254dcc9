#include "sim/sim_numerics.h"

#include <algorithm>
#include <vector>

#include "core/fp16.h"

namespace npuflow::sim {
namespace {

template <typename T>
T* scratch(std::vector<T>& buffer, int64_t count) {
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// One K tile of one row in fp32: conv[j] = sum_{kk in [k0, k1)} a[kk] * w[kk][n0 + j].
void fp32_tile(const float* a_row, const float* w, int64_t ldw, int64_t n0, int64_t n, int64_t k0,
               int64_t k1, float* conv) {
  std::fill(conv, conv + n, 0.0f);
  for (int64_t kk = k0; kk < k1; ++kk) {
    const float av = a_row[kk];
    const float* w_row = w + kk * ldw + n0;
    for (int64_t j = 0; j < n; ++j) conv[j] += av * w_row[j];
  }
}

// One K tile of one row in int32 (exact: |a*w| <= 2^14 and Kt <= 16384).
void int32_tile(const int8_t* a_row, const int8_t* w, int64_t ldw, int64_t n0, int64_t n,
                int64_t k0, int64_t k1, int32_t* part) {
  std::fill(part, part + n, 0);
  for (int64_t kk = k0; kk < k1; ++kk) {
    const int32_t av = a_row[kk];
    if (av == 0) continue;
    const int8_t* w_row = w + kk * ldw + n0;
    for (int64_t j = 0; j < n; ++j) part[j] += av * static_cast<int32_t>(w_row[j]);
  }
}

int32_t saturate_int16(int32_t value) {
  return std::clamp<int32_t>(value, -32768, 32767);
}

}  // namespace

const char* kacc_mode_name(KAccMode mode) {
  return mode == KAccMode::kNpu ? "npu" : "host";
}

std::optional<KAccMode> parse_kacc_mode(std::string_view text) {
  if (text == "npu") return KAccMode::kNpu;
  if (text == "host") return KAccMode::kHost;
  return std::nullopt;
}

const char* fp16_accumulation_name(Fp16Accumulation accumulation) {
  switch (accumulation) {
    case Fp16Accumulation::kNpuKacc:
      return "npu-kacc";
    case Fp16Accumulation::kHostFp32:
      return "host-fp32";
    case Fp16Accumulation::kFp32Out:
      return "fp32-out";
  }
  return "?";
}

Fp16Accumulation choose_fp16_accumulation(KAccMode mode, bool fp32_out, int64_t m,
                                          const TilePlan& plan) {
  if (fp32_out) return Fp16Accumulation::kFp32Out;
  if (mode == KAccMode::kHost) return Fp16Accumulation::kHostFp32;
  const int64_t last_rows = m - (plan.m_tiles - 1) * plan.mt;
  const bool tiny_last = plan.m_tiles > 1 && last_rows < 12;
  const bool tiny_m = m < 12 && plan.k_tiles > 1;
  return tiny_last || tiny_m ? Fp16Accumulation::kHostFp32 : Fp16Accumulation::kNpuKacc;
}

void fp16_slice(const float* a, int64_t lda, const float* w, int64_t ldw, const SliceRows& s,
                Fp16Accumulation accumulation, void* c, int64_t ldc) {
  thread_local std::vector<float> conv_buffer, sum_buffer;
  thread_local std::vector<double> wide_buffer;
  float* conv = scratch(conv_buffer, s.n);
  float* sum = scratch(sum_buffer, s.n);
  double* wide = scratch(wide_buffer, s.n);
  for (int64_t row = s.row0; row < s.row0 + s.rows; ++row) {
    const float* a_row = a + row * lda;
    std::fill(sum, sum + s.n, 0.0f);
    std::fill(wide, wide + s.n, 0.0);
    for (int64_t k0 = 0, ki = 0; k0 < s.k; k0 += s.kt, ++ki) {
      fp32_tile(a_row, w, ldw, s.n0, s.n, k0, std::min(s.k, k0 + s.kt), conv);
      for (int64_t j = 0; j < s.n; ++j) {
        switch (accumulation) {
          case Fp16Accumulation::kNpuKacc:  // ki = 0: DPU rounds; ki > 0: EW adds the fp16 partial
            sum[j] = round_to_half(ki == 0 ? conv[j] : conv[j] + sum[j]);
            break;
          case Fp16Accumulation::kHostFp32:
            sum[j] += round_to_half(conv[j]);
            break;
          case Fp16Accumulation::kFp32Out:
            wide[j] += static_cast<double>(conv[j]);
            break;
        }
      }
    }
    if (accumulation == Fp16Accumulation::kFp32Out) {
      float* out = static_cast<float*>(c) + row * ldc + s.n0;
      for (int64_t j = 0; j < s.n; ++j) out[j] = static_cast<float>(wide[j]);
    } else {
      uint16_t* out = static_cast<uint16_t*>(c) + row * ldc + s.n0;
      for (int64_t j = 0; j < s.n; ++j) out[j] = float_to_half_bits(sum[j]);
    }
  }
}

void int8_slice(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, const SliceRows& s,
                int32_t* c, int64_t ldc) {
  thread_local std::vector<int32_t> part_buffer;
  thread_local std::vector<int64_t> total_buffer;
  int32_t* part = scratch(part_buffer, s.n);
  int64_t* total = scratch(total_buffer, s.n);
  for (int64_t row = s.row0; row < s.row0 + s.rows; ++row) {
    std::fill(total, total + s.n, 0);
    for (int64_t k0 = 0; k0 < s.k; k0 += s.kt) {
      int32_tile(a + row * lda, w, ldw, s.n0, s.n, k0, std::min(s.k, k0 + s.kt), part);
      for (int64_t j = 0; j < s.n; ++j) total[j] += part[j];
    }
    int32_t* out = c + row * ldc + s.n0;
    for (int64_t j = 0; j < s.n; ++j) out[j] = static_cast<int32_t>(total[j]);
  }
}

void int4_slice(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, const SliceRows& s,
                int32_t* c, int64_t ldc) {
  thread_local std::vector<int32_t> part_buffer;
  int32_t* part = scratch(part_buffer, s.n);
  for (int64_t row = s.row0; row < s.row0 + s.rows; ++row) {
    int32_t* out = c + row * ldc + s.n0;
    std::fill(out, out + s.n, 0);
    for (int64_t k0 = 0; k0 < s.k; k0 += s.kt) {
      int32_tile(a + row * lda, w, ldw, s.n0, s.n, k0, std::min(s.k, k0 + s.kt), part);
      for (int64_t j = 0; j < s.n; ++j) out[j] += saturate_int16(part[j]);
    }
  }
}

void groupwise_slice(const int8_t* a, int64_t lda, const float* a_scales, const int8_t* w,
                     int64_t ldw, const float* w_scales, int64_t group, bool int4,
                     const SliceRows& s, float* c, int64_t ldc) {
  thread_local std::vector<int32_t> part_buffer;
  thread_local std::vector<int64_t> group_buffer;
  int32_t* part = scratch(part_buffer, s.n);
  int64_t* group_sum = scratch(group_buffer, s.n);
  const int64_t groups = s.k / group;
  for (int64_t row = s.row0; row < s.row0 + s.rows; ++row) {
    float* out = c + row * ldc + s.n0;
    std::fill(out, out + s.n, 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      std::fill(group_sum, group_sum + s.n, 0);
      for (int64_t k0 = g * group; k0 < (g + 1) * group; k0 += s.kt) {
        int32_tile(a + row * lda, w, ldw, s.n0, s.n, k0, std::min((g + 1) * group, k0 + s.kt),
                   part);
        for (int64_t j = 0; j < s.n; ++j) group_sum[j] += int4 ? saturate_int16(part[j]) : part[j];
      }
      const float a_scale = a_scales[row * groups + g];
      for (int64_t j = 0; j < s.n; ++j) {
        const float scale = a_scale * w_scales[(s.n0 + j) * groups + g];
        out[j] = out[j] + scale * static_cast<float>(static_cast<int32_t>(group_sum[j]));
      }
    }
  }
}

}  // namespace npuflow::sim
