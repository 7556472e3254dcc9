// SPDX-License-Identifier: GPL-3.0-or-later
// RocketDevice's state: the library, its contexts (one lock for them all), the reused staging
// buffers and the profile. Shared by the GEMMs (rocket_device.cc) and the composed calls, flash
// attention and convolution (rocket_composed.cc). Private to src/rocket/.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/strings.h"
#include "rocket/rocket_device.h"

namespace npuflow::rocket {

// The library's fp16 N alignment (rocket_matmul.h) and its conv weight OC group.
inline constexpr int64_t kFp16NMultiple = 16;

inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

struct RocketDevice::State {
  std::shared_ptr<RocketLibrary> library;
  RocketDeviceOptions options;
  std::string sim_group;  // librocketnpu-sim: this device's contexts share one simulated device
  std::mutex mutex;       // every call on a context (librocketnpu contexts are not thread-safe)
  rocket_ctx* fp16_ctx = nullptr;
  rocket_i8_ctx* int8_ctx = nullptr;
  rocket_i4_ctx* int4_ctx = nullptr;
  rocket_fa_ctx* attention_ctx = nullptr;
  int fd = -1;  // rocket_open's, opened for the conv context on first use
  rocket_conv_ctx* conv_ctx = nullptr;
  mutable std::mutex profile_mutex;
  std::map<std::string, int64_t> calls;     // entry point -> calls
  std::map<std::string, int64_t> refusals;  // "entry point: status" -> count
  int64_t resident_bytes = 0;
  // Reused by every GEMM under `mutex` (grown, never shrunk): A's rows padded to the library's
  // K, its N-padded output rows, and group-wise weight scales padded to its N.
  std::tuple<std::vector<int8_t>, std::vector<uint16_t>> staged_rows;
  std::tuple<std::vector<int32_t>, std::vector<uint16_t>, std::vector<float>> output_rows;
  std::vector<float> scale_rows;
  // A direct conv2d's filters and output padded to the library's OC multiple, a depthwise call's
  // input, filters and output padded to its channel group (under `mutex`).
  std::vector<uint16_t> conv_input, conv_weight, conv_out;

  ~State() {
    if (fp16_ctx != nullptr) library->ctx_free(fp16_ctx);
    if (int8_ctx != nullptr) library->i8_ctx_free(int8_ctx);
    if (int4_ctx != nullptr) library->i4_ctx_free(int4_ctx);
    if (attention_ctx != nullptr) library->fa_ctx_free(attention_ctx);
    if (conv_ctx != nullptr) library->conv_ctx_free(conv_ctx);
    if (fd >= 0) library->close_device(fd);
  }

  void count(const char* entry) {
    std::lock_guard<std::mutex> lock(profile_mutex);
    calls[entry]++;
  }
  Status refuse(const char* entry, int code, const std::string& what) {
    Status status = rocket_status(code, what);
    if (library->sim_last_error != nullptr) {
      const char* why = library->sim_last_error();
      if (why != nullptr && *why != 0)
        status = Status(status.code(), str_cat(status.message(), ": ", why));
    }
    std::lock_guard<std::mutex> lock(profile_mutex);
    refusals[str_cat(entry, " ", code)]++;
    return status;
  }

  // Creates a context on first use, under the caller's hold of `mutex`; on librocketnpu-sim
  // every context of this device joins one simulated device (its group).
  template <typename Ctx, typename Create>
  Status ensure_context(Ctx*& ctx, const char* create_entry, Create&& create) {
    if (ctx != nullptr) return Status::ok();
    if (library->sim_next_context != nullptr) {
      library->sim_next_context(str_cat(options.sim_options, ";group=", sim_group).c_str());
    }
    count(create_entry);
    ctx = create(options.workers);
    if (ctx == nullptr) return refuse(create_entry, ROCKET_E_DEVICE, create_entry);
    return Status::ok();
  }

  // The conv context on first use, over the fd this device opens for it (the context borrows the
  // fd), under the caller's hold of `mutex`.
  Status ensure_conv_context() {
    if (fd < 0) {
      count("rocket_open");
      const int opened = library->open_device();
      if (opened < 0)
        return refuse("rocket_open", ROCKET_E_DEVICE, str_cat("rocket_open ", opened));
      fd = opened;
    }
    return ensure_context(conv_ctx, "rocket_conv_ctx_create",
                          [this](int) { return library->conv_ctx_create(fd); });
  }

