#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages needed to build and test eccl, and only
# those that are missing: quiet and without network access when everything is
# already there. Safe to run any number of times.
set -euo pipefail

packages=(
    build-essential # gcc, g++ (header_cxx), make, libc headers
    binutils        # nm, objdump, readelf: seam and install checks
    cmake
    pkg-config      # finds cmocka; install_consumer checks eccl.pc
    libcmocka-dev   # unit tests
    libfiu-dev      # failpoints (fiu.h, libfiu)
    libssl-dev      # OpenSSL: the connection handshake's HMAC-SHA256 and CSPRNG, TLS 1.3 links
    openssl         # openssl(1): tests/tls_cert.sh makes its CA and certificates
    fiu-utils       # fiu-run / fiu-ctrl for failpoint tests
    clang           # the second compiler every change must build with
    python3         # tests/check_seam.sh
    libsimgrid-dev  # backends/sim: the core on SimGrid 3.32
    libibverbs-dev  # rdma-core's verbs.h and libibverbs: what mocks/ibverbs stands in for
    gnuplot-nox     # eccl-sim renders plot.png (skipped with a note without it)
    libmicrohttpd-dev # eccl-master --metrics (left out with a note without it)
    pybind11-dev    # python/: the `eccl` Python package (skipped with a note without it)
    python3-dev     # Python.h for that extension module
    python3-numpy   # numpy arrays as buffers; the Python tests
    python3-pytest  # the Python tests (ctest python_eccl)
    python3-torch   # torch tensors as buffers (CPU; optional at import)
    libtorch-dev    # python/: eccl._torch, the torch.distributed backend (skipped with a note without it)
)

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps.sh: not a Debian-based system; install by hand: ${packages[*]}" >&2
    exit 1
fi

missing=()
for p in "${packages[@]}"; do
    # `dpkg -s` also succeeds for removed-but-configured packages; the status
    # word must say installed.
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "deps.sh: missing ${missing[*]}, and not root and no sudo to install them" >&2
        exit 1
    fi
fi

echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
