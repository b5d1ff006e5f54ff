#!/usr/bin/env bash
# Installs every Debian package bucketdb needs to build, test and benchmark.
# Idempotent; works as root or through sudo.
set -euo pipefail
PKGS=(build-essential pkg-config clang libclang-rt-14-dev
      libmicrohttpd-dev libjansson-dev zlib1g-dev libzstd-dev libxxhash-dev libcmocka-dev
      python3 curl ca-certificates)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
echo "setup: installing ${missing[*]}" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
