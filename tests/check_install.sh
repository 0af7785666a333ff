#!/usr/bin/env bash
# check_install.sh BUILD_DIR CONSUMER_SRC_DIR [C_COMPILER] [CMAKE] [VERSION]
#
# Installs BUILD_DIR into a scratch prefix, then builds and runs the consumer
# in CONSUMER_SRC_DIR (tests/consumer) against it the ways users will:
#   0. every built program is installed and runs (--help) with env -i;
#   1. pkg-config, shared library;
#   2. pkg-config --static, libeccl.a (proves Libs.private is enough);
#   3. CMake find_package(eccl VERSION CONFIG REQUIRED) with eccl::eccl and
#      eccl::eccl_static;
# and checks that the version file rejects the next major version.
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR CONSUMER_SRC_DIR [C_COMPILER] [CMAKE] [VERSION]}
src=${2:?usage: $0 BUILD_DIR CONSUMER_SRC_DIR [C_COMPILER] [CMAKE] [VERSION]}
cc=${3:-cc}
cmake=${4:-cmake}
version=${5:-}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() {
    echo "check_install: FAIL: $*" >&2
    exit 1
}
step() {
    echo "== $*"
}

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
    cat "$tmp/install.log"
    fail "cmake --install failed"
}

pc=$(find "$prefix" -path '*/pkgconfig/eccl.pc' | head -n 1)
[ -n "$pc" ] || fail "no pkgconfig/eccl.pc under $prefix"
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
echo "libdir: $libdir"
for f in "$prefix/include/eccl.h" "$libdir/libeccl.a" "$libdir/libeccl.so" \
         "$libdir/cmake/eccl/ecclConfig.cmake" "$libdir/cmake/eccl/ecclConfigVersion.cmake" \
         "$libdir/cmake/eccl/ecclTargets.cmake"; do
    [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
# Every program the build made must be installed, and must start from the
# prefix with a clean environment (no LD_LIBRARY_PATH, no PATH): its run path
# alone has to find libeccl.so.
step "installed programs start with a clean environment"
built=0
for exe in "$build"/bin/eccl-*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    tool=$(basename "$exe")
    built=$((built + 1))
    [ -x "$prefix/bin/$tool" ] || fail "$tool was built but not installed"
    out=$(env -i "$prefix/bin/$tool" --help 2>&1) || {
        echo "$out" >&2
        fail "installed $tool --help exited non-zero in a clean environment"
    }
    case $out in *usage*) ;; *) echo "$out" >&2; fail "installed $tool --help printed no usage" ;; esac
    echo "$tool --help: ok"
done
[ "$built" -gt 0 ] || fail "no eccl-* programs under $build/bin"

export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

step "pkg-config"
pc_prefix=$(pkg-config --variable=prefix eccl)
[ "$pc_prefix" = "$prefix" ] || fail "eccl.pc says prefix=$pc_prefix, installed into $prefix"
pc_version=$(pkg-config --modversion eccl)
[ -z "$version" ] || [ "$pc_version" = "$version" ] || fail "eccl.pc says version $pc_version, expected $version"
echo "cflags: $(pkg-config --cflags eccl)"
echo "libs: $(pkg-config --libs eccl)   static: $(pkg-config --static --libs eccl)"

step "consumer via pkg-config (shared)"
# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
"$cc" -std=c99 -Wall -Werror "$src/main.c" $(pkg-config --cflags --libs eccl) -o "$tmp/consumer_pc"
readelf -d "$tmp/consumer_pc" | grep -q 'NEEDED.*libeccl\.so' || fail "consumer_pc does not link libeccl.so"
"$tmp/consumer_pc"

step "consumer via pkg-config --static (libeccl.a)"
private_libs=$(pkg-config --static --libs-only-l eccl | tr ' ' '\n' | grep -vx -- '-leccl' | tr '\n' ' ')
# shellcheck disable=SC2046,SC2086
"$cc" -std=c99 -Wall -Werror "$src/main.c" $(pkg-config --cflags eccl) \
    $(pkg-config --libs-only-L eccl) -Wl,-Bstatic -leccl -Wl,-Bdynamic $private_libs -o "$tmp/consumer_pc_static"
if readelf -d "$tmp/consumer_pc_static" | grep -q 'NEEDED.*libeccl'; then
    fail "consumer_pc_static depends on libeccl.so"
fi
env -u LD_LIBRARY_PATH "$tmp/consumer_pc_static"

step "consumer via CMake find_package(eccl ${version} CONFIG REQUIRED)"
"$cmake" -S "$src" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
    -DECCL_EXPECT_VERSION="$version" >"$tmp/consumer-configure.log" 2>&1 || {
    cat "$tmp/consumer-configure.log"
    fail "configuring the CMake consumer failed"
}
"$cmake" --build "$tmp/cmake-build" >"$tmp/consumer-build.log" 2>&1 || {
    cat "$tmp/consumer-build.log"
    fail "building the CMake consumer failed"
}
readelf -d "$tmp/cmake-build/consumer" | grep -q 'NEEDED.*libeccl\.so' || fail "consumer does not link libeccl.so"
if readelf -d "$tmp/cmake-build/consumer_static" | grep -q 'NEEDED.*libeccl'; then
    fail "consumer_static depends on libeccl.so"
fi
"$tmp/cmake-build/consumer"
env -u LD_LIBRARY_PATH "$tmp/cmake-build/consumer_static"

if [ -n "$version" ]; then
    next_major="$(( ${version%%.*} + 1 )).0"
    step "find_package(eccl $next_major) must fail (SameMajorVersion)"
    if "$cmake" -S "$src" -B "$tmp/cmake-build-next" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DECCL_EXPECT_VERSION="$next_major" >"$tmp/next.log" 2>&1; then
        fail "find_package(eccl $next_major) accepted eccl $version"
    fi
    grep -q 'not compatible\|version' "$tmp/next.log" || { cat "$tmp/next.log"; fail "unexpected failure"; }
fi

echo "check_install: all consumers built and ran"
