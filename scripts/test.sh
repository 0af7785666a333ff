#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run):
#   1. install missing build dependencies (scripts/deps.sh);
#   2. gcc, default build type (RelWithDebInfo) into build/: build and run the
#      whole ctest suite;
#   3. gcc, Release into build-release/: build and run the suite again
#      (-O3 warnings and optimiser-dependent behaviour show up only there),
#      less what repeats the default leg at length: the multi-process suites
#      over another transport or buffer kind (label `variant`; Release
#      still runs net_ibv and the CUDA backend through their unit tests,
#      test_cuda_mp and the simulated ibv scenarios) and the scenarios of
#      1,000 ranks and more (label `long`). Unit tests, every suite's host
#      run, the MPI jobs and every determinism check run in both legs.
#   4. clang, default and Release, into build-clang/ and build-clang-release/:
#      the -Werror build must be clean with the second compiler too.
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

# build DIR COMPILER BUILD_TYPE: configure and build one configuration. The
# C++ compiler (python/'s extension module, header_cxx) is the same
# family's: g++ with gcc, clang++ with clang.
build() {
    local cxx
    case "$2" in
        gcc) cxx=g++ ;;
        clang) cxx=clang++ ;;
        *) cxx=c++ ;;
    esac
    section "$2 $3: configure $1/"
    cmake -S . -B "$1" -DCMAKE_C_COMPILER="$2" -DCMAKE_CXX_COMPILER="$cxx" ${3:+-DCMAKE_BUILD_TYPE=$3}
    section "$2 $3: build"
    cmake --build "$1" -j "$jobs"
}
# run_tests DIR [CTEST ARGS...]
run_tests() {
    section "ctest $*"
    ctest --test-dir "$1" --output-on-failure --no-tests=error -j2 "${@:2}"
}

build build gcc ""
run_tests build
build build-release gcc Release
run_tests build-release -LE 'variant|long'
build build-clang clang ""
build build-clang-release clang Release

section "all passed"
