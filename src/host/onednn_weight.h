// The host device's oneDNN weight: a K x N weight packed in column blocks, each with its
// matmul primitives cached, and the uint8 shift that runs int8 activations on the uint8 layout.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "core/element_type.h"
#include "core/status.h"
#include "core/strings.h"
#include "device/device.h"
#include "host/vnni_rows_gemm.h"

namespace npuflow::host_onednn {

using dnnl_dt = dnnl::memory::data_type;
using dnnl_tag = dnnl::memory::format_tag;

// The M used to let oneDNN choose the weight layout. On the kernels measured (brgemm AMX and
// AVX-512 VNNI) the layout does not depend on M; a primitive for any M is then created against
// the packed layout (see Block::primitive_for) and refused cleanly if oneDNN has none.
constexpr int64_t kLayoutProbeRows = 128;
// Columns per packed block: the unit of work handed to a thread. 256 keeps a K=1024 block of
// int8 weights (256 KiB) in L2 and gives 4 to 12 tasks on the projection shapes we target.
constexpr int64_t kColumnBlock = 256;
// Rows per task: bounds the per-thread result buffer (128 x 256 int32 = 128 KiB) and gives large
// M more tasks to spread.
constexpr int64_t kRowPanel = 128;
// Int8 GEMMs of at most this many rows run the few-rows kernel (host/vnni_rows_gemm.h), where
// oneDNN packed its VNNI layout. bench/int8_few_rows.cc on a 2-core AVX-512 VNNI VM: 1.6x
// oneDNN at one row, 1.06x at 64, 1.02-1.03x from 128 to 512 (noise): past 64 rows oneDNN keeps
// the work it was measured on.
constexpr int64_t kFewRowsMax = 64;
// Where oneDNN runs AMX tiles (unmeasured here: no AMX machine at hand) only one row takes the
// few-rows kernel, where streaming the weight bounds both kernels alike.
constexpr int64_t kFewRowsMaxWithAmx = 1;

inline dnnl_dt to_dnnl(ElementType type) {
  switch (type) {
    case ElementType::kInt8:
      return dnnl_dt::s8;
    case ElementType::kUInt8:
      return dnnl_dt::u8;
    case ElementType::kInt32:
      return dnnl_dt::s32;
    case ElementType::kFloat32:
      return dnnl_dt::f32;
    default:
      return dnnl_dt::undef;
  }
}

// One column block of a packed weight, with its matmul primitives cached per (rows, source
// type): creating one costs ~0.2 ms, executing a cached one nothing extra.
class Block {
 public:
  Block(int64_t first_column, int64_t width, dnnl::memory packed)
      : first_column_(first_column),
        width_(width),
        packed_(std::move(packed)),
        vnni_tiles_(find_vnni_tiles(packed_, width)) {}
  Block(Block&& other) noexcept
      : first_column_(other.first_column_),
        width_(other.width_),
        packed_(std::move(other.packed_)),
        vnni_tiles_(other.vnni_tiles_),
        primitives_(std::move(other.primitives_)) {}

  int64_t first_column() const { return first_column_; }
  int64_t width() const { return width_; }
  const dnnl::memory& packed() const { return packed_; }

  // The block as the few-rows kernel reads it (host/vnni_rows_gemm.h), where oneDNN packed it
  // in that layout (an int8 weight for its AVX-512 VNNI kernels); data == nullptr otherwise.
  const VnniTiles& vnni_tiles() const { return vnni_tiles_; }

  // The primitive and the scratchpad it needs. The scratchpad is the caller's (scratchpad_mode
  // user): with the library's own, concurrent executions of one primitive (two row panels of
  // this block on two threads) would share it and corrupt each other.
  struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory::desc scratchpad;
  };

