#!/usr/bin/env bash
# Builds the tests with AddressSanitizer and UndefinedBehaviorSanitizer (g++, in
# build-asan/, apart from the main build) and runs the whole CTest suite under them; any
# report stops the test that made it and fails this script. Skips the benches and the
# scalar copy of the ops tests, and by default the four training examples (below), to keep
# CI time down. Prints how long each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GG_ASAN_BUILD_DIR:-build-asan}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$SECONDS
# -march=native, as the Release build has it: the kernels' AVX2 and AVX-512 paths (the
# GEMM's packing by register transposes and its spilling stores, erf's lane permutes) are
# the ones that run, and without it this build would check only the SSE2 baseline.
march=-march=native
[ "${GG_ASAN_PORTABLE:-0}" = 1 ] && march=
# -g1 rather than RelWithDebInfo's -g: the same code, 15-25% less compile time under the
# sanitizers (ops/runtime/executor.cpp 35.3 -> 30.0 s, tests/ops/test_fuse.cpp 18.2 -> 13.4 s on a
# Zen 4), and -g1's line tables are all a report's stack trace needs. -O1 rather than -O2:
# the build takes 315 s instead of 488 s on a Zen 5, the tests 141 s instead of 152. It once
# failed the tests of bit-identical paths (masked against plain attention products, the
# fused and sliced GPT against the plain plan), because the GEMM's tiny-product loop left
# a * b + c to GCC, which contracts it into an FMA at -O2 and not at -O1; that loop now
# calls fma itself.
# Without MPI: the data-parallel tests run in the main build (Open MPI's own allocations at
# exit would read as leaks here); this build covers the one-process path.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all $march" \
  -DGG_BUILD_BENCH=OFF -DGG_SCALAR_TESTS=OFF -DGG_BUILD_EXAMPLES=OFF -DGG_WITH_MPI=OFF >/dev/null
cmake --build "$build"
built=$SECONDS
# Use-after-return detection is off when the build is for AVX-512: there, with GCC 12, a
# test crashed copying an initializer list (a SEGV at a small address in
# tests/autodiff/test_grad.cpp, gone with this mode off, absent on AVX2). Likely the
# fake-stack frames and AVX-512's 64-byte stack alignment, the class of failure of
# llvm/llvm-project#91565; not a bug of the code under test. On for every other build.
uar=1
[ -z "$march" ] || ! grep -qw avx512f /proc/cpuinfo || uar=0
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=$uar
echo "sanitize: detect_stack_use_after_return=$uar"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The examples are not built here: the four training examples take 6.5 min under the
# sanitizers on a 2-core machine (30+ steps of a real model with every load of the GEMM
# checked) and run the same kernels the unit tests run.
# The build-system checks (install_consumer, subproject_consumer, typed_fail_*) test CMake
# and the compiler, not the library's code, and a consumer built without the sanitizer
# cannot link the instrumented libraries: they run in the normal build only.
# The option matrix runs the command a thousand times on small inputs to check its
# messages; the code those runs reach is the code the other CLI tests run here.
skip=(-E '^(install_consumer|subproject_consumer|typed_fail_.*|cli_option_matrix)$')
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "${skip[@]}"
echo "sanitize: build $((built - start)) s, tests $((SECONDS - built)) s"
