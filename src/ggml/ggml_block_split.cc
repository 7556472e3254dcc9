#include "ggml/ggml_block_split.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "quant/block_quantization.h"

namespace npuflow::ggml {
namespace {

constexpr int64_t kRowsPerTask = 64;

uint16_t half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return bits;
}

// 16 bytes of nibbles: low nibbles are values 0-15, high nibbles values 16-31 of a 32-block
// (Q4_0, Q4_1), stored as nibble - 8.
void split_nibbles(const uint8_t* q, int8_t* out) {
  for (int64_t j = 0; j < kQ8BlockValues / 2; ++j) {
    out[j] = static_cast<int8_t>((q[j] & 0x0f) - 8);
    out[j + kQ8BlockValues / 2] = static_cast<int8_t>((q[j] >> 4) - 8);
  }
}

// ggml's 32-value blocks (ggml-common.h): block_q8_0 is an fp16 scale d then 32 int8 values
// (x = q d); block_q4_0 is d then 16 bytes of nibbles (x = (nibble - 8) d); block_q4_1 is d, an
// fp16 min m, then the same nibbles (x = nibble d + m).
void split_32_blocks(ggml_type type, const uint8_t* row, int64_t k, int8_t* values, float* scales,
                     float* mins) {
  const bool with_min = type == GGML_TYPE_Q4_1;
  const size_t header = sizeof(uint16_t) * (with_min ? 2 : 1);
  const size_t block_bytes =
      header + (type == GGML_TYPE_Q8_0 ? kQ8BlockValues : kQ8BlockValues / 2);
  for (int64_t b = 0; b < k / kQ8BlockValues; ++b) {
    const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    scales[b] = half_bits_to_float(half_at(block));
    if (with_min) mins[b] = half_bits_to_float(half_at(block + sizeof(uint16_t)));
    int8_t* out = values + b * kQ8BlockValues;
    if (type == GGML_TYPE_Q8_0) {
      std::memcpy(out, block + header, kQ8BlockValues);
    } else {
      split_nibbles(block + header, out);
    }
  }
}

// block_mxfp4 (ggml-common.h): an E8M0 exponent e, then 16 bytes of nibbles laid out as Q4_0's,
// each an FP4 (E2M1) code. ggml's dot product multiplies int8 values twice the FP4 ones
// (kvalues_mxfp4) by half the block's scale (GGML_E8M0_TO_FP32_HALF), which this repeats bit for
// bit: the int8 values go to the GEMM, the halved scale is the block's.
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
constexpr size_t kMxfp4BlockBytes = 1 + kQ8BlockValues / 2;

float e8m0_half(uint8_t e) {
  // 2^(e - 128): a subnormal for e < 2, as ggml builds it.
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

void split_mxfp4_blocks(const uint8_t* row, int64_t k, int8_t* values, float* scales) {
  for (int64_t b = 0; b < k / kQ8BlockValues; ++b) {
    const uint8_t* block = row + static_cast<size_t>(b) * kMxfp4BlockBytes;
    scales[b] = e8m0_half(block[0]);
    int8_t* out = values + b * kQ8BlockValues;
    for (int64_t j = 0; j < kQ8BlockValues / 2; ++j) {
      out[j] = kMxfp4Values[block[1 + j] & 0x0f];
      out[j + kQ8BlockValues / 2] = kMxfp4Values[block[1 + j] >> 4];
    }
  }
}

// block_q4_K (ggml-common.h): fp16 d, fp16 dmin, 12 bytes packing eight 6-bit scales and eight
// 6-bit mins (get_scale_min_k4 in ggml-quants.c), then 128 bytes of nibbles: each 32 bytes hold
// sub-blocks 2j (low nibbles) and 2j + 1 (high). x = d sc nibble - dmin m per sub-block.
// block_q5_K is the same header, then 32 bytes of fifth bits (bit 2j of byte l: value l of
// sub-block 2j; bit 2j + 1: of sub-block 2j + 1), then the nibbles as Q4_K's; x = d sc q - dmin m
// with q = nibble + 16 fifth bit, stored as q - 16.
constexpr int64_t kSubBlocks = kQ8KBlockValues / kQ8BlockValues;
constexpr size_t kKHeaderBytes = 2 * sizeof(uint16_t) + 12;
constexpr size_t kQ4KBlockBytes = kKHeaderBytes + kQ8KBlockValues / 2;
constexpr size_t kQ5KBlockBytes = kQ4KBlockBytes + kQ8KBlockValues / 8;

void scale_and_min(int j, const uint8_t* packed, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

void split_k_blocks(bool five_bits, const uint8_t* row, int64_t k, int8_t* values, uint16_t* d,
                    uint16_t* minus_dmin, uint8_t* scales, uint8_t* mins) {
  const size_t block_bytes = five_bits ? kQ5KBlockBytes : kQ4KBlockBytes;
  const int offset = five_bits ? 16 : 8;
  for (int64_t b = 0; b < k / kQ8KBlockValues; ++b) {
    const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    d[b] = half_at(block);
    minus_dmin[b] = half_at(block + sizeof(uint16_t)) ^ 0x8000;  // the min enters subtracted
    const uint8_t* packed = block + 2 * sizeof(uint16_t);
    for (int j = 0; j < kSubBlocks; ++j) {
      scale_and_min(j, packed, scales[b * kSubBlocks + j], mins[b * kSubBlocks + j]);
    }
    const uint8_t* high = packed + 12;  // Q5_K's fifth bits
    const uint8_t* q = high + (five_bits ? kQ8KBlockValues / 8 : 0);
    int8_t* out = values + b * kQ8KBlockValues;
    for (int64_t pair = 0; pair < kSubBlocks / 2; ++pair, q += kQ8BlockValues) {
      for (int64_t l = 0; l < kQ8BlockValues; ++l) {
        const int fifth_low = five_bits ? ((high[l] >> (2 * pair)) & 1) << 4 : 0;
        const int fifth_high = five_bits ? ((high[l] >> (2 * pair + 1)) & 1) << 4 : 0;
        out[2 * pair * kQ8BlockValues + l] =
            static_cast<int8_t>((q[l] & 0x0f) + fifth_low - offset);
        out[(2 * pair + 1) * kQ8BlockValues + l] =
            static_cast<int8_t>((q[l] >> 4) + fifth_high - offset);
      }
    }
  }
}

// block_q6_K (ggml-common.h): 128 bytes of low nibbles (ql), 64 bytes of high bit pairs (qh),
// sixteen signed 8-bit sub-block scales, then the fp16 d; x = d sc q per 16 values, q = the six
// bits - 32 (dequantize_row_q6_K's layout: each half of 128 values takes 64 ql and 32 qh bytes,
// value l + 32 i of the half from ql[l + 32 (i % 2)]'s nibble i / 2 and qh[l]'s bits 2i, 2i + 1).
// The factor d sc keeps its sign: the multiplier is the signed byte itself, and the values stay
// q in [-32, 31], 64 of them, which the host holds as 6-bit codes.
constexpr int64_t kQ6KGroup = 16;
constexpr int64_t kQ6KGroups = kQ8KBlockValues / kQ6KGroup;
constexpr size_t kQ6KBlockBytes = kQ8KBlockValues / 2 + kQ8KBlockValues / 4 + kQ6KGroups + 2;

void split_q6_k_blocks(const uint8_t* row, int64_t k, int8_t* values, uint16_t* d,
                       int8_t* multipliers) {
  for (int64_t b = 0; b < k / kQ8KBlockValues; ++b) {
    const uint8_t* block = row + static_cast<size_t>(b) * kQ6KBlockBytes;
    const uint8_t* ql = block;
    const uint8_t* qh = ql + kQ8KBlockValues / 2;
    const auto* sc = reinterpret_cast<const int8_t*>(qh + kQ8KBlockValues / 4);
    d[b] = half_at(block + kQ6KBlockBytes - 2);
    int8_t* out = values + b * kQ8KBlockValues;
    for (int64_t half = 0; half < 2; ++half) {
      for (int64_t l = 0; l < 32; ++l) {
        for (int64_t i = 0; i < 4; ++i) {
          const uint8_t low = ql[half * 64 + l + 32 * (i % 2)] >> (4 * (i / 2)) & 0x0f;
          const uint8_t high = (qh[half * 32 + l] >> (2 * i)) & 3;
          out[half * 128 + 32 * i + l] = static_cast<int8_t>((low | high << 4) - 32);
        }
      }
    }
    std::copy(sc, sc + kQ6KGroups, multipliers + b * kQ6KGroups);
  }
}

template <typename Body>
void for_row_tasks(int64_t n, const ExecContext& context, Body body) {
  context.run(static_cast<size_t>((n + kRowsPerTask - 1) / kRowsPerTask), [&](size_t task) {
    const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
    for (int64_t r = first; r < std::min(n, first + kRowsPerTask); ++r) body(r);
  });
}

}  // namespace

bool splits_into_groups(ggml_type type) {
  return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 ||
         type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K ||
         type == GGML_TYPE_MXFP4;
}

GroupwiseFactors split_weight_rows(ggml_type type, const uint8_t* base, size_t row_bytes, int64_t k,
                                   int64_t n, int8_t* values, const ExecContext& context) {
  const int64_t groups = k / kQ8BlockValues;
  auto row_at = [&](int64_t r) { return base + static_cast<size_t>(r) * row_bytes; };
  if (type == GGML_TYPE_Q6_K) {
    const int64_t supers = k / kQ8KBlockValues, sub_blocks = k / kQ6KGroup;
    std::vector<uint16_t> d(static_cast<size_t>(n * supers));
    std::vector<int8_t> multipliers(static_cast<size_t>(n * sub_blocks));
    for_row_tasks(n, context, [&](int64_t r) {
      split_q6_k_blocks(row_at(r), k, values + r * k, d.data() + r * supers,
                        multipliers.data() + r * sub_blocks);
    });
    return {BlockFactors(std::move(d), multipliers, kQ6KGroups), BlockFactors(),
            ActivationBlocks::kQ8_K, 0, kQ6KGroup};
  }
  if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) {
    const bool five_bits = type == GGML_TYPE_Q5_K;
    const int64_t supers = k / kQ8KBlockValues;
    std::vector<uint16_t> d(static_cast<size_t>(n * supers)), minus_dmin(d.size());
    std::vector<uint8_t> scales(static_cast<size_t>(n * groups)), mins(scales.size());
    for_row_tasks(n, context, [&](int64_t r) {
      split_k_blocks(five_bits, row_at(r), k, values + r * k, d.data() + r * supers,
                     minus_dmin.data() + r * supers, scales.data() + r * groups,
                     mins.data() + r * groups);
    });
    return {BlockFactors(std::move(d), std::move(scales), kSubBlocks),
            BlockFactors(std::move(minus_dmin), std::move(mins), kSubBlocks),
            ActivationBlocks::kQ8_K, five_bits ? 16 : 8};
  }
  const bool with_min = type == GGML_TYPE_Q4_1;
  std::vector<float> scales(static_cast<size_t>(n * groups));
  std::vector<float> mins(with_min ? scales.size() : 0);
  for_row_tasks(n, context, [&](int64_t r) {
    if (type == GGML_TYPE_MXFP4) {
      split_mxfp4_blocks(row_at(r), k, values + r * k, scales.data() + r * groups);
    } else {
      split_32_blocks(type, row_at(r), k, values + r * k, scales.data() + r * groups,
                      with_min ? mins.data() + r * groups : nullptr);
    }
  });
  return {BlockFactors(std::move(scales)), BlockFactors(std::move(mins)),
          with_min ? ActivationBlocks::kQ8_1 : ActivationBlocks::kQ8_0};
}

}  // namespace npuflow::ggml
