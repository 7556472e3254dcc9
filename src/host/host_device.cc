#include "host/host_device.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "device/int8_gemm_loop.h"
#include "host/float_exact_int8.h"
#include "host/fp16_attention.h"
#include "host/fp16_conv.h"
#include "host/groupwise_gemm.h"
#include "host/onednn_weight.h"
#include "host/scoped_omp_threads.h"
#include "host/vnni_rows_gemm.h"

namespace npuflow {
namespace {

using namespace host_onednn;

// An int8 weight for the float32 kernels: one float weight per chunk of K, and sum_k w[k][n] for
// the uint8 shift's correction.
class FloatInt8Weight final : public PackedWeight {
 public:
  FloatInt8Weight(int64_t k, int64_t n, std::vector<std::unique_ptr<PackedWeight>> chunks,
                  std::vector<int32_t> column_sums)
      : PackedWeight(k, n, ElementType::kInt8),
        chunks_(std::move(chunks)),
        column_sums_(std::move(column_sums)) {}
  size_t resident_bytes() const override {
    size_t bytes = 0;
    for (const auto& chunk : chunks_) bytes += chunk->resident_bytes();
    return bytes;
  }
  const std::vector<std::unique_ptr<PackedWeight>>& chunks() const { return chunks_; }
  const std::vector<int32_t>& column_sums() const { return column_sums_; }

 private:
  std::vector<std::unique_ptr<PackedWeight>> chunks_;
  std::vector<int32_t> column_sums_;
};

// oneDNN's int8 kernels for CPUs without VNNI (AVX2, AVX-512 without VNNI) add u8 x s8 products
// in pairs into int16 with saturation (vpmaddubsw), so sums of large activations are clipped.
// Probed once: the worst pair (255 x -128, twice) either comes back exact or the host device runs
// every int8 GEMM on its float32 kernels, exactly (host/float_exact_int8.h).
bool onednn_int8_is_exact(const dnnl::engine& engine) {
  try {
    constexpr int64_t k = 64, n = 16, m = 4;
    std::vector<uint8_t> a(static_cast<size_t>(m * k), 255);
    std::vector<int8_t> w(static_cast<size_t>(k * n), -128);
    std::vector<int32_t> c(static_cast<size_t>(m * n), 0);
    dnnl::stream stream(engine);
    dnnl::memory::desc a_desc({m, k}, dnnl_dt::u8, dnnl_tag::ab);
    dnnl::memory::desc w_desc({k, n}, dnnl_dt::s8, dnnl_tag::ab);
    dnnl::memory::desc c_desc({m, n}, dnnl_dt::s32, dnnl_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, w_desc, c_desc), engine);
    dnnl::memory am(a_desc, engine, a.data()), wm(w_desc, engine, w.data()),
        cm(c_desc, engine, c.data());
    dnnl::matmul(pd).execute(stream,
                             {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}});
    stream.wait();
    return std::all_of(c.begin(), c.end(), [](int32_t v) { return v == k * 255 * -128; });
  } catch (const dnnl::error&) {
    return false;
  }
}

// Hands a finished dense block (rows x cols at (row, col), row stride cols) to the caller.
using RawSink =
    std::function<void(int64_t row, int64_t col, int64_t rows, int64_t cols, const void* data)>;

// A sink that copies each block into a row-major M x N result.
template <typename T>
RawSink copy_into(T* c, int64_t n) {
  return [c, n](int64_t row, int64_t col, int64_t rows, int64_t cols, const void* data) {
    const T* block = static_cast<const T*>(data);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(c + (row + r) * n + col, block + r * cols, static_cast<size_t>(cols) * sizeof(T));
    }
  };
}

// An fp16 weight: the fp32 weight oneDNN packed from the exactly widened fp16 values.
class WidenedFp16Weight final : public PackedWeight {
 public:
  WidenedFp16Weight(int64_t k, int64_t n, std::unique_ptr<PackedWeight> inner)
      : PackedWeight(k, n, ElementType::kFloat16), inner_(std::move(inner)) {}
  size_t resident_bytes() const override { return inner_->resident_bytes(); }
  const PackedWeight& inner() const { return *inner_; }

