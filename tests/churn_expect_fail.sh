#!/bin/sh
# The churn checker can fail: eccl-churn with one worker that silently flips
# a bit of its model must exit non-zero and say so in its summary
# (result=FAIL, parity_breaks > 0).
# Usage: churn_expect_fail.sh ECCL_CHURN ARGS...
set -u
out=$("$@" 2>&1)
rc=$?
echo "$out" | tail -5
summary=$(echo "$out" | tail -1)
case "$summary" in
churn:*result=FAIL*) ;;
*) echo "churn_expect_fail: the summary does not say FAIL"; exit 1 ;;
esac
breaks=$(echo "$summary" | sed -n 's/.* parity_breaks=\([0-9]*\).*/\1/p')
if [ "$rc" -eq 0 ] || [ -z "$breaks" ] || [ "$breaks" -eq 0 ]; then
    echo "churn_expect_fail: exit status $rc, parity_breaks=${breaks:-?}: the corruption went unnoticed"
    exit 1
fi
echo "churn_expect_fail: exit status $rc, parity_breaks=$breaks: caught"
