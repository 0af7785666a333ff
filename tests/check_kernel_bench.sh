#!/bin/sh
# check_kernel_bench.sh BENCH: a smoke run of eccl-kernel-bench on whatever
# runtime the loader finds (mocks/cudart in CI). Speed is never judged here:
# it must print one row per kernel, and none of eccl's kernels may say
# "error" (Thrust's reduction has no CPU twin, so under the mock it may).
set -u
bench=${1:?usage: $0 BENCH}
out=$("$bench" -b 64K -e 64K -n 1 -w 0) || { echo "$out"; echo "check_kernel_bench: exit $?"; exit 1; }
echo "$out"
rows=$(echo "$out" | grep -c '^ *65536 ')
[ "$rows" -eq 9 ] || { echo "check_kernel_bench: $rows rows, want 9"; exit 1; }
if echo "$out" | grep '^ *65536 ' | grep -v thrust_ | grep -q error; then
    echo "check_kernel_bench: an eccl kernel failed"
    exit 1
fi
echo "check_kernel_bench: ok"
