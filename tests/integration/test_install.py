#!/usr/bin/env python3
"""`make install` for operators (Makefile, packaging/, man/): the binary under test is
installed into a staging tree and the result checked: every file in place, a man
page for every command `bucketdb help` lists and each renders without a warning, the
example configuration covers every setting with its default and passes
--check-config, and the systemd unit is complete and passes `systemd-analyze verify`
(that one check is skipped, with a message, where systemd-analyze is absent)."""

import os
import re
import shutil
import subprocess

from bdbtest import BIN, Suite, check, contains, eq, run_bin, tmpdir

suite = Suite("install")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def make_install(**vars):
    """make install of exactly the binary under test: -o keeps make from rebuilding it."""
    bin_abs = os.path.abspath(BIN)
    args = ["make", "-s", "-C", ROOT, "-o", bin_abs, "BUILD=" + os.path.dirname(bin_abs),
            "install"] + ["%s=%s" % kv for kv in vars.items()]
    env = dict(os.environ)
    env.pop("MAKEFLAGS", None)
    p = subprocess.run(args, capture_output=True, timeout=120, env=env)
    eq(p.returncode, 0, "make install %r:\n%s" % (vars, p.stderr.decode("utf-8", "replace")))


def commands():
    """The subcommands `bucketdb help` lists: each needs its man page."""
    rc, out, err = run_bin(["help"])
    eq(rc, 0, "bucketdb help")
    names = re.findall(r"^  ([a-z][a-z-]*)\s", out, re.M)
    check("serve" in names and "version" in names, "no command list in %r" % out)
    return names


def settings():
    """(key, default) of every setting, in the table's order, from --print-config."""
    rc, out, err = run_bin(["serve", "--print-config"])
    eq(rc, 0, "serve --print-config")
    keys = []
    for line in out.splitlines():
        m = re.match(r"^(?:# )?([a-z0-9_]+) =(?: (.*))?$", line)
        check(m, "unexpected --print-config line %r" % line)
        keys.append((m.group(1), m.group(2) or ""))
    check(len(keys) > 20, "too few settings: %r" % keys)
    return keys


def render_man(path):
    """groff (from man-db's groff-base) with every warning on: the text, or a failure."""
    groff = shutil.which("groff")
    check(groff, "groff is not installed (apt-get install groff-base; scripts/setup.sh "
                 "--test installs it): cannot check that the man pages render")
    p = subprocess.run([groff, "-man", "-Tutf8", "-ww", path], capture_output=True, timeout=30)
    err = p.stderr.decode("utf-8", "replace").strip()
    eq((p.returncode, err), (0, ""), "groff %s" % path)
    return re.sub(r".\x08", "", p.stdout.decode("utf-8", "replace"))


@suite.test
def staged_install_has_every_file():
    dest = tmpdir("bdbinst-")
    make_install(DESTDIR=dest, PREFIX="/usr")
    b = os.path.join(dest, "usr/bin/bucketdb")
    check(os.access(b, os.X_OK), "binary not installed executable")
    p = subprocess.run([b, "version"], capture_output=True, timeout=30)
    eq(p.stdout, subprocess.run([BIN, "version"], capture_output=True, timeout=30).stdout,
       "installed binary's version")
    for cmd in [None] + commands():
        page = os.path.join(dest, "usr/share/man/man1",
                            "bucketdb.1" if cmd is None else "bucketdb-%s.1" % cmd)
        check(os.path.exists(page), "no man page for %s: %s" % (cmd or "bucketdb", page))
        text = render_man(page)
        contains(text, "NAME")
        contains(text, "SYNOPSIS")
        contains(text, "bucketdb" if cmd is None else "bucketdb %s" % cmd)
    conf = os.path.join(dest, "etc/bucketdb/bucketdb.conf")
    example = os.path.join(dest, "usr/share/doc/bucketdb/bucketdb.conf.example")
    with open(conf) as f1, open(example) as f2:
        eq(f1.read(), f2.read(), "installed config is the example")
    unit = os.path.join(dest, "usr/lib/systemd/system/bucketdb.service")
    with open(unit) as f:
        text = f.read()
    check(not re.search(r"@[A-Z]+@", text), "unfilled placeholder in the unit")
    for want in ("ExecStart=/usr/bin/bucketdb serve --config /etc/bucketdb/bucketdb.conf "
                 "--data /var/lib/bucketdb", "DynamicUser=yes", "StateDirectory=bucketdb",
                 "LimitNOFILE=", "ProtectSystem=strict", "NoNewPrivileges=yes"):
        contains(text, want, "unit file")
    # The unit's own pre-start check, pointed at the staged config, accepts it.
    pre = re.search(r"^ExecStartPre=(.*)$", text, re.M).group(1).split()
    pre = [b] + [a.replace("/etc/bucketdb", os.path.join(dest, "etc/bucketdb")) for a in pre[1:]]
    p = subprocess.run(pre, capture_output=True, timeout=30)
    eq((p.returncode, p.stdout.strip()), (0, b"configuration ok"), "ExecStartPre %r" % pre)

    # A second install keeps an operator's edited configuration.
    with open(conf, "a") as f:
        f.write("\nlisten = 127.0.0.1:9999\n")
    make_install(DESTDIR=dest, PREFIX="/usr")
    with open(conf) as f:
        contains(f.read(), "listen = 127.0.0.1:9999", "edited config after a second install")


