# Cross-compiling npuflow for aarch64 Linux (an RK3588 board) with Debian's cross toolchain
# (g++-aarch64-linux-gnu) and arm64 libraries installed as Debian multiarch packages
# (libdnnl2:arm64, libgtest-dev:arm64 under /usr/lib/aarch64-linux-gnu; oneDNN's arm64 headers
# are passed in as DNNL_INCLUDE_DIR, see tools/setup_cross.sh). Test programs run under
# qemu-user, emulating the board's Cortex-A76.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Host programs (cmake, ninja, python) from the build machine; libraries and headers only for the
# target: the multiarch folders first, the cross toolchain's sysroot next.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;cortex-a76)
