#!/usr/bin/env bash
# The main job on its embedded default: builds eccl (installing missing
# Debian packages first), then starts a master and 4 local workers doing
# 64 MiB all-reduces, kills one with SIGKILL mid-operation and shows the
# survivors recover. Extra arguments go to eccl-demo (see --help).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${ECCL_JOBS:-$(nproc 2>/dev/null || echo 2)}
scripts/deps.sh
cmake -S . -B build -DCMAKE_C_COMPILER=gcc >/dev/null
cmake --build build -j "$jobs" --target eccl-demo eccl-worker eccl-master eccl-bench >/dev/null
exec build/bin/eccl-demo "$@"