  // One convolution: `call(ctx)` under the context lock (which also guards the reused buffers)
  // with the caller's pool lent; `shape` names the call in a refusal.
  template <typename Call>
  Status run_convolution(const char* entry, const ExecContext& context, const std::string& shape,
                         Call&& call) {
    if (!library->has_convolution()) {
      return unsupported(str_cat("librocketnpu '", library->path, "' has no ", entry));
    }
    int code = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      NPUFLOW_RETURN_IF_ERROR(ensure_conv_context());
      count(entry);
      code = call_with_pool(context, [&] { return call(conv_ctx); });
    }
    if (code != ROCKET_OK) return refuse(entry, code, str_cat(entry, " at ", shape));
    return Status::ok();
  }

  // Creates the context on first use (`create_entry`), then packs one weight on it
  // (`pack_entry`), under the context lock. `pack` returns the library's handle or null.
  template <typename Ctx, typename Handle, typename Create, typename Pack>
  Status pack_resident(Ctx*& ctx, const char* create_entry, Create&& create, const char* pack_entry,
                       Handle*& handle, Pack&& pack, const std::string& shape) {
    std::lock_guard<std::mutex> lock(mutex);
    NPUFLOW_RETURN_IF_ERROR(ensure_context(ctx, create_entry, create));
    count(pack_entry);
    handle = pack(ctx);
    if (handle == nullptr) {
      return refuse(pack_entry, ROCKET_E_SHAPE, str_cat(pack_entry, " of a ", shape, " weight"));
    }
    return Status::ok();
  }

  // Runs one library call with the caller's pool lent to librocketnpu-sim (the real library runs
  // its own workers).
  template <typename Call>
  int call_with_pool(const ExecContext& context, Call&& call) {
    if (library->sim_lend_pool == nullptr || !context.has_pool()) return call();
    library->sim_lend_pool(
        [](void* pool, size_t count, void (*task)(void*, size_t), void* arg) {
          static_cast<const ExecContext*>(pool)->run(count, [&](size_t i) { task(arg, i); });
        },
        const_cast<ExecContext*>(&context));
    const int code = call();
    library->sim_lend_pool(nullptr, nullptr);
    return code;
  }

  // One GEMM on a resident weight, under the context lock (which also guards the reused
  // buffers): A's m rows staged kp wide (`stage_row(row, dst)` writes dst[0, k); the padding is
  // zeroed here, as the buffer holds an earlier call's rows), `call(m, kp, np, staged, out)` run
  // with the caller's pool, then each np-wide output row cropped by `emit_row(row, src)`. A null
  // `stage_row` leaves A as it is (its K is already the library's) and `call` gets null.
  template <typename In, typename Out, typename StageRow, typename Call, typename EmitRow>
  Status run_resident_gemm(const char* entry, int64_t m, int64_t k, int64_t kp, int64_t np,
                           const ExecContext& context, StageRow&& stage_row, Call&& call,
                           EmitRow&& emit_row) {
    std::lock_guard<std::mutex> lock(mutex);
    In* staged = nullptr;
    if constexpr (!std::is_null_pointer_v<std::decay_t<StageRow>>) {
      staged = grown(std::get<std::vector<In>>(staged_rows), m * kp);
      for (int64_t row = 0; row < m; ++row) {
        In* dst = staged + row * kp;
        stage_row(row, dst);
        std::fill(dst + k, dst + kp, In{0});
      }
    }
    Out* out = grown(std::get<std::vector<Out>>(output_rows), m * np);
    count(entry);
    const int code = call_with_pool(context, [&] {
      return call(static_cast<int>(m), static_cast<int>(kp), static_cast<int>(np), staged, out);
    });
    if (code != ROCKET_OK) return refuse(entry, code, str_cat(entry, " at ", m, "x", kp, "x", np));
    for (int64_t row = 0; row < m; ++row) emit_row(row, out + row * np);
    return Status::ok();
  }

  // Group-wise weight scales (`groups` a column) padded from n to np columns with zero scales
  // (the padded columns' weights are zero too). Under `mutex`, as the buffer is reused.
  const float* padded_scales(const float* scales, int64_t n, int64_t np, int64_t groups) {
    float* padded = grown(scale_rows, np * groups);
    std::memcpy(padded, scales, static_cast<size_t>(n * groups) * sizeof(float));
    std::fill(padded + n * groups, padded + np * groups, 0.0f);
    return padded;
  }

  template <typename T>
  static T* grown(std::vector<T>& buffer, int64_t size) {
    if (buffer.size() < static_cast<size_t>(size)) buffer.resize(static_cast<size_t>(size));
    return buffer.data();
  }

  void add_resident(size_t bytes) {
    std::lock_guard<std::mutex> lock(profile_mutex);
    resident_bytes += static_cast<int64_t>(bytes);
  }
};

}  // namespace npuflow::rocket
