#!/usr/bin/env bash
# check_seam_selftest.sh CHECK_SEAM_SCRIPT C_COMPILER
#
# Proves the seam check can fail: it must reject each planted violation and
# accept code that only looks like one (ops-table calls, prefixed names,
# comments, strings, constant tables). Without this, a broken check_seam.sh
# (say, a regex that never matches) would pass every build.
set -uo pipefail

check=${1:?usage: $0 CHECK_SEAM_SCRIPT C_COMPILER}
cc=${2:?usage: $0 CHECK_SEAM_SCRIPT C_COMPILER}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect PASS|FAIL NAME DIR [OBJECT...]
expect() {
    local want=$1 name=$2
    shift 2
    local out rc
    out=$("$check" "$@" 2>&1)
    rc=$?
    if [ "$want" = FAIL ] && [ "$rc" -eq 1 ]; then
        echo "ok: $name rejected"
    elif [ "$want" = PASS ] && [ "$rc" -eq 0 ]; then
        echo "ok: $name accepted"
    else
        echo "FAILED: $name: expected $want, check_seam.sh exited $rc:"
        printf '%s\n' "$out" | sed 's/^/    /'
        failures=$((failures + 1))
    fi
}

# plant NAME: a directory holding one file, NAME.c, read from stdin.
plant() {
    mkdir -p "$tmp/$1"
    cat > "$tmp/$1/$1.c"
}

plant clean <<'C'
#include <stddef.h>
#include <string.h>
struct net { int (*connect)(void *ctx, const char *addr); int (*send)(void *c); };
struct env { struct net *net; struct net net_inline; };
int eccl_comm_connect(struct env *env);
int eccl_sleep_until(int t);
/* A comment may say usleep(1), printf("x") or getenv("HOME"). */
// So may this one: pthread_create(&t, NULL, f, NULL);
static const char *const names[] = { "printf(", "time(", "socket(" };
static const int table[4] = { 1, 2, 3, 4 };
const char *eccl_name(int i) { return names[i % 3]; }
int eccl_comm_connect(struct env *env)
{
    char q = '(';
    int r = env->net->connect(env, "sleep(1)");
    r += env -> net -> connect(env, "x");
    r += env->net_inline.connect(env, "y");
    r += eccl_sleep_until(table[1]) + q;
    return r + (int)strlen("rand()");
}
int eccl_sleep_until(int t) { return t; }
C
"$cc" -std=c11 -fPIC -c "$tmp/clean/clean.c" -o "$tmp/clean.o" || exit 1
expect PASS "clean source and object" "$tmp/clean" "$tmp/clean.o"

plant usleep <<'C'
void eccl_backoff(void) { usleep(1); }
C
expect FAIL "a direct usleep() call" "$tmp/usleep"

plant connect <<'C'
int eccl_dial(int fd, const void *sa) { return connect (fd, sa, 16); }
C
expect FAIL "a direct connect() call" "$tmp/connect"

plant pthread <<'C'
void eccl_lock(void *m) { pthread_mutex_lock(m); }
C
expect FAIL "a pthread_* call" "$tmp/pthread"

plant printf <<'C'
void eccl_say(void) { printf("hi\n"); }
C
expect FAIL "a printf() call" "$tmp/printf"

plant header <<'C'
#include <sys/socket.h>
C
expect FAIL "an include of <sys/socket.h>" "$tmp/header"

plant counter <<'C'
int eccl_next(void) { static int calls; return ++calls; }
static int counter;
int eccl_count(void) { return ++counter; }
C
"$cc" -std=c11 -fPIC -c "$tmp/counter/counter.c" -o "$tmp/counter.o" || exit 1
# The source itself is clean: only the object check can catch this.
expect PASS "mutable statics, source only" "$tmp/counter"
expect FAIL "mutable statics in the object" "$tmp/counter" "$tmp/counter.o"

plant global <<'C'
int eccl_hits = 7;
C
"$cc" -std=c11 -fPIC -c "$tmp/global/global.c" -o "$tmp/global.o" || exit 1
expect FAIL "an initialised global in the object" "$tmp/global" "$tmp/global.o"

expect FAIL "a missing object file" "$tmp/clean" "$tmp/does-not-exist.o"
expect FAIL "--globals-only: mutable statics" --globals-only "$tmp/counter.o"
expect PASS "--globals-only: clean object" --globals-only "$tmp/clean.o"

if [ "$failures" -ne 0 ]; then
    echo "seam self-test: $failures expectation(s) not met"
    exit 1
fi
echo "seam self-test: all expectations met"
