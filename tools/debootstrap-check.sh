#!/usr/bin/env bash
# Developer check, not run by CI (it takes a long time): makes a fresh minimal Debian 12
# (bookworm) root with debootstrap, copies this tree's committed HEAD into it, and runs
# README's second set-up command there as root, as a new user on a new machine would.
# Prints CTest's summary; exits with the command's status. Run as root:
#   bash tools/debootstrap-check.sh [ROOT_DIR]      (default /var/tmp/gradgraph-bookworm)
# GG_DEBIAN_MIRROR overrides the mirror (default: the one this machine's apt uses, else
# deb.debian.org); GG_KEEP_ROOT=1 keeps the root afterwards; CMAKE_BUILD_PARALLEL_LEVEL,
# if set, is passed to the build inside the root.
# One block: bash reads it whole before running it, so the file may change during a run.
{
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
root=${1:-/var/tmp/gradgraph-bookworm}
marker=.gradgraph-debootstrap-check

if [ "$(id -u)" -ne 0 ]; then
  echo "debootstrap-check: needs root (debootstrap, chroot, mount)" >&2
  exit 1
fi
cmd=$(awk '/^```sh/{f=1; next} /^```/{if (f) exit} f' README.md | sed -n 2p)
if [ -z "$cmd" ]; then
  echo "README.md: no second set-up command found in its first sh block" >&2
  exit 1
fi

# The mirror this machine's apt uses for bookworm (deb822 or one-line format).
mirror=${GG_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
             2>/dev/null | grep -v '^[[:space:]]*#' |
           grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

mounted=()
cleanup() {
  local status=$?
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
  done
  # Delete the root only when nothing is mounted below it any more, and never across
  # file systems, so a failed unmount cannot take the host's /dev or /proc with it.
  if [ "${GG_KEEP_ROOT:-0}" != 1 ] && [ -f "$root/$marker" ]; then
    if grep -q " $root/" /proc/mounts; then
      echo "debootstrap-check: mounts remain under $root; not deleting it" >&2
    else
      rm -rf --one-file-system "$root"
    fi
  elif [ -d "$root" ]; then
    echo "debootstrap-check: root kept at $root"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -e "$root" ]; then
  if [ -f "$root/$marker" ] && ! grep -q " $root/" /proc/mounts; then
    rm -rf --one-file-system "$root"
  else
    echo "debootstrap-check: $root exists and is not a root this script made (or is in use)" >&2
    trap - EXIT
    exit 1
  fi
fi
command -v debootstrap >/dev/null || {
  echo "+ apt-get install debootstrap"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
}

echo "+ debootstrap --variant=minbase bookworm $root $mirror"
mkdir -p "$root"
touch "$root/$marker"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 || {
  tail -n 20 "$root.debootstrap.log" >&2
  exit 1
}
rm -f "$root.debootstrap.log"
touch "$root/$marker"
cp /etc/resolv.conf "$root/etc/resolv.conf"

echo "+ git archive HEAD ($(git rev-parse --short HEAD)) -> $root/root/gradgraph"
mkdir -p "$root/root/gradgraph"
git -C "$src" archive HEAD | tar -x -C "$root/root/gradgraph"

for m in proc sys dev dev/pts; do
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sysfs "$root/sys" ;;
    *) mount --bind "/$m" "$root/$m" ;;
  esac
  mounted+=("$root/$m")
done

echo "+ (in the root, as root) $cmd"
log=$(mktemp)
set +e
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  ${CMAKE_BUILD_PARALLEL_LEVEL:+CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL} \
  /bin/bash -euo pipefail -c "cd /root/gradgraph && $cmd" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "---"
grep -E 'tests passed|tests failed' "$log" | tail -n 1 || echo "debootstrap-check: no CTest summary (status $status)"
rm -f "$log"
exit "$status"
}
