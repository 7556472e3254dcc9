// The tiles host_attention (ops/host_attention.h) hands its kernels: one task's queries of one
// head against all the keys, with the keys laid out in panels. Shared by the AVX2 kernels in
// host_attention.cc and the AVX-512 ones in host_attention_avx512.cc.
#pragma once

#include <cstdint>

namespace npuflow::attention_tiles {

constexpr int64_t kKeyTile = 16;  // keys per K^T panel: two AVX2 vectors, one AVX-512 vector

// One task's operands: `rows` queries of one head against all T keys.
struct Block {
  const float* q = nullptr;  // rows x dh, row stride ld_qkv
  // The head's keys transposed in panels of kKeyTile keys (each dh x kKeyTile, contiguous, the
  // last one zero-padded): panel t holds keys [t * kKeyTile, (t + 1) * kKeyTile).
  const float* kt = nullptr;
  const float* v = nullptr;  // T x dh, contiguous: the head's values
  int64_t ld_qkv = 0, rows = 0, tokens = 0, dh = 0;
  float* scores = nullptr;  // rows x ld_scores: T keys, then the padding's scores
  int64_t ld_scores = 0;
  float* out = nullptr;  // rows x dh, row stride ld_out
  int64_t ld_out = 0;
};

// scores = Q K^T over every panel, and out = P V, with AVX-512: each output the same sum, in the
// same order and with the same fused multiply-adds as the AVX2 kernels, so the two paths agree to
// the bit. Defined where NPUFLOW_HAVE_AVX2_KERNELS is; called where avx512_kernels_active().
void scores_avx512(const Block& b);
void context_avx512(const Block& b);

}  // namespace npuflow::attention_tiles