  // The matmul oneDNN picks for m x k rows of `src` on this block's layout (throws dnnl::error).
  dnnl::matmul::primitive_desc describe(const dnnl::engine& engine, int64_t m, int64_t k,
                                        dnnl_dt src, dnnl_dt dst) const {
    dnnl::memory::desc src_desc({m, k}, src, dnnl_tag::ab);
    dnnl::memory::desc dst_desc({m, width_}, dst, dnnl_tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_desc, packed_.get_desc(), dst_desc),
                                        attr, engine);
  }

  Result<Primitive> primitive_for(const dnnl::engine& engine, int64_t m, int64_t k, dnnl_dt src,
                                  dnnl_dt dst) const {
    const auto key = std::make_pair(m, static_cast<int>(src));
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = primitives_.find(key); it != primitives_.end()) return it->second;
    try {
      const dnnl::matmul::primitive_desc pd = describe(engine, m, k, src, dst);
      Primitive primitive{dnnl::matmul(pd), pd.scratchpad_desc()};
      primitives_.emplace(key, primitive);
      return primitive;
    } catch (const dnnl::error& e) {
      return unsupported(
          str_cat("oneDNN has no matmul for m=", m, " on the packed layout: ", e.what()));
    }
  }

 private:
  int64_t first_column_;
  int64_t width_;
  // The packed block as VNNI tiles if it is exactly BA16a64b4a for K x width int8 (padding,
  // strides and no compensation included); data == nullptr otherwise.
  static VnniTiles find_vnni_tiles(const dnnl::memory& packed, int64_t width) {
    const dnnl::memory::desc desc = packed.get_desc();
    if (desc.data.ndims != 2 || desc.data_type() != dnnl_dt::s8) return {};
    const dnnl::memory::desc tiles({desc.dims()[0], width}, dnnl_dt::s8, dnnl_tag::BA16a64b4a);
    if (desc != tiles) return {};
    return {static_cast<const int8_t*>(packed.get_data_handle()), desc.data.padded_dims[0], width,
            desc.data.format_desc.blocking.strides[1]};
  }

  dnnl::memory packed_;
  VnniTiles vnni_tiles_;  // read once at construction: the packed buffer never moves
  mutable std::mutex mutex_;
  mutable std::map<std::pair<int64_t, int>, Primitive> primitives_;
};

class OneDnnWeight final : public PackedWeight {
 public:
  OneDnnWeight(int64_t k, int64_t n, ElementType type, std::vector<Block> blocks,
               std::vector<int32_t> column_sums)
      : PackedWeight(k, n, type),
        blocks_(std::move(blocks)),
        column_sums_(std::move(column_sums)) {}

  size_t resident_bytes() const override {
    size_t bytes = column_sums_.size() * sizeof(int32_t);
    for (const Block& block : blocks_) bytes += block.packed().get_desc().get_size();
    return bytes;
  }
  const std::vector<Block>& blocks() const { return blocks_; }
  // sum_k w[k][n] of an int8 weight (empty otherwise): the correction of the uint8 shift.
  const std::vector<int32_t>& column_sums() const { return column_sums_; }

 private:
  std::vector<Block> blocks_;
  std::vector<int32_t> column_sums_;
};

// sum_k w[k][n] of a row-major K x N int8 weight.
inline std::vector<int32_t> int8_column_sums(const int8_t* weight, int64_t k, int64_t n) {
  std::vector<int32_t> sums(static_cast<size_t>(n), 0);
  for (int64_t row = 0; row < k; ++row) {
    for (int64_t col = 0; col < n; ++col) sums[static_cast<size_t>(col)] += weight[row * n + col];
  }
  return sums;
}

// int8 activations run as uint8 (x + 128, a flip of the sign bit) on the layout packed for
// uint8: oneDNN's fast int8 kernels on AVX-512 VNNI without AMX take an s8 source only with a
// compensated weight layout, and on the uint8 layout it falls to its reference kernel (~1000x
// slower). x.w = (x + 128).w - 128 * sum_k w, exact in wrapping int32 arithmetic.
inline void shift_int8_rows_to_uint8(const int8_t* rows, int64_t count, uint8_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<uint8_t>(rows[i]) ^ 0x80u;
}

inline bool shifts_to_uint8(ElementType a_type, ElementType weight_type, ElementType c_type) {
  return a_type == ElementType::kInt8 && weight_type == ElementType::kInt8 &&
         c_type == ElementType::kInt32;
}

inline void unshift_int32_block(int32_t* block, int64_t rows, int64_t width,
                                const int32_t* column_sums) {
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* row = block + r * width;
    for (int64_t c = 0; c < width; ++c) {
      row[c] = static_cast<int32_t>(static_cast<uint32_t>(row[c]) -
                                    128u * static_cast<uint32_t>(column_sums[c]));
    }
  }
}

}  // namespace npuflow::host_onednn