@suite.test
def example_config_covers_every_setting():
    dest = tmpdir("bdbinst-")
    make_install(DESTDIR=dest, PREFIX="/usr/local")  # default prefix: config in PREFIX/etc
    path = os.path.join(dest, "usr/local/etc/bucketdb/bucketdb.conf")
    with open(path) as f:
        lines = f.read().splitlines()
    keys = settings()
    for i, (key, default) in enumerate(keys):
        want = "#%s = %s" % (key, default) if default else "#%s =" % key
        check(want in lines, "example lacks %r (setting %d of %d)" % (want, i + 1, len(keys)))
        at = lines.index(want)
        check(lines[at - 1].startswith("# ") and len(lines[at - 1]) > 12,
              "no help comment above %r" % want)
    # as shipped (all commented out) and with every default uncommented, it is valid and
    # changes nothing
    rc, out, err = run_bin(["serve", "--config", path, "--check-config"])
    eq((rc, out.strip()), (0, "configuration ok"), "check-config of the example: " + err)
    active = tmpdir("bdbconf-") + "/all.conf"
    with open(active, "w") as f:
        for line in lines:
            m = re.match(r"^#([a-z0-9_]+ = .+)$", line)
            f.write((m.group(1) if m else line) + "\n")
    rc, out, err = run_bin(["serve", "--config", active, "--check-config"])
    eq((rc, out.strip()), (0, "configuration ok"), "check-config, defaults uncommented: " + err)
    eq(run_bin(["serve", "--config", active, "--print-config"])[1],
       run_bin(["serve", "--print-config"])[1], "uncommented defaults change nothing")


@suite.test
def unit_passes_systemd_analyze():
    sa = shutil.which("systemd-analyze")
    if not sa:
        print("  SKIPPED this one check: systemd-analyze is not installed")
        return
    # Installed without DESTDIR into a private prefix, so the unit's ExecStart and its
    # Documentation= man pages point at files that exist.
    prefix = tmpdir("bdbprefix-")
    make_install(PREFIX=prefix)
    unit = os.path.join(prefix, "lib/systemd/system/bucketdb.service")
    env = dict(os.environ, MANPATH=os.path.join(prefix, "share/man"))
    p = subprocess.run([sa, "verify", unit], capture_output=True, timeout=60, env=env)
    eq((p.returncode, p.stderr.decode("utf-8", "replace").strip()), (0, ""),
       "systemd-analyze verify")
    # exposure score of the hardening, lower is better; 'OK' is at most 4
    p = subprocess.run([sa, "security", "--offline=true", unit],
                       capture_output=True, timeout=60, env=env)
    out = p.stdout.decode("utf-8", "replace")
    m = re.search(r"Overall exposure level for bucketdb.service: ([0-9.]+)", out)
    check(m, "no exposure level in %r" % out[-500:])
    print("  systemd-analyze security: exposure %s" % m.group(1))
    check(float(m.group(1)) <= 4.0, "exposure %s: over 4 is not OK" % m.group(1))


if __name__ == "__main__":
    suite.main()