 private:
  std::unique_ptr<PackedWeight> inner_;
};

// int4 and group-wise weights: the plain row-major K x N values for the exact loops.
class PlainIntWeight final : public PackedWeight {
 public:
  PlainIntWeight(const int8_t* weight, int64_t k, int64_t n, ElementType type, int64_t group)
      : PackedWeight(k, n, type, group), values_(weight, weight + k * n) {}
  size_t resident_bytes() const override { return values_.size(); }
  const int8_t* data() const { return values_.data(); }

 private:
  std::vector<int8_t> values_;
};

Status check_int4_values(const int8_t* values, int64_t count, const char* what) {
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] < -7 || values[i] > 7) {
      return invalid_argument(
          str_cat("int4 ", what, " value ", int{values[i]}, " at ", i, " is outside [-7, 7]"));
    }
  }
  return Status::ok();
}

}  // namespace

struct HostDevice::Impl {
  DeviceOptions options;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  bool float_int8 = options.float_int8 || !onednn_int8_is_exact(engine);
  bool amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;

  Result<std::unique_ptr<PackedWeight>> pack(const void* weight, int64_t k, int64_t n,
                                             ElementType weight_type, ElementType probe_src,
                                             ElementType dst) {
    // oneDNN divides by K and N while it chooses a layout (SIGFPE at K = 0).
    if (k <= 0 || n <= 0) return invalid_argument(str_cat("weight shape ", k, "x", n, " is empty"));
    try {
      const size_t element = element_size(weight_type);
      std::vector<Block> blocks;
      dnnl::stream stream(engine);
      for (int64_t first = 0; first < n; first += kColumnBlock) {
        const int64_t width = std::min(kColumnBlock, n - first);
        dnnl::memory::desc probe_src_desc({kLayoutProbeRows, k}, to_dnnl(probe_src), dnnl_tag::ab);
        dnnl::memory::desc any_weight({k, width}, to_dnnl(weight_type), dnnl_tag::any);
        dnnl::memory::desc dst_desc({kLayoutProbeRows, width}, to_dnnl(dst), dnnl_tag::ab);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(probe_src_desc, any_weight, dst_desc),
                                        engine);
        // The source block is a strided view (row stride n) of the row-major weight.
        dnnl::memory::desc plain_desc({k, width}, to_dnnl(weight_type), dnnl::memory::dims{n, 1});
        auto* base = static_cast<const uint8_t*>(weight) + static_cast<size_t>(first) * element;
        dnnl::memory plain(plain_desc, engine, const_cast<uint8_t*>(base));
        dnnl::memory packed(pd.weights_desc(), engine);
        dnnl::reorder(plain, packed).execute(stream, plain, packed);
        blocks.emplace_back(first, width, packed);
      }
      stream.wait();
      std::vector<int32_t> sums;
      if (weight_type == ElementType::kInt8) {
        sums = int8_column_sums(static_cast<const int8_t*>(weight), k, n);
      }
      return std::unique_ptr<PackedWeight>(
          new OneDnnWeight(k, n, weight_type, std::move(blocks), std::move(sums)));
    } catch (const dnnl::error& e) {
      return internal_error(str_cat("oneDNN could not pack a ", k, "x", n, " weight: ", e.what()));
    }
  }

  // Splits the GEMM into tasks of (row panel, column block); each task runs one oneDNN matmul
  // into a dense per-thread buffer (a strided destination would fall to oneDNN's reference
  // kernel) and hands it to `sink` at once, while it is still in cache.
  Status run(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
             ElementType c_type, const RawSink& sink, const ExecContext& context) {
    const auto* weight = dynamic_cast<const OneDnnWeight*>(&w);
    if (weight == nullptr) return invalid_argument("weight was not packed by the host device");
    if (m < 0) return invalid_argument(str_cat("row count ", m, " is negative"));
    if (m == 0) return Status::ok();
    const auto& blocks = weight->blocks();
    const bool shift = shifts_to_uint8(a_type, w.type(), c_type);
    const ElementType kernel_a = shift ? ElementType::kUInt8 : a_type;
    const int64_t panels = (m + kRowPanel - 1) / kRowPanel;
    const int64_t last_panel_rows = m - (panels - 1) * kRowPanel;
    const int64_t padded_k = blocks.empty() ? 0 : blocks.front().vnni_tiles().padded_k;
    // Decided on this thread: the portable-kernels switch is per calling thread.
    const bool few_rows = kernel_a == ElementType::kUInt8 && c_type == ElementType::kInt32 &&
                          m <= few_rows_max() && vnni_rows_kernel_runs() &&
                          std::all_of(blocks.begin(), blocks.end(), [padded_k](const Block& block) {
                            const VnniTiles& tiles = block.vnni_tiles();
                            return tiles.data != nullptr && tiles.padded_k == padded_k;
                          });
    // int8 rows shift to uint8, and the few-rows kernel reads rows padded with zeros to the packed
    // K: either is prepared once here, on the calling thread, and read by every block's task. (A
    // task names it through `kernel_rows`: on another thread the thread_local is another.)
    const int64_t row_stride = few_rows ? padded_k : w.k();
    thread_local std::vector<uint8_t> prepared;
    const auto* kernel_rows = static_cast<const uint8_t*>(a);
    if (few_rows || shift) {
      rows_as_uint8(a, a_type, m, w.k(), row_stride, prepared);
      kernel_rows = prepared.data();
    }
    // Resolve every primitive first so a refusal happens before any result is handed out (the
    // few-rows kernel needs none).
    std::vector<Block::Primitive> full_panel, last_panel;
    for (const Block& block : blocks) {
      if (few_rows) break;
      for (auto [rows, out] : {std::pair{std::min(m, kRowPanel), &full_panel},
                               std::pair{last_panel_rows, &last_panel}}) {
        auto primitive =
            block.primitive_for(engine, rows, w.k(), to_dnnl(kernel_a), to_dnnl(c_type));
        if (!primitive.is_ok()) return primitive.status();
        out->push_back(primitive.value());
      }
    }
    const size_t c_element = element_size(c_type);
    std::mutex failure_mutex;
    std::string failure;
    auto task = [&](size_t index) {
      const int64_t panel = static_cast<int64_t>(index) / static_cast<int64_t>(blocks.size());
      const size_t block_index = index % blocks.size();
      const Block& block = blocks[block_index];
      const int64_t row = panel * kRowPanel;
      const int64_t rows = panel == panels - 1 ? last_panel_rows : kRowPanel;
      try {
        if (few_rows) {
          run_few_rows(kernel_rows + row * row_stride, a_type, row, rows, block, *weight, sink);
          return;
        }
        // On a lent pool each task is one thread; otherwise oneDNN's OpenMP team works on it.
        const ScopedOmpThreads team(context.has_pool()    ? 1
                                    : options.threads > 0 ? options.threads
                                                          : omp_get_num_procs());
        const Block::Primitive& primitive =
            panel == panels - 1 ? last_panel[block_index] : full_panel[block_index];
        // Each thread brings its own scratchpad (see Block::Primitive).
        thread_local std::vector<uint8_t> scratch;
        const size_t scratch_bytes = primitive.scratchpad.get_size();
        if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
        const size_t bytes = static_cast<size_t>(rows * block.width()) * c_element;
        // `panel_rows` is the first of this panel's rows.
        auto execute = [&](const void* panel_rows, std::vector<uint8_t>& out) {
          if (out.size() < bytes) out.resize(bytes);
          dnnl::stream stream(engine);
          dnnl::memory src({{rows, w.k()}, to_dnnl(kernel_a), dnnl_tag::ab}, engine,
                           const_cast<void*>(panel_rows));
          dnnl::memory dst({{rows, block.width()}, to_dnnl(c_type), dnnl_tag::ab}, engine,
                           out.data());
          dnnl::memory scratchpad(primitive.scratchpad, engine, scratch.data());
          primitive.matmul.execute(stream, {{DNNL_ARG_SRC, src},
                                            {DNNL_ARG_WEIGHTS, block.packed()},
                                            {DNNL_ARG_DST, dst},
                                            {DNNL_ARG_SCRATCHPAD, scratchpad}});
          stream.wait();
        };
        thread_local std::vector<uint8_t> block_out;
        execute(kernel_rows + row * row_stride * element_size(kernel_a), block_out);
        if (shift) {
          unshift_int32_block(reinterpret_cast<int32_t*>(block_out.data()), rows, block.width(),
                              weight->column_sums().data() + block.first_column());
        }
        sink(row, block.first_column(), rows, block.width(), block_out.data());
      } catch (const dnnl::error& e) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        failure = e.what();
      }
    };
    // Without a lent pool oneDNN spreads each block over its OpenMP team; few-rows blocks, which
    // run on one thread each, are spread over such a team instead.
    const ExecContext team =
        few_rows && !context.has_pool()
            ? openmp_exec_context(options.threads > 0 ? options.threads : omp_get_num_procs())
            : ExecContext{};
    (team.has_pool() ? team : context).run(static_cast<size_t>(panels) * blocks.size(), task);
    if (!failure.empty()) {
      return Status(StatusCode::kDeviceFailure, str_cat("oneDNN matmul failed: ", failure));
    }
    return Status::ok();
  }

  int64_t few_rows_max() const {
    if (options.few_rows_max >= 0) return options.few_rows_max;
    return amx ? kFewRowsMaxWithAmx : kFewRowsMax;
  }

  // m rows of K int8 or uint8 activations as uint8 (int8 ones shifted), `stride` apart, zero
  // from K to the stride.
  static void rows_as_uint8(const void* a, ElementType a_type, int64_t m, int64_t k, int64_t stride,
                            std::vector<uint8_t>& out) {
    out.resize(static_cast<size_t>(m * stride));
    const auto* source = static_cast<const uint8_t*>(a);
    for (int64_t r = 0; r < m; ++r) {
      uint8_t* row = out.data() + r * stride;
      if (a_type == ElementType::kInt8) {
        shift_int8_rows_to_uint8(reinterpret_cast<const int8_t*>(source + r * k), k, row);
      } else {
        std::memcpy(row, source + r * k, static_cast<size_t>(k));
      }
      std::fill(row + k, row + stride, uint8_t{0});
    }
  }

  // One block of rows (from rows_as_uint8) on the few-rows kernel; int8 activations' shift
  // taken back out of the int32 sums.
  static void run_few_rows(const uint8_t* padded_rows, ElementType a_type, int64_t first_row,
                           int64_t rows, const Block& block, const OneDnnWeight& weight,
                           const RawSink& sink) {
    const VnniTiles& tiles = block.vnni_tiles();
    thread_local std::vector<int32_t> out;
    out.resize(static_cast<size_t>(rows * block.width()));
    vnni_rows_gemm(padded_rows, rows, tiles.padded_k, tiles, out.data(), block.width());
    if (a_type == ElementType::kInt8) {
      unshift_int32_block(out.data(), rows, block.width(),
                          weight.column_sums().data() + block.first_column());
    }
    sink(first_row, block.first_column(), rows, block.width(), out.data());
  }

  std::string int8_kernel(ElementType a_type, const PackedWeight& w) {
    if (dynamic_cast<const FloatInt8Weight*>(&w) != nullptr) return "float32 chunks";
    const auto* weight = dynamic_cast<const OneDnnWeight*>(&w);
    if (weight == nullptr || weight->blocks().empty()) return "none";
    const ElementType kernel_a =
        shifts_to_uint8(a_type, w.type(), ElementType::kInt32) ? ElementType::kUInt8 : a_type;
    try {
      return weight->blocks()[0]
          .describe(engine, kLayoutProbeRows, w.k(), to_dnnl(kernel_a), dnnl_dt::s32)
          .impl_info_str();
    } catch (const dnnl::error& e) {
      return str_cat("none (", e.what(), ")");
    }
  }

  // An int8 weight for the float32 kernels (host/float_exact_int8.h), one float weight per chunk.
  Result<std::unique_ptr<PackedWeight>> pack_float_int8(const int8_t* weight, int64_t k,
                                                        int64_t n) {
    if (k <= 0 || n <= 0) return invalid_argument(str_cat("weight shape ", k, "x", n, " is empty"));
    const FloatChunks plan = float_chunks_for(k);
    std::vector<std::unique_ptr<PackedWeight>> chunks;
    std::vector<float> widened;
    for (int64_t c = 0; c < plan.count; ++c) {
      widened.resize(static_cast<size_t>(plan.size(c) * n));
      widen_weight_rows(weight, n, plan.begin(c), plan.size(c), widened.data());
      auto packed = pack(widened.data(), plan.size(c), n, ElementType::kFloat32,
                         ElementType::kFloat32, ElementType::kFloat32);
      if (!packed.is_ok()) return packed.status();
      chunks.push_back(std::move(packed).value());
    }
    return std::unique_ptr<PackedWeight>(
        new FloatInt8Weight(k, n, std::move(chunks), int8_column_sums(weight, k, n)));
  }

  // One float GEMM per chunk of K. Every chunk's values are exact integers; one chunk is handed
  // on block by block as int32, several are summed in an M x N int32 buffer and the last chunk's
  // blocks are handed on as they complete.
  Status run_float_int8(const void* a, ElementType a_type, int64_t m, const FloatInt8Weight& w,
                        const Int32BlockSink& sink, const ExecContext& context) {
    if (m < 0) return invalid_argument(str_cat("row count ", m, " is negative"));
    if (m == 0) return Status::ok();
    const int64_t n = w.n();
    const FloatChunks plan = float_chunks_for(w.k());
    const int32_t* sums = w.column_sums().data();
    // The calling thread's buffers, grown to the largest call and kept (the pool's tasks only
    // read or write disjoint blocks of them during this call).
    thread_local std::vector<float> widened;
    thread_local std::vector<int32_t> total;
    if (plan.count > 1) total.assign(static_cast<size_t>(m * n), 0);
    for (int64_t c = 0; c < plan.count; ++c) {
      widened.resize(static_cast<size_t>(m * plan.size(c)));
      widen_activation_columns(a, a_type, m, w.k(), plan.begin(c), plan.size(c), widened.data());
      const bool last = c + 1 == plan.count;
      int32_t* sum_buffer = plan.count > 1 ? total.data() : nullptr;
      const RawSink to_int32 = [&](int64_t row, int64_t col, int64_t rows, int64_t cols,
                                   const void* data) {
        const auto* values = static_cast<const float*>(data);
        thread_local std::vector<int32_t> block;
        int32_t* out = sum_buffer ? sum_buffer + row * n + col : nullptr;
        const int64_t ld = sum_buffer ? n : cols;
        if (!sum_buffer) {
          block.resize(static_cast<size_t>(rows * cols));
          out = block.data();
        }
        for (int64_t r = 0; r < rows; ++r) {
          int32_t* dst = out + r * ld;
          const float* src = values + r * cols;
          const int32_t* column_sum = sums + col;
          for (int64_t i = 0; i < cols; ++i) {
            const int32_t correction = last ? shift_correction(a_type, column_sum[i]) : 0;
            const auto value = static_cast<int32_t>(src[i]) + correction;
            dst[i] = sum_buffer ? dst[i] + value : value;
          }
        }
        if (last) sink(row, col, rows, cols, out, ld);
      };
      NPUFLOW_RETURN_IF_ERROR(run(widened.data(), ElementType::kFloat32, m, *w.chunks()[c],
                                  ElementType::kFloat32, to_int32, context));
    }
    return Status::ok();
  }
};

