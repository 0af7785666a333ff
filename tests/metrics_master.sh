#!/bin/sh
# eccl-master --metrics: two ranks join, run and leave; then /metrics must
# show them (registered, admitted, an epoch, a view change, both gone), in
# Prometheus' text format, other paths 404 and other methods 405, and a
# SIGUSR2 counts a trace ask. Usage: metrics_master.sh ECCL_MASTER ECCL_BENCH
set -u
master_bin=$1 bench_bin=$2
out=$(mktemp) && trap 'kill $mpid 2>/dev/null; rm -f "$out"' EXIT
"$master_bin" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 >"$out" 2>&1 &
mpid=$!
for _ in $(seq 100); do grep -q "metrics on" "$out" && break; sleep 0.05; done
addr=$(sed -n 's/^eccl-master listening on //p' "$out")
url=$(sed -n 's/^eccl-master metrics on //p' "$out")
[ -n "$addr" ] && [ -n "$url" ] || { echo "metrics_master: no addresses: $(cat "$out")"; exit 1; }
"$bench_bin" --master "$addr" --world 2 -b 8 -e 1K -n 3 -w 1 >/dev/null 2>&1 &
"$bench_bin" --master "$addr" --world 2 -b 8 -e 1K -n 3 -w 1 >/dev/null 2>&1 || { echo "metrics_master: bench failed"; exit 1; }
wait $! || { echo "metrics_master: bench failed"; exit 1; }
kill -USR2 $mpid
sleep 0.3
get() { # status and body of one request: METHOD URL
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[2], method=sys.argv[1])
try:
    r = urllib.request.urlopen(req, timeout=5)
    print(r.status, r.headers.get("Content-Type"))
    sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
body=$(get GET "$url")
fail=0
want() {
    echo "$body" | grep -qx "$1" || { echo "metrics_master: no line '$1'"; fail=1; }
}
want '200 text/plain; version=0.0.4; charset=utf-8'
want '# TYPE eccl_master_peers gauge'
want 'eccl_master_peers{state="accepted"} 0'
want 'eccl_master_registrations_total 2'
want 'eccl_master_admitted_total 2'
want 'eccl_master_admission_seconds_count 2'
want 'eccl_master_peers_lost_total 2'
want 'eccl_master_epochs_total 2'
want 'eccl_master_view_change_seconds_count 1'
want 'eccl_master_trace_asks_total 1'
want 'eccl_master_late_reports_total 0'
# Each rank's calls that returned OK, summed (COLL_STATS when it leaves): at
# least the all-reduces, 8 sizes of 8 B to 1 KiB, 1 warm-up and 3 timed each,
# on both ranks (the bench adds its own barriers and agreements).
at_least() {
    v=$(echo "$body" | awk -v k="$1" '$1 == k { print $2 }')
    [ -n "$v" ] && [ "$v" -ge "$2" ] || { echo "metrics_master: $1 is '$v', want at least $2"; fail=1; }
}
at_least eccl_master_member_collectives_total 64
at_least eccl_master_member_collective_bytes_total 16320
want 'eccl_master_group_slow_peer{group="0"} 0'
want '# TYPE eccl_master_view_change_seconds summary'
# every sample line is NAME[{labels}] VALUE
echo "$body" | sed 1d | grep -v '^#' | grep -vqE '^[a-z_]+(\{[a-z]+="[^"]*"\})? [0-9.e+-]+$' &&
    { echo "metrics_master: a line is not a sample:"; echo "$body" | sed 1d | grep -v '^#' |
      grep -vE '^[a-z_]+(\{[a-z]+="[^"]*"\})? [0-9.e+-]+$'; fail=1; }
[ "$(get GET "${url%/metrics}/other" | head -1)" = 404 ] || { echo "metrics_master: /other is not 404"; fail=1; }
[ "$(get POST "$url" | head -1)" = 405 ] || { echo "metrics_master: POST is not 405"; fail=1; }
kill -TERM $mpid
wait $mpid || { echo "metrics_master: the master did not stop cleanly"; fail=1; }
# An address that is not one fails at once, saying so.
if "$master_bin" --listen 127.0.0.1:0 --metrics 127.0.0.1:notaport >"$out" 2>&1; then
    echo "metrics_master: a bad --metrics address was accepted"; fail=1
fi
grep -q "metrics wants an IPv4 HOST:PORT" "$out" || { echo "metrics_master: $(cat "$out")"; fail=1; }
[ $fail = 0 ] && echo "metrics_master: ok"
exit $fail
