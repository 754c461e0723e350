#!/usr/bin/env bash
# Installs the Debian packages gradgraph builds with, skipping those already present.
# Run as root on Debian 12 (bookworm). Used by README's set-up commands and by CI.
set -euo pipefail
# Open MPI: data parallel training (mpirun -np N), tested by CTest's dist_* cases.
# clang 16 (14 cannot compile std::source_location with bookworm's libstdc++), its
# sanitizer runtimes and libFuzzer: for tools/fuzz.sh, which .ci/run runs.
pkgs=(g++ cmake ninja-build libfmt-dev doctest-dev libxsimd-dev nlohmann-json3-dev libcli11-dev libbenchmark-dev
      libopenmpi-dev openmpi-bin
      clang-16 libclang-rt-16-dev libfuzzer-16-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
