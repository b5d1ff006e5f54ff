#!/usr/bin/env python3
"""bench/mqtt_bench.py: samples/s through Debian's mosquitto into bucketdb (the MQTT
mode of the benchmark; docs/MQTT.md#benchmark).

A QoS 1 publisher written here sends numbered line-protocol messages (one line per
device, 10 metrics per line) to a mosquitto started for the run (persistence on,
max_queued_messages 0); bucketdb consumes them through its gateway (QoS 1, PUBACK
after the WAL fsync). Measured end to end: from the first message published to the
moment bucketdb's /metrics counts every sample as durably written
(bucketdb_mqtt_samples_total). Also printed: the publisher's rate (broker
acknowledgements), the server's CPU seconds, and the machine it ran on.

It asserts nothing about speed. Bounded: --messages (default 2000) and --time-limit
(default 120 s); processes it started are stopped by PID, temp dirs removed.

    bench/mqtt_bench.py                     # defaults, MQTT 5
    bench/mqtt_bench.py --version 3.1.1 --messages 500 --lines 20
    BUCKETDB=build-mqtt/bucketdb bench/mqtt_bench.py
"""

import argparse
import getpass
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def remlen(n):
    out = b""
    while True:
        b, n = n % 128, n // 128
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def mstr(b):
    return len(b).to_bytes(2, "big") + b


def read_packet(sock):
    def exact(n):
        out = b""
        while len(out) < n:
            c = sock.recv(n - len(out))
            if not c:
                raise OSError("connection closed")
            out += c
        return out
    first = exact(1)[0]
    mult, rem = 1, 0
    for _ in range(4):
        b = exact(1)[0]
        rem += (b & 0x7f) * mult
        mult *= 128
        if not b & 0x80:
            break
    return first >> 4, exact(rem)


def machine():
    mem = cpu = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.1f GiB" % (int(f.readline().split()[1]) / 2**20)
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1) if m else "?"
    except OSError:
        pass
    return "%d cores, %s RAM, %s, kernel %s, load %s" % (
        os.cpu_count() or 0, mem, cpu, platform.release(),
        " ".join("%.2f" % x for x in os.getloadavg()))


def cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def samples_total(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return -1
    m = re.search(r"^bucketdb_mqtt_samples_total (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


def wait_until(fn, limit, what):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.05)
    sys.exit("bench: timed out waiting for %s" % what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--lines", type=int, default=50, help="lines (devices) per message")
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--window", type=int, default=100, help="publisher messages in flight")
    ap.add_argument("--version", default="5", choices=["5", "3.1.1"])
    ap.add_argument("--receive-max", type=int, default=32)
    ap.add_argument("--time-limit", type=float, default=120.0)
    a = ap.parse_args()

    binary = os.environ.get("BUCKETDB") or os.path.join(ROOT, "build", "bucketdb")
    mosq = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.access(binary, os.X_OK) or not os.path.exists(mosq):
        sys.exit("bench: need %s (make) and mosquitto (scripts/setup.sh --test)" % binary)
    tmp = tempfile.mkdtemp(prefix="bdbmqttbench-")
    procs = []
    try:
        bport = free_port()
        with open(os.path.join(tmp, "mosquitto.conf"), "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence true\n"
                    "persistence_location %s/\nmax_queued_messages 0\nmax_queued_bytes 0\n"
                    "user %s\n" % (bport, tmp, getpass.getuser()))
        blog = open(os.path.join(tmp, "broker.log"), "wb")
        broker = subprocess.Popen([mosq, "-c", os.path.join(tmp, "mosquitto.conf")],
                                  stdout=blog, stderr=blog)
        procs.append(broker)
        wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", bport)) == 0, 30, "mosquitto")
        hport = free_port()
        slog = open(os.path.join(tmp, "server.log"), "wb")
        server = subprocess.Popen(
            [binary, "serve", "--data", os.path.join(tmp, "data"), "--listen",
             "127.0.0.1:%d" % hport, "--retention-ms", "0", "--mqtt-broker",
             "127.0.0.1:%d" % bport, "--mqtt-client-id", "bdb-bench", "--mqtt-version",
             a.version, "--mqtt-receive-max", str(a.receive_max)],
            stdout=slog, stderr=slog)
        procs.append(server)
        wait_until(lambda: samples_total(hport) >= 0, 30, "bucketdb")
        wait_until(lambda: b"connected to" in open(os.path.join(tmp, "server.log"), "rb").read(),
                   30, "the gateway to connect")

        # message bodies, made before timing: one line per device, 10 metrics
        t0_ms = (int(time.time()) - 3600) * 1000
        bodies, samples = [], 0
        for m in range(a.messages):
            lines = []
            for k in range(a.lines):
                dev = (m * a.lines + k) % a.devices
                ts = (t0_ms + (m * a.lines + k) // a.devices * 1000) * 10**6
                vals = ",".join("f%d=%d.%02d" % (j, (m + j) % 97, k % 100) for j in range(10))
                lines.append("sensor,device=dev%06d %s %d" % (dev, vals, ts))
            bodies.append("\n".join(lines).encode())
            samples += 10 * a.lines

        sock = socket.create_connection(("127.0.0.1", bport), timeout=a.time_limit)
        body = mstr(b"MQTT") + b"\x04\x02\x00\x3c" + mstr(b"bdb-bench-pub")
        sock.sendall(b"\x10" + remlen(len(body)) + body)
        if read_packet(sock)[0] != 2:
            sys.exit("bench: no CONNACK")
        topic = mstr(b"bucketdb/bench/dev/telemetry")
        cpu0 = cpu_seconds(server.pid)
        start = time.monotonic()
        deadline = start + a.time_limit
        inflight, acked, sent = 0, 0, 0
        while acked < a.messages and time.monotonic() < deadline:
            while sent < a.messages and inflight < a.window:
                pid = sent % 65535 + 1
                pkt = topic + pid.to_bytes(2, "big") + bodies[sent]
                sock.sendall(b"\x32" + remlen(len(pkt)) + pkt)
                sent += 1
                inflight += 1
            if read_packet(sock)[0] == 4:
                acked += 1
                inflight -= 1
        pub_s = time.monotonic() - start
        sock.sendall(b"\xe0\x00")
        sock.close()
        want = 10 * a.lines * acked
        while samples_total(hport) < want and time.monotonic() < deadline:
            time.sleep(0.02)
        e2e = time.monotonic() - start
        got = samples_total(hport)
        cpu = cpu_seconds(server.pid) - cpu0
        print("mqtt bench: %d messages x %d lines x 10 metrics = %d samples, MQTT %s, "
              "receive maximum %d, publisher window %d"
              % (a.messages, a.lines, samples, a.version, a.receive_max, a.window))
        print("machine: %s (shared; the publisher and mosquitto run on the same cores)"
              % machine())
        print("publisher: %d of %d messages acknowledged by the broker in %.2f s"
              % (acked, a.messages, pub_s))
        print("bucketdb: %d of %d acknowledged samples durably stored in %.2f s end to end"
              "%s" % (got, want, e2e, "" if got >= want else " (TIME LIMIT)"))
        print("samples/s through mosquitto into bucketdb: %.0f  (server CPU %.2f s, "
              "%.2f s per million samples)"
              % (got / e2e if e2e else 0, cpu, cpu / (got / 1e6) if got else 0))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