HostDevice::HostDevice(const DeviceOptions& options) : impl_(new Impl{options}) {}
HostDevice::~HostDevice() = default;

std::string HostDevice::description() const {
  const dnnl_version_t* version = dnnl_version();
  return str_cat("host (exact CPU reference; oneDNN ", version->major, ".", version->minor, ".",
                 version->patch, ")");
}

Result<std::unique_ptr<PackedWeight>> HostDevice::pack_int8_weight(const int8_t* weight, int64_t k,
                                                                   int64_t n) {
  if (impl_->float_int8) return impl_->pack_float_int8(weight, k, n);
  return impl_->pack(weight, k, n, ElementType::kInt8, ElementType::kUInt8, ElementType::kInt32);
}

std::string HostDevice::int8_kernel(ElementType a_type, const PackedWeight& w) const {
  return impl_->int8_kernel(a_type, w);
}

Status HostDevice::gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                             int32_t* c, const ExecContext& context) {
  if (a_type != ElementType::kInt8 && a_type != ElementType::kUInt8) {
    return invalid_argument("gemm_int8 takes int8 or uint8 activations");
  }
  if (w.type() != ElementType::kInt8) return invalid_argument("gemm_int8 needs an int8 weight");
  if (const auto* widened = dynamic_cast<const FloatInt8Weight*>(&w)) {
    const int64_t n = w.n();
    return impl_->run_float_int8(
        a, a_type, m, *widened,
        [c, n](int64_t row, int64_t col, int64_t rows, int64_t cols, const int32_t* data,
               int64_t ld) {
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(c + (row + r) * n + col, data + r * ld,
                        static_cast<size_t>(cols) * sizeof(int32_t));
          }
        },
        context);
  }
  return impl_->run(a, a_type, m, w, ElementType::kInt32, copy_into(c, w.n()), context);
}

