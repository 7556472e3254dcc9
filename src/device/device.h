// The device interface: the primitive set every device (host, sim, rocket, xdna) offers. Ops
// compose these primitives; a device that cannot take a call returns kUnsupported and the caller
// runs the same primitive on the host device (DESIGN.md principles 3 and 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/element_type.h"
#include "core/parallel.h"
#include "core/status.h"

namespace npuflow {

// A constant K x N weight in the device's own resident layout, packed once per session.
class PackedWeight {
 public:
  PackedWeight(int64_t k, int64_t n, ElementType type) : k_(k), n_(n), type_(type) {}
  virtual ~PackedWeight() = default;
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  ElementType type() const { return type_; }
  virtual size_t resident_bytes() const = 0;

 private:
  int64_t k_;
  int64_t n_;
  ElementType type_;
};

struct DeviceOptions {
  // Threads a device may start itself when the caller lends no pool (ExecContext); 0: one per
  // core.
  int threads = 0;
};

// Receives finished int32 results: a block of `rows` x `cols` at (row, col) of the M x N result,
// with row stride `ld`. A device may call it concurrently from worker threads for disjoint
// blocks; the data is valid only during the call.
using Int32BlockSink = std::function<void(int64_t row, int64_t col, int64_t rows, int64_t cols,
                                          const int32_t* data, int64_t ld)>;

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view name() const = 0;
  virtual std::string description() const = 0;

  // Packs a row-major K x N int8 weight. The source may be freed afterwards.
  virtual Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t* weight, int64_t k,
                                                                 int64_t n) = 0;
  // c[m][n] = sum_k a[m][k] * w[k][n], exactly, in int32. a is int8 or uint8, row-major M x K.
  virtual Status gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                           int32_t* c, const ExecContext& context) = 0;

  // The same GEMM, handing results to `sink` block by block as they finish, so a caller can
  // apply its epilogue while the block is hot and never hold all M x N accumulators. The default
  // runs gemm_int8 into one buffer and hands it over whole.
  virtual Status gemm_int8_blocks(const void* a, ElementType a_type, int64_t m,
                                  const PackedWeight& w, const Int32BlockSink& sink,
                                  const ExecContext& context);

  // Packs a row-major K x N fp32 weight.
  virtual Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* weight, int64_t k,
                                                                  int64_t n) = 0;
  // c[m][n] = sum_k a[m][k] * w[k][n] in the device's float arithmetic.
  virtual Status gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                            const ExecContext& context) = 0;
};

}  // namespace npuflow
