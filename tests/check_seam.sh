#!/usr/bin/env bash
# check_seam.sh CORE_DIR [OBJECT...]
# check_seam.sh --globals-only OBJECT...   (rule (b) alone: backends/sim may
#                                          call the OS, but holds no globals)
#
# Enforces the two rules of the seam (docs: DESIGN.md, "The seam"):
#  (a) core/ makes no system call: no C or header file under CORE_DIR calls a
#      socket, polling, thread, clock, sleep, environment, randomness, process,
#      signal or stdout function directly. A call is the bare name followed by
#      "(" and not preceded by "->", ".", "_" or an identifier character, so
#      `env->net->connect(` and `eccl_comm_connect(` pass and `connect(` does
#      not. Comments, string and character literals are stripped first. Headers
#      that only exist to reach those functions may not be included either.
#  (b) core/ holds no mutable global or static variable: no OBJECT may define a
#      symbol in a writable data section (nm types D d B b C, and the TLS,
#      small-data and common variants). Constant tables are fine, including
#      tables of pointers that -fPIC places in .data.rel.ro (nm calls those
#      "d" too, so the section decides).
#
# Exit status: 0 clean, 1 violations found (each printed as file:line), 2 usage.
set -euo pipefail

if [ "${1:-}" = "--globals-only" ] && [ $# -ge 2 ]; then
    core_dir=""
elif [ $# -ge 1 ] && [ -d "$1" ]; then
    core_dir=$1
else
    echo "usage: $0 CORE_DIR [OBJECT...] | $0 --globals-only OBJECT..." >&2
    exit 2
fi
shift

/usr/bin/python3 - "$core_dir" "$@" <<'PY'
import os
import re
import subprocess
import sys

core_dir = sys.argv[1]
# ctest hands $<TARGET_OBJECTS:...> over as one ";"-separated argument
# (add_test cannot expand lists before CMake 3.31).
objects = [o for arg in sys.argv[2:] for o in arg.split(";") if o]

# Functions core/ must reach through the env table (or not at all).
FORBIDDEN = [
    # sockets, name resolution and polling
    r"socket", r"socketpair", r"connect", r"accept4?", r"bind", r"listen",
    r"shutdown", r"setsockopt", r"getsockopt", r"getaddrinfo",
    r"gethostbyname", r"send", r"sendto", r"sendmsg", r"recv", r"recvfrom",
    r"recvmsg", r"epoll_\w+", r"poll", r"ppoll", r"select", r"pselect",
    r"eventfd",
    # file descriptors
    r"open", r"close", r"read", r"write", r"readv", r"writev", r"pipe2?",
    r"fcntl", r"ioctl", r"fopen", r"freopen",
    # threads
    r"pthread_\w+", r"thrd_\w+", r"mtx_\w+", r"cnd_\w+", r"sched_yield",
    # clocks and sleeping
    r"clock_gettime", r"clock_nanosleep", r"gettimeofday", r"time",
    r"timespec_get", r"clock", r"sleep", r"usleep", r"nanosleep",
    # environment and randomness
    r"getenv", r"secure_getenv", r"setenv", r"putenv", r"unsetenv",
    r"rand", r"srand", r"rand_r", r"random", r"srandom", r"[dlmj]rand48",
    r"s[re]and48", r"getrandom", r"getentropy",
    # processes and signals
    r"fork", r"vfork", r"execl", r"execlp", r"execle", r"execv", r"execvp",
    r"execvpe", r"execve", r"fexecve", r"system", r"popen", r"exit", r"_exit",
    r"signal", r"sigaction", r"raise", r"kill",
    # stdout
    r"printf", r"vprintf", r"puts", r"putchar",
]
CALL_RE = re.compile(r"(?<![\w])(" + "|".join(FORBIDDEN) + r")\s*\(")
# stdout/stdin are I/O no matter which function they are handed to.
STREAM_RE = re.compile(r"(?<![\w.>])(stdout|stdin)(?!\w)")
FORBIDDEN_HEADERS = {
    "pthread.h", "threads.h", "unistd.h", "signal.h", "time.h", "sys/time.h",
    "sys/socket.h", "sys/epoll.h", "sys/select.h", "poll.h", "sys/poll.h",
    "sys/eventfd.h", "netdb.h", "fcntl.h", "sys/wait.h", "sys/random.h",
}
INCLUDE_RE = re.compile(r"^\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", re.M)


def strip(src):
    """Blanks comments and string/char literal contents, keeping newlines so
    line numbers survive. The include check runs on the raw text."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "/" and nxt == "/":
            j = i
            while j < n and src[j] != "\n":
                # a backslash-newline continues a // comment
                if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n":
                    j += 2
                    continue
                j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", src[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def preceded_by_member_access(text, start):
    """True when the name at `start` follows `->` or `.` (maybe with blanks):
    a call through an ops table or a struct member, which is the point."""
    k = start - 1
    while k >= 0 and text[k] in " \t\r\n":
        k -= 1
    if k >= 0 and text[k] == ".":
        return True
    return k >= 1 and text[k - 1:k + 1] == "->"


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


violations = []
sources = []
for root, dirs, files in (os.walk(core_dir) if core_dir else []):
    dirs.sort()
    for name in sorted(files):
        if name.endswith((".c", ".h")):
            sources.append(os.path.join(root, name))

for path in sources:
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    for m in INCLUDE_RE.finditer(raw):
        if m.group(1) in FORBIDDEN_HEADERS:
            violations.append("%s:%d: includes <%s>" % (path, line_of(raw, m.start()), m.group(1)))
    text = strip(raw)
    for m in CALL_RE.finditer(text):
        if preceded_by_member_access(text, m.start()):
            continue
        violations.append("%s:%d: calls %s()" % (path, line_of(text, m.start()), m.group(1)))
    for m in STREAM_RE.finditer(text):
        violations.append("%s:%d: uses %s" % (path, line_of(text, m.start()), m.group(1)))

# (b) writable data in the compiled objects. nm gives the type letter; objdump
# gives the section, which tells a mutable variable from a relocated constant.
WRITABLE_TYPES = set("DdBbCGgSsV")
READONLY_SECTIONS = re.compile(r"^(\.data\.rel\.ro|\.rodata)(\..*)?$")
OBJDUMP_RE = re.compile(r"^[0-9a-fA-F]+\s.{7}\s(\S+)\s+[0-9a-fA-F]+\s+(.*)$")
for obj in objects:
    if not os.path.isfile(obj):
        violations.append("%s: object file missing" % obj)
        continue
    nm = subprocess.run(["nm", obj], capture_output=True, text=True)
    if nm.returncode != 0:
        violations.append("%s: nm failed: %s" % (obj, nm.stderr.strip()))
        continue
    sections = {}
    od = subprocess.run(["objdump", "-t", obj], capture_output=True, text=True)
    if od.returncode != 0:
        violations.append("%s: objdump failed: %s" % (obj, od.stderr.strip()))
        continue
    for line in od.stdout.splitlines():
        m = OBJDUMP_RE.match(line)
        if m:
            sections[m.group(2).strip()] = m.group(1)
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] not in WRITABLE_TYPES:
            continue
        sym, kind = parts[2], parts[1]
        section = sections.get(sym, "?")
        if READONLY_SECTIONS.match(section):
            continue
        # Sanitizer bookkeeping (-fsanitize=address), not our state.
        if sym.startswith(("__odr_asan", "__asan_", "__ubsan_", "__sancov_")):
            continue
        violations.append("%s: writable data symbol %s (nm %s, section %s)" % (obj, sym, kind, section))

for v in violations:
    print(v)
if violations:
    print("seam check: %d violation(s) in %s (%d source files, %d objects)"
          % (len(violations), core_dir, len(sources), len(objects)))
    sys.exit(1)
print("seam check: clean (%d source files, %d objects)" % (len(sources), len(objects)))
PY
