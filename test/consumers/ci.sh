#!/usr/bin/env bash
# Builds test/consumers/consumer.c against uvcuda three ways and runs each on
# the simulated driver:
#   (a) pkg-config and (b) CMake find_package(uvcuda), both against a
#       `meson install` into a scratch prefix of a library built with the
#       CUDA Toolkit hidden (-Dcudatoolkit=/nonexistent, no CPATH);
#   (c) uvcuda as a Meson subproject (its tree copied to subprojects/uvcuda,
#       toolkit hidden too).
# Usage: test/consumers/ci.sh [BUILD]
#   BUILD: a uvcuda build directory with test/sim/libsimcuda.so in it (built
#   if missing there); without it, a scratch build makes one.
#   UVCUDA_CONSUMERS_KEEP=1 keeps the scratch directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/test/consumers

fail() { echo "consumers: FAILED: $*" >&2; exit 1; }
step() { printf '\n== consumers: %s\n' "$*"; }
# Runs a command quietly; shows its output and stops if it fails.
quiet() {
  local log=$work/last.log
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$*"; }
}

if ! command -v cmake >/dev/null; then
  [ "$(id -u)" = 0 ] || fail "cmake missing (run as root to install it)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq cmake >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq cmake >/dev/null; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/uvcuda-consumers.XXXXXX")
if [ "${UVCUDA_CONSUMERS_KEEP:-0}" != 1 ]; then
  trap 'rm -rf "$work"' EXIT
fi
echo "consumers: scratch directory $work"
# The toolkit hidden: no CPATH-style paths, no CUDA_PATH, a toolkit dir that
# does not exist.
notk=(env -u CPATH -u C_INCLUDE_PATH -u CUDA_PATH)

step "simulated driver"
if [ $# -ge 1 ]; then
  sim_build=$(cd "$1" && pwd)
else
  sim_build=$work/sim
  quiet meson setup "$sim_build" "$root" -Dtests=enabled -Dgpu_tests=disabled \
    -Dbench=disabled -Dexamples=disabled
fi
quiet meson compile -C "$sim_build" simcuda
export UVCUDA_LIBCUDA=$sim_build/test/sim/libsimcuda.so
[ -f "$UVCUDA_LIBCUDA" ] || fail "no $UVCUDA_LIBCUDA"
echo "UVCUDA_LIBCUDA=$UVCUDA_LIBCUDA"

step "library without the CUDA Toolkit, installed into $work/prefix"
prefix=$work/prefix
quiet "${notk[@]}" meson setup "$work/lib" "$root" --werror --prefix="$prefix" \
  -Dlibdir=lib -Dcudatoolkit=/nonexistent -Dtests=disabled -Dbench=disabled \
  -Dexamples=disabled
grep -q 'CUDA Toolkit headers not found' "$work/last.log" ||
  fail "the library build saw a CUDA Toolkit"
quiet "${notk[@]}" meson compile -C "$work/lib"
quiet meson install -C "$work/lib"
(cd "$prefix" && find . ! -type d | sort)
# The SONAME changes whenever the ABI may: while the major version is 0, a
# minor release may change it (the public structs hold the private fields),
# so the soname carries the minor too: libuvcuda.so.0.Y (as the CMake
# version file's 0.x rule); from 1.0 on, libuvcuda.so.X.
ver=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --modversion uvcuda)
major=${ver%%.*}; minor=${ver#*.}; minor=${minor%%.*}
want=libuvcuda.so.$major; [ "$major" = 0 ] && want=libuvcuda.so.0.$minor
got=$(LC_ALL=C readelf -d "$prefix/lib/libuvcuda.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$got" = "$want" ] || fail "SONAME $got, want $want (version $ver)"
[ -e "$prefix/lib/$want" ] || fail "no $want installed"
echo "SONAME $got (version $ver)"

step "(a) pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pc_cflags=$(pkg-config --cflags uvcuda)
pc_libs=$(pkg-config --libs uvcuda)
pc_libdir=$(pkg-config --variable=libdir uvcuda)
echo "pkg-config uvcuda $(pkg-config --modversion uvcuda): $pc_cflags $pc_libs"
# shellcheck disable=SC2086 # word splitting of the flags is meant
"${notk[@]}" cc -std=gnu11 -Wall -Wextra -Werror $pc_cflags "$src/consumer.c" \
  -o "$work/consumer-pkgconfig" $pc_libs -Wl,-rpath,"$pc_libdir"
"$work/consumer-pkgconfig" || fail "(a) pkg-config consumer"

step "(b) CMake find_package(uvcuda)"
quiet "${notk[@]}" cmake -S "$src/cmake" -B "$work/cmake" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror"
grep 'uvcuda 0' "$work/last.log"
quiet cmake --build "$work/cmake"
"$work/cmake/consumer" || fail "(b) CMake consumer"
# The next minor version (an API break while the major is 0) is refused.
ver=$(pkg-config --modversion uvcuda)
minor=${ver#*.}
next=${ver%%.*}.$((${minor%%.*} + 1))
if "${notk[@]}" cmake -S "$src/cmake" -B "$work/cmake-next" \
     -DCMAKE_PREFIX_PATH="$prefix" -DUVCUDA_WANT="$next" >"$work/cmake-next.log" 2>&1; then
  fail "find_package(uvcuda $next) accepted uvcuda $ver"
fi
grep -q "version: $ver" "$work/cmake-next.log" ||
  { cat "$work/cmake-next.log" >&2; fail "find_package(uvcuda $next) failed for another reason"; }
echo "find_package(uvcuda $next) refused uvcuda $ver, as it should"

step "(c) Meson subproject"
msub=$work/meson-subproject
mkdir -p "$msub"
cp -R "$src/meson-subproject/." "$msub/"
cp "$src/consumer.c" "$msub/"
mkdir "$msub/subprojects/uvcuda"
if git -C "$root" rev-parse --show-toplevel >/dev/null 2>&1; then
  # Tracked files and new ones not ignored: what a clone (or a commit) has.
  # (--ignore-failed-read: a tracked file deleted in the work tree.)
  (cd "$root" && git ls-files -z --cached --others --exclude-standard |
     tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
    tar -xf - -C "$msub/subprojects/uvcuda"
else
  (cd "$root" && tar --exclude='./build*' --exclude=./.gpu-deps -cf - .) |
    tar -xf - -C "$msub/subprojects/uvcuda"
fi
quiet "${notk[@]}" meson setup "$work/msub-build" "$msub" --werror \
  --force-fallback-for=uvcuda -Duvcuda:cudatoolkit=/nonexistent
grep -E 'Subproject uvcuda finished|Dependency uvcuda from subproject' "$work/last.log" | tail -1
quiet "${notk[@]}" meson compile -C "$work/msub-build"
"$work/msub-build/consumer" || fail "(c) Meson subproject consumer"

printf '\nconsumers: OK (pkg-config, CMake, Meson subproject)\n'
