# Cross build for 64-bit Arm Linux from Debian's packages (README, "Running on Arm"):
#   g++-aarch64-linux-gnu, qemu-user-static, and the :arm64 multiarch libraries
#   (libc6, libstdc++6, libhwy-dev, libssl-dev, libgtest-dev; `dpkg --add-architecture arm64`
#   first).
# cmake -S . -B build-aarch64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake
# Tests run under qemu-user (no binfmt_misc needed): CTest prefixes every test binary with
# CMAKE_CROSSCOMPILING_EMULATOR, and tests/CMakeLists.txt routes the `lockstep` binary the tests
# start through the same emulator.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The cross toolchain's own sysroot, then Debian's multiarch paths for the :arm64 libraries
# (headers are shared with the host under /usr/include; libraries are in /usr/lib/aarch64-linux-gnu).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config (Highway) must see the arm64 .pc files, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# The guest's loader and libraries are the :arm64 multiarch ones (/lib/ld-linux-aarch64.so.1,
# /lib/aarch64-linux-gnu, from libc6:arm64), so qemu looks them up from / (-L /). With
# -L /usr/aarch64-linux-gnu it took the cross toolchain's older ld.so (libc6-arm64-cross) with the
# newer multiarch libc.so.6, a pair that must never be mixed: the first pthread_create looped for
# ever (this is why no run under qemu used to finish).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static;-L;/)

# Not built for Arm: MPI (the host's mpicc would be found, with x86 libraries), the tokenizer
# (libsentencepiece-dev:arm64 cannot be installed beside the host's; LOCKSTEP_TOKENIZER turns
# itself off when pkg-config finds no arm64 sentencepiece; LOCKSTEP_HF_TOKENIZER likewise without
# libonig-dev:arm64 and libutf8proc-dev:arm64, and such a build refuses a tokenizer.json model,
# saying why), the Python module (needs an arm64
# Python), the benchmarks (a figure under qemu means nothing) and the fuzz targets (clang +
# libFuzzer on the host).
set(CMAKE_DISABLE_FIND_PACKAGE_MPI ON CACHE BOOL "" FORCE)
set(LOCKSTEP_MPI OFF CACHE BOOL "" FORCE)
set(LOCKSTEP_BUILD_PYTHON OFF CACHE BOOL "" FORCE)
set(LOCKSTEP_BUILD_BENCH OFF CACHE BOOL "" FORCE)
set(LOCKSTEP_BUILD_FUZZ OFF CACHE BOOL "" FORCE)
# Nor the CUDA device (docs/CUDA.md): nvcc here builds for x86 hosts.
set(LOCKSTEP_CUDA OFF CACHE BOOL "" FORCE)
