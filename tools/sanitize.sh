#!/usr/bin/env bash
# Builds the tests with AddressSanitizer and UndefinedBehaviorSanitizer (g++, in
# build-asan/, apart from the main build) and runs the whole CTest suite under them; any
# report stops the test that made it and fails this script. Skips the benches and the
# scalar copy of the ops tests to keep CI time down. Prints how long each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GG_ASAN_BUILD_DIR:-build-asan}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$SECONDS
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
  -DGG_BUILD_BENCH=OFF -DGG_SCALAR_TESTS=OFF >/dev/null
cmake --build "$build"
built=$SECONDS
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir "$build" --output-on-failure
echo "sanitize: build $((built - start)) s, tests $((SECONDS - built)) s"
