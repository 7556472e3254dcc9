// Rotary position embedding (RoPE) in transformers' rotate_half form, applied to the q and k
// blocks of the fused projection's rows: x * cos + [-x2, x1] * sin per head, where x1 and x2 are
// the two halves of the head's dims. The tables are whatever the graph computed (any base, any
// scaling): the plan applies them, it never derives them.
#pragma once

#include <cstdint>
#include <vector>

namespace npuflow {

// One image's tables: `tokens` rows of `head_dim` floats each.
struct RotaryTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// qkv: `tokens` rows of [q | k | v], each `hidden` = heads x head_dim wide; q and k are rotated
// in place, v is left alone. head_dim must be even.
void apply_rotary(float* qkv, int64_t tokens, int64_t hidden, int64_t heads,
                  const RotaryTables& tables);

// A table laid out again: `shape` (right-aligned to rank perm.size(), leading dims 1) transposed
// by `perm`. Used for constant tables that ORT's transpose optimizer stored transposed.
struct PermutedTable {
  std::vector<float> data;
  std::vector<int64_t> shape;
};
PermutedTable permute_table(const float* data, std::vector<int64_t> shape,
                            const std::vector<int64_t>& perm);

}  // namespace npuflow
