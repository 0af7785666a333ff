#!/bin/sh
# tls_cert.sh BIN_DIR OUT_DIR: ECCL_TLS=cert (backends/real/net_tls.c) with
# certificates made here by openssl(1): a CA, a member certificate it
# signed, and a rogue one it did not. Three ranks of eccl-bench all-reduce
# over TLS with exact results; a rank with the rogue certificate is refused
# by the master (ECCL_ERR_AUTH, "TLS handshake failed" in both logs).
set -eu
bin=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
fail() { echo "tls_cert: FAIL: $*"; for f in *.log; do echo "--- $f"; tail -5 "$f"; done; exit 1; }
q() { "$@" >/dev/null 2>&1 || fail "$*"; }
q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=eccl-test-ca
q openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout member.key -out member.csr -subj /CN=member
q openssl x509 -req -in member.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out member.pem -days 2
q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout rogue.key -out rogue.pem -days 2 -subj /CN=rogue
chmod 600 ./*.key

export ECCL_TLS=cert ECCL_TLS_CA="$dir/ca.pem" ECCL_TLS_CERT="$dir/member.pem" ECCL_TLS_KEY="$dir/member.key"
timeout 120 "$bin/eccl-bench" --np 3 -b 8 -e 1M -f 32 -n 3 -w 1 -c 1 >bench.log 2>&1 || fail "eccl-bench over TLS"
awk '/^ +[0-9]/ && $8 != 0 { bad = 1 } END { exit bad }' bench.log || fail "wrong values over TLS"
grep -q '^ *262144 ' bench.log || fail "no 256 KiB row"

"$bin/eccl-master" --listen 127.0.0.1:0 >master.log 2>&1 &
master=$!
trap 'kill $master 2>/dev/null' EXIT
addr=
for _ in $(seq 1 100); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' master.log | head -1)
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || fail "the master did not say where it listens"
if ECCL_TLS_CERT="$dir/rogue.pem" ECCL_TLS_KEY="$dir/rogue.key" timeout 60 "$bin/eccl-bench" --master "$addr" \
    --world 2 --timeout-ms 5000 -b 8 -e 8 -n 1 -w 0 >rogue.log 2>&1; then
    fail "a rank with a certificate the CA did not sign got in"
fi
grep -q 'TLS handshake failed' rogue.log || fail "the rogue rank does not say its TLS handshake failed"
grep -q 'TLS handshake failed' master.log || fail "the master does not say it refused a TLS handshake"
echo "tls_cert: OK"
