#!/bin/sh
# Runs a program and fails unless it exits with the expected status.
# Usage: expect_exit.sh STATUS PROGRAM ARGS...
set -u
want=$1
shift
"$@"
rc=$?
if [ "$rc" -ne "$want" ]; then
    echo "expect_exit: exit status $rc, want $want"
    exit 1
fi
echo "expect_exit: exit status $rc as expected"
