// LD_PRELOAD shim for aarch64 programs under qemu-user (tests/packaging/test_cross.py): qemu 7.2
// shows the guest the host's x86 /proc/cpuinfo, and the cpuinfo library inside ONNX Runtime
// crashes parsing it when libonnxruntime loads. With NPUFLOW_FAKE_CPUINFO set, opening
// /proc/cpuinfo opens that file instead (an ARM description the test writes); nothing else
// changes.
#include <dlfcn.h>
#include <fcntl.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

const char* redirected(const char* path) {
  if (path == nullptr || std::strcmp(path, "/proc/cpuinfo") != 0) return path;
  const char* fake = std::getenv("NPUFLOW_FAKE_CPUINFO");
  return fake != nullptr && *fake != '\0' ? fake : path;
}

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// open's mode argument exists only when the flags create a file.
mode_t mode_of(int flags, va_list args) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(args, mode_t) : 0;
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  static auto real = next<int (*)(const char*, int, ...)>("open");
  return real(redirected(path), flags, mode);
}

// The same call where off_t is 64 bits (aarch64).
int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  return open(path, flags, mode);
}

int openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  static auto real = next<int (*)(int, const char*, int, ...)>("openat");
  return real(dir, redirected(path), flags, mode);
}

FILE* fopen(const char* path, const char* mode) {
  static auto real = next<FILE* (*)(const char*, const char*)>("fopen");
  return real(redirected(path), mode);
}

FILE* fopen64(const char* path, const char* mode) {
  return fopen(path, mode);
}

}  // extern "C"
