#include "cli/ort_runtime.h"

#include <dlfcn.h>
#include <onnxruntime_cxx_api.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "core/strings.h"
#include "ort/ort_api.h"

namespace npuflow::cli {
namespace {

const OrtApiBase* g_base = nullptr;

// A library that is not ONNX Runtime, or one older than the EP's floor, is reported as such.
const OrtApiBase* api_base_of(void* library, const std::string& name) {
  using GetApiBase = const OrtApiBase* (*)();
  auto get_api_base = reinterpret_cast<GetApiBase>(dlsym(library, "OrtGetApiBase"));
  if (get_api_base == nullptr) {
    throw std::runtime_error(str_cat("'", name, "' exports no OrtGetApiBase: not ONNX Runtime"));
  }
  return get_api_base();
}

}  // namespace

void load_onnxruntime() {
  if (g_base != nullptr) return;
  const char* configured = std::getenv("NPUFLOW_ORT_LIBRARY");
  std::string name = configured && *configured ? configured : "libonnxruntime.so.1";
  // Beside the binary first, by absolute path: lib/ of the build tree (a link to the SDK), of an
  // install prefix or of the board tarball. A run path alone is not enough: under a sanitizer's
  // dlopen interceptor the caller whose run path counts is the sanitizer runtime.
  if (!configured || !*configured) {
    std::error_code error;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
    const auto beside = exe.parent_path().parent_path() / "lib" / name;
    if (!error && std::filesystem::exists(beside, error)) name = beside.string();
  }
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    throw std::runtime_error(str_cat(
        "cannot load ONNX Runtime '", name, "': ", dlerror(),
        configured ? ""
                   : " (set NPUFLOW_ORT_LIBRARY to its path, e.g. onnxruntime/capi/"
                     "libonnxruntime.so.1.* of a pip install; `pip install npuflow` sets it "
                     "for the npuflow command)"));
  }
  const OrtApiBase* base = api_base_of(library, name);
  const uint32_t version = npuflow::ort::highest_supported_version(base);
  if (version == 0) {
    throw std::runtime_error(str_cat("ONNX Runtime ", base->GetVersionString(), " ('", name,
                                     "') is older than 1.", npuflow::ort::kOrtApiFloor,
                                     ", the first with plugin execution providers"));
  }
  // The C++ wrappers the CLI calls exist in every API version from the floor on.
  Ort::InitApi(base->GetApi(version));
  g_base = base;
}

std::string onnxruntime_version() {
  return g_base != nullptr ? g_base->GetVersionString() : "(not loaded)";
}

}  // namespace npuflow::cli