Status HostDevice::gemm_int8_blocks(const void* a, ElementType a_type, int64_t m,
                                    const PackedWeight& w, const Int32BlockSink& sink,
                                    const ExecContext& context) {
  if (a_type != ElementType::kInt8 && a_type != ElementType::kUInt8) {
    return invalid_argument("gemm_int8 takes int8 or uint8 activations");
  }
  if (w.type() != ElementType::kInt8) return invalid_argument("gemm_int8 needs an int8 weight");
  if (const auto* widened = dynamic_cast<const FloatInt8Weight*>(&w)) {
    return impl_->run_float_int8(a, a_type, m, *widened, sink, context);
  }
  return impl_->run(
      a, a_type, m, w, ElementType::kInt32,
      [&sink](int64_t row, int64_t col, int64_t rows, int64_t cols, const void* data) {
        sink(row, col, rows, cols, static_cast<const int32_t*>(data), cols);
      },
      context);
}

Result<std::unique_ptr<PackedWeight>> HostDevice::pack_float_weight(const float* weight, int64_t k,
                                                                    int64_t n) {
  return impl_->pack(weight, k, n, ElementType::kFloat32, ElementType::kFloat32,
                     ElementType::kFloat32);
}

Status HostDevice::gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                              const ExecContext& context) {
  if (w.type() != ElementType::kFloat32) return invalid_argument("gemm_float needs a float weight");
  return impl_->run(a, ElementType::kFloat32, m, w, ElementType::kFloat32, copy_into(c, w.n()),
                    context);
}

