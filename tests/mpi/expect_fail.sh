#!/bin/sh
# Runs a command that must fail: it must exit with STATUS ("nonzero": any
# but 0), print PATTERN (a fixed string) on stdout or stderr, and finish
# within MAX_SECONDS.
# Usage: expect_fail.sh STATUS PATTERN MAX_SECONDS COMMAND [ARGS...]
set -u
want=$1 pattern=$2 max=$3
shift 3
start=$(date +%s)
out=$("$@" 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
printf '%s\n' "$out" | tail -20
fail() { echo "expect_fail: $*"; exit 1; }
if [ "$want" = nonzero ]; then
    [ "$rc" -ne 0 ] || fail "exit status 0, want non-zero"
else
    [ "$rc" -eq "$want" ] || fail "exit status $rc, want $want"
fi
printf '%s\n' "$out" | grep -qF -- "$pattern" || fail "no '$pattern' in the output"
[ "$took" -le "$max" ] || fail "took $took s, limit $max s"
echo "expect_fail: exit status $rc, '$pattern' said, $took s: as expected"
