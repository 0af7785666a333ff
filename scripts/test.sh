#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run):
#   1. install missing build dependencies (scripts/deps.sh);
#   2. configure and build with gcc into build/ and run the whole ctest suite;
#   3. configure and build with clang into build-clang/, proving the
#      -Werror build is clean with the second compiler.
# Exits non-zero on the first failure. ECCL_JOBS overrides the parallelism.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${ECCL_JOBS:-$(nproc 2>/dev/null || echo 2)}

section() {
    printf '\n======== %s ========\n' "$*"
}
on_exit() {
    local rc=$?
    [ "$rc" -eq 0 ] || printf '\n======== FAILED (exit %d) ========\n' "$rc"
}
trap on_exit EXIT

section "dependencies"
scripts/deps.sh

section "gcc: configure build/"
cmake -S . -B build -DCMAKE_C_COMPILER=gcc
section "gcc: build"
cmake --build build -j "$jobs"
section "gcc: ctest"
ctest --test-dir build --output-on-failure --no-tests=error -j2

section "clang: configure build-clang/"
cmake -S . -B build-clang -DCMAKE_C_COMPILER=clang
section "clang: build"
cmake --build build-clang -j "$jobs"

section "all passed"