Result<std::unique_ptr<PackedWeight>> HostDevice::pack_fp16_weight(const uint16_t* weight,
                                                                   int64_t k, int64_t n) {
  std::vector<float> widened(static_cast<size_t>(k * n));
  for (size_t i = 0; i < widened.size(); ++i) widened[i] = half_bits_to_float(weight[i]);
  auto inner = pack_float_weight(widened.data(), k, n);
  if (!inner.is_ok()) return inner.status();
  return std::unique_ptr<PackedWeight>(new WidenedFp16Weight(k, n, std::move(inner).value()));
}

Status HostDevice::gemm_fp16(const uint16_t* a, int64_t m, const PackedWeight& w, void* c,
                             ElementType c_type, const ExecContext& context) {
  const auto* weight = dynamic_cast<const WidenedFp16Weight*>(&w);
  if (weight == nullptr) return invalid_argument("gemm_fp16 needs a weight from pack_fp16_weight");
  if (c_type != ElementType::kFloat16 && c_type != ElementType::kFloat32) {
    return invalid_argument("gemm_fp16 writes float16 or float32");
  }
  const size_t in_count = static_cast<size_t>(m * w.k());
  const size_t out_count = static_cast<size_t>(m * w.n());
  std::vector<float> a32(in_count);
  for (size_t i = 0; i < in_count; ++i) a32[i] = half_bits_to_float(a[i]);
  if (c_type == ElementType::kFloat32) {
    return gemm_float(a32.data(), m, weight->inner(), static_cast<float*>(c), context);
  }
  std::vector<float> c32(out_count);
  NPUFLOW_RETURN_IF_ERROR(gemm_float(a32.data(), m, weight->inner(), c32.data(), context));
  auto* out = static_cast<uint16_t*>(c);
  for (size_t i = 0; i < out_count; ++i) out[i] = float_to_half_bits(c32[i]);
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> HostDevice::pack_int4_weight(const int8_t* weight, int64_t k,
                                                                   int64_t n) {
  NPUFLOW_RETURN_IF_ERROR(check_int4_values(weight, k * n, "weight"));
  return std::unique_ptr<PackedWeight>(new PlainIntWeight(weight, k, n, ElementType::kInt4, 0));
}

Status HostDevice::gemm_int4(const int8_t* a, int64_t m, const PackedWeight& w, int32_t* c,
                             const ExecContext&) {
  const auto* weight = dynamic_cast<const PlainIntWeight*>(&w);
  if (weight == nullptr || w.type() != ElementType::kInt4 || w.group() != 0) {
    return invalid_argument("gemm_int4 needs a weight from pack_int4_weight");
  }
  int8_gemm_loop(a, ElementType::kInt8, m, w.k(), weight->data(), w.n(), c);
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> HostDevice::pack_groupwise_weight(const int8_t* weight,
                                                                        int64_t k, int64_t n,
                                                                        ElementType type,
                                                                        int64_t group) {
  if (type != ElementType::kInt8 && type != ElementType::kInt4) {
    return invalid_argument("group-wise weights are int8 or int4");
  }
  if (group <= 0 || k % group != 0) {
    return invalid_argument(str_cat("group ", group, " does not divide K=", k));
  }
  if (type == ElementType::kInt4)
    NPUFLOW_RETURN_IF_ERROR(check_int4_values(weight, k * n, "weight"));
  if (group % 2 == 0) {
    return std::unique_ptr<PackedWeight>(new HostGroupwiseWeight(weight, k, n, type, group));
  }
  return std::unique_ptr<PackedWeight>(new PlainIntWeight(weight, k, n, type, group));
}

Status HostDevice::gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m,
                                  const PackedWeight& w, const float* w_scales, float* c,
                                  const ExecContext& context) {
  if (const auto* paired = dynamic_cast<const HostGroupwiseWeight*>(&w)) {
    host_groupwise_gemm(a, a_scales, m, *paired, w_scales, c, context);
    return Status::ok();
  }
  const auto* weight = dynamic_cast<const PlainIntWeight*>(&w);
  if (weight == nullptr || w.group() == 0) {
    return invalid_argument("gemm_groupwise needs a weight from pack_groupwise_weight");
  }
  const int64_t k = w.k(), n = w.n(), group = w.group(), groups = k / group;
  context.run(static_cast<size_t>(m), [&](size_t index) {
    const auto row = static_cast<int64_t>(index);
    std::vector<int32_t> partial(static_cast<size_t>(n));
    float* out = c + row * n;
    std::fill(out, out + n, 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      int8_gemm_loop(a + row * k + g * group, ElementType::kInt8, 1, group,
                     weight->data() + g * group * n, n, partial.data());
      const float a_scale = a_scales[row * groups + g];
      for (int64_t col = 0; col < n; ++col) {
        const float scale = a_scale * w_scales[col * groups + g];
        out[col] = out[col] + scale * static_cast<float>(partial[col]);
      }
    }
  });
  return Status::ok();
}

Status HostDevice::attention_fp16(const Fp16Attention& call, const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_attention_call(call));
  fp16_attention_reference(call, context);
  return Status::ok();
}

Status HostDevice::conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_conv2d_call(call));
  fp16_conv2d_reference(call, context);
  return Status::ok();
}

Status HostDevice::conv_transpose2d_fp16(const Fp16ConvTranspose2d& call,
                                         const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_conv_transpose2d_call(call));
  fp16_conv_transpose2d_reference(call, context);
  return Status::ok();
}

}  // namespace npuflow
