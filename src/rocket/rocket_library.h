// SPDX-License-Identifier: GPL-3.0-or-later
// librocketnpu's entry points that the rocket device calls, resolved from a library opened at run
// time: the board's librocketnpu.so.0, or librocketnpu-sim.so in tests (the `rocketnpu` knob).
// Each pointer has the type of the vendor header's declaration, so a signature change there
// fails this build rather than a board run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

// The vendor headers take fp16 operands as _Float16; a compiler without it gets 16-bit storage.
#if !defined(__FLT16_MAX__) && !defined(ROCKET_FLOAT16_T)
#define ROCKET_FLOAT16_T uint16_t
#endif
#include <rocket_attn.h>
#include <rocket_conv.h>
#include <rocket_matmul.h>
#include <rocket_npu.h>

namespace npuflow::rocket {

struct RocketLibrary {
  std::string path;
  void* handle = nullptr;

  // Resident fp16 weights (rocket_matmul.h: "resident weights").
  decltype(&rocket_ctx_create) ctx_create = nullptr;
  decltype(&rocket_ctx_free) ctx_free = nullptr;
  decltype(&rocket_weights_pack) weights_pack = nullptr;
  decltype(&rocket_weights_free) weights_free = nullptr;
  decltype(&rocket_matmul_fp16_prepacked) matmul_fp16_prepacked = nullptr;
  // Resident int8 weights (W8A8).
  decltype(&rocket_i8_ctx_create) i8_ctx_create = nullptr;
  decltype(&rocket_i8_ctx_free) i8_ctx_free = nullptr;
  decltype(&rocket_i8_weights_pack) i8_weights_pack = nullptr;
  decltype(&rocket_i8_weights_free) i8_weights_free = nullptr;
  decltype(&rocket_i8_weights_bytes) i8_weights_bytes = nullptr;
  decltype(&rocket_matmul_int8_prepacked) matmul_int8_prepacked = nullptr;
  // Optional (null: those primitives are refused): group-wise int8, and resident int4 with its
  // group-wise form.
  decltype(&rocket_i8_weights_pack_gw) i8_weights_pack_gw = nullptr;
  decltype(&rocket_matmul_int8_prepacked_gw) matmul_int8_prepacked_gw = nullptr;
  decltype(&rocket_i4_ctx_create) i4_ctx_create = nullptr;
  decltype(&rocket_i4_ctx_free) i4_ctx_free = nullptr;
  decltype(&rocket_i4_weights_pack) i4_weights_pack = nullptr;
  decltype(&rocket_i4_weights_pack_gw) i4_weights_pack_gw = nullptr;
  decltype(&rocket_i4_weights_free) i4_weights_free = nullptr;
  decltype(&rocket_i4_weights_bytes) i4_weights_bytes = nullptr;
  decltype(&rocket_matmul_int4_prepacked) matmul_int4_prepacked = nullptr;
  decltype(&rocket_matmul_int4_prepacked_gw) matmul_int4_prepacked_gw = nullptr;
  // Optional: flash attention on a persistent context (rocket_attn.h).
  decltype(&rocket_fa_ctx_create) fa_ctx_create = nullptr;
  decltype(&rocket_fa_ctx_free) fa_ctx_free = nullptr;
  decltype(&rocket_flash_attn_fp16_ctx) flash_attn_fp16_ctx = nullptr;
  // Optional: the fp16 convolutions on a resident-BO context borrowing one open device fd
  // (rocket_npu.h rocket_open / rocket_close, rocket_conv.h).
  decltype(&rocket_open) open_device = nullptr;
  decltype(&rocket_close) close_device = nullptr;
  decltype(&rocket_conv_ctx_create) conv_ctx_create = nullptr;
  decltype(&rocket_conv_ctx_free) conv_ctx_free = nullptr;
  decltype(&rocket_conv2d_fp16_ctx) conv2d_fp16_ctx = nullptr;
  decltype(&rocket_conv_transpose2d_fp16_ctx) conv_transpose2d_fp16_ctx = nullptr;
  bool has_groupwise_int8() const { return i8_weights_pack_gw && matmul_int8_prepacked_gw; }
  bool has_int4() const {
    return i4_ctx_create && i4_ctx_free && i4_weights_pack && i4_weights_free && i4_weights_bytes &&
           matmul_int4_prepacked;
  }
  bool has_flash_attention() const { return fa_ctx_create && fa_ctx_free && flash_attn_fp16_ctx; }
  bool has_convolution() const {
    return open_device && close_device && conv_ctx_create && conv_ctx_free && conv2d_fp16_ctx &&
           conv_transpose2d_fp16_ctx;
  }
  bool has_groupwise_int4() const {
    return has_int4() && i4_weights_pack_gw && matmul_int4_prepacked_gw;
  }

  // librocketnpu-sim only (null on the real library; sim_library/rocketnpu_sim.cc): why this
  // thread's last call failed; the options of the next context this thread creates; the pool
  // this thread's calls may spread over; a group's session profile.
  using LentRun = void (*)(void* pool, size_t count, void (*task)(void* arg, size_t index),
                           void* arg);
  const char* (*sim_last_error)() = nullptr;
  void (*sim_next_context)(const char* options) = nullptr;
  void (*sim_lend_pool)(LentRun run, void* pool) = nullptr;
  size_t (*sim_report)(const char* group, char* out, size_t size) = nullptr;
  // Device::account_host_pass, priced into the group's profile.
  void (*sim_account_host)(const char* group, double multiply_adds, double bytes) = nullptr;

  ~RocketLibrary();

  // Opens `path` (a path or a soname) and resolves every entry point above, or says which one
  // is missing.
  static Result<std::shared_ptr<RocketLibrary>> open(const std::string& path);
};

// A librocketnpu return code as a Status: shape, tiling and unsupported refusals are
// kUnsupported (the caller runs the host), NOMEM kResourceExhausted, anything else
// kDeviceFailure.
Status rocket_status(int code, const std::string& what);

}  // namespace npuflow::rocket
