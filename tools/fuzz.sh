#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (in build-fuzz/, apart from the main
# build) and runs each for SECONDS (argument, else $GG_FUZZ_SECONDS, else 60), one a core
# at a time, starting from the committed seeds in fuzz/corpus/<target>/. Fails (non-zero) on a crash, a leak,
# a timeout (10 s per input) or an allocation over 512 MB; the failing input is kept as
# build-fuzz/artifacts/<target>/crash-* (add it to fuzz/corpus/<target>/ once fixed).
# Needs clang++-16 and libFuzzer 16 (tools/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${GG_FUZZ_SECONDS:-60}}
build=${GG_FUZZ_BUILD_DIR:-build-fuzz}
targets=(${GG_FUZZ_TARGETS:-safetensors json chardata checkpoint cli})
# clang 16 when present: clang 14 cannot compile std::source_location with this libstdc++
# (the checkpoint target includes ops/ and dsl/).
default_cxx=clang++
command -v clang++-16 >/dev/null && default_cxx=clang++-16
cxx=${GG_FUZZ_CXX:-$default_cxx}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" >/dev/null
start=$(date +%s)
cmake --build "$build"
echo "fuzz build: $(( $(date +%s) - start )) s"

# The targets run side by side, as many at a time as there are cores (GG_FUZZ_JOBS): each
# is one process on one core, so on 2 cores the four take 2 x SECONDS, not 4 x SECONDS.
jobs=${GG_FUZZ_JOBS:-$(nproc)}
# fuzz_one TARGET: runs it with its output in $build/fuzz_TARGET.log; libFuzzer's exit status.
# New inputs go to $build/corpus/TARGET; the committed seeds stay as they are.
fuzz_one() {
  local t=$1 work="$build/corpus/$1" art="$build/artifacts/$1/"
  mkdir -p "$work" "$art"
  "$build/fuzz_$t" "$work" "fuzz/corpus/$t" -dict=fuzz/json.dict -max_total_time="$secs" \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1 -close_fd_mask=1 \
    -artifact_prefix="$art" >"$build/fuzz_$t.log" 2>&1
}
status=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    echo "== fuzz_$t: ${secs} s"
    fuzz_one "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    t=${batch[k]}
    log="$build/fuzz_$t.log"
    if wait "${pids[k]}"; then
      # The last status line: executions, coverage, corpus; and the executions per second.
      echo "fuzz_$t: $(grep -E '^#[0-9]+' "$log" | tail -1)"
      grep -E 'stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" | tr '\n' ' '; echo
    else
      status=1
      echo "fuzz_$t FAILED (log: $log); last lines:"
      tail -40 "$log"
    fi
  done
done
exit $status
