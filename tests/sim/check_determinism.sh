#!/bin/sh
# Runs a simulation twice and fails unless both runs print the same bytes
# (stdout and stderr) and both succeed.
# Usage: check_determinism.sh PROGRAM ARGS...
set -u
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$@" >"$dir/1" 2>&1; rc1=$?
"$@" >"$dir/2" 2>&1; rc2=$?
if ! cmp -s "$dir/1" "$dir/2"; then
    echo "check_determinism: the two runs differ:"
    diff "$dir/1" "$dir/2" | head -40
    exit 1
fi
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    echo "check_determinism: exit status $rc1 / $rc2"
    tail -20 "$dir/1"
    exit 1
fi
echo "check_determinism: 2 identical runs, $(wc -l <"$dir/1") lines, md5 $(md5sum <"$dir/1" | cut -c1-32)"
