// SPDX-License-Identifier: GPL-3.0-or-later
#include "rocket/rocket_library.h"

#include <dlfcn.h>

#include "core/strings.h"

namespace npuflow::rocket {

RocketLibrary::~RocketLibrary() {
  if (handle != nullptr) dlclose(handle);
}

namespace {

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) missing = str_cat(missing, missing.empty() ? "" : ", ", name);
  return fn != nullptr;
}

}  // namespace

Result<std::shared_ptr<RocketLibrary>> RocketLibrary::open(const std::string& path) {
  auto library = std::make_shared<RocketLibrary>();
  library->path = path;
  library->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library->handle == nullptr) {
    const char* why = dlerror();
    return unsupported(str_cat("cannot open librocketnpu '", path, "': ", why ? why : "?"));
  }
  void* h = library->handle;
  std::string missing;
  resolve(h, "rocket_ctx_create", library->ctx_create, missing);
  resolve(h, "rocket_ctx_free", library->ctx_free, missing);
  resolve(h, "rocket_weights_pack", library->weights_pack, missing);
  resolve(h, "rocket_weights_free", library->weights_free, missing);
  resolve(h, "rocket_matmul_fp16_prepacked", library->matmul_fp16_prepacked, missing);
  resolve(h, "rocket_i8_ctx_create", library->i8_ctx_create, missing);
  resolve(h, "rocket_i8_ctx_free", library->i8_ctx_free, missing);
  resolve(h, "rocket_i8_weights_pack", library->i8_weights_pack, missing);
  resolve(h, "rocket_i8_weights_free", library->i8_weights_free, missing);
  resolve(h, "rocket_i8_weights_bytes", library->i8_weights_bytes, missing);
  resolve(h, "rocket_matmul_int8_prepacked", library->matmul_int8_prepacked, missing);
  if (!missing.empty()) {
    return unsupported(str_cat("librocketnpu '", path, "' lacks ", missing,
                               " (npuflow needs the resident fp16 and int8 matmul API of "
                               "rocket-userspace e067786 or later)"));
  }
  std::string optional;
  resolve(h, "rocket_i8_weights_pack_gw", library->i8_weights_pack_gw, optional);
  resolve(h, "rocket_matmul_int8_prepacked_gw", library->matmul_int8_prepacked_gw, optional);
  resolve(h, "rocket_i4_ctx_create", library->i4_ctx_create, optional);
  resolve(h, "rocket_i4_ctx_free", library->i4_ctx_free, optional);
  resolve(h, "rocket_i4_weights_pack", library->i4_weights_pack, optional);
  resolve(h, "rocket_i4_weights_pack_gw", library->i4_weights_pack_gw, optional);
  resolve(h, "rocket_i4_weights_free", library->i4_weights_free, optional);
  resolve(h, "rocket_i4_weights_bytes", library->i4_weights_bytes, optional);
  resolve(h, "rocket_matmul_int4_prepacked", library->matmul_int4_prepacked, optional);
  resolve(h, "rocket_matmul_int4_prepacked_gw", library->matmul_int4_prepacked_gw, optional);
  resolve(h, "rocket_fa_ctx_create", library->fa_ctx_create, optional);
  resolve(h, "rocket_fa_ctx_free", library->fa_ctx_free, optional);
  resolve(h, "rocket_flash_attn_fp16_ctx", library->flash_attn_fp16_ctx, optional);
  resolve(h, "rocket_open", library->open_device, optional);
  resolve(h, "rocket_close", library->close_device, optional);
  resolve(h, "rocket_conv_ctx_create", library->conv_ctx_create, optional);
  resolve(h, "rocket_conv_ctx_free", library->conv_ctx_free, optional);
  resolve(h, "rocket_conv2d_fp16_ctx", library->conv2d_fp16_ctx, optional);
  resolve(h, "rocket_conv_transpose2d_fp16_ctx", library->conv_transpose2d_fp16_ctx, optional);
  resolve(h, "rocketsim_last_error", library->sim_last_error, optional);
  resolve(h, "rocketsim_next_context", library->sim_next_context, optional);
  resolve(h, "rocketsim_lend_pool", library->sim_lend_pool, optional);
  resolve(h, "rocketsim_report", library->sim_report, optional);
  resolve(h, "rocketsim_account_host", library->sim_account_host, optional);
  return library;
}

Status rocket_status(int code, const std::string& what) {
  switch (code) {
    case ROCKET_OK:
      return Status::ok();
    case ROCKET_E_SHAPE:
      return unsupported(str_cat("ROCKET_E_SHAPE from ", what));
    case ROCKET_E_TILING:
      return unsupported(str_cat("ROCKET_E_TILING from ", what));
    case ROCKET_E_UNSUPPORTED:
      return unsupported(str_cat("ROCKET_E_UNSUPPORTED from ", what));
    case ROCKET_E_NOMEM:
      return Status(StatusCode::kResourceExhausted, str_cat("ROCKET_E_NOMEM from ", what));
    case ROCKET_E_DEVICE:
      return Status(StatusCode::kDeviceFailure, str_cat("ROCKET_E_DEVICE from ", what));
    default:
      return Status(StatusCode::kDeviceFailure, str_cat("return code ", code, " from ", what));
  }
}

}  // namespace npuflow::rocket
