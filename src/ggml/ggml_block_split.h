// A quantized GGUF weight's rows split into what the device's group-wise int8 GEMM takes: int8
// values (N x K) and, per 32-value block (16 for Q6_K), a scale and (for types with one) a min
// (ops/groupwise_linear.h). Bit-exact: the factors are the ones ggml's own dot products use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ggml.h"
#include "ops/groupwise_linear.h"

namespace npuflow::ggml {

// Whether split_weight_rows serves `type` (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, MXFP4).
bool splits_into_groups(ggml_type type);

// The whole N x K weight (rows row_bytes apart from base), rows in parallel on `context`.
// values: N x K int8, caller-sized. Returns the factors, in their most compact exact form.
GroupwiseFactors split_weight_rows(ggml_type type, const uint8_t* base, size_t row_bytes, int64_t k,
                                   int64_t n, int8_t* values, const ExecContext& context);

}  // namespace npuflow::ggml
