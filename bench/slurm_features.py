"""Measure what newer Slurm releases offer a registration gate, on real daemons (dev clusters
with plain hooks, so what is seen is Slurm's own behaviour). docs/guide.md ("Newer Slurm
features, measured") quotes these figures; tests/cluster/test_slurm_mechanisms.py keeps the
behaviours under test.

    python bench/slurm_features.py                 # everything on 26.05 (about 5 minutes)
    python bench/slurm_features.py --only reboot   # one measurement
    python bench/slurm_features.py --version 22.05 --only reboot_from_controller
    python bench/slurm_features.py --only restd --restd-chroot /tmp/sid-restd
        # slurmrestd is not in the sid chroot the tests use: a copy of it with
        # `apt-get install slurmrestd` (scripts/slurm-chroot.sh's apt options) is needed

Measurements: timeout (HealthCheckTimeout: the kill, registration after the program, >60 s),
reboot (plain and FORCE on a drained idle node; FORCE on a busy one), reboot_from_controller
(a node whose slurmd is gone, controller-side against node-side RebootProgram), action
(scontrol reboot action= with a PowerAction), http (slurmctld /healthz and /metrics/nodes
against scontrol), restd (slurmrestd bulk node update; scontrol hostlist update), unreachable
(how long scontrol takes to give up on an absent controller).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airlock.dev.cluster import DevCluster  # noqa: E402

SEEN = """#!/bin/sh
echo "$(date +%s.%N) $SLURMD_NODENAME start" >> @ROOT@/hc.log
s=$(cat @ROOT@/hc.sleep 2>/dev/null || echo 0); rm -f @ROOT@/hc.sleep
sleep "$s"
echo "$(date +%s.%N) $SLURMD_NODENAME end" >> @ROOT@/hc.log
"""
HOOKS = {"healthcheck": SEEN, "prolog": "#!/bin/sh\nexit 0\n", "epilog": "#!/bin/sh\nexit 0\n"}


class Bench:
    def __init__(self, version: str, restd_chroot: str):
        self.version = version
        self.restd_chroot = restd_chroot

    def cluster(self, **kw) -> DevCluster:
        kw.setdefault("hooks", HOOKS)
        kw.setdefault("health_interval", 3600)
        return DevCluster(tempfile.mkdtemp(prefix="alc-bench-", dir="/tmp"),
                          slurm_version=self.version, **kw)

    @staticmethod
    def done(c: DevCluster) -> None:
        c.stop()
        if not c.leftovers() and not c.leftover_mounts():
            shutil.rmtree(c.root, ignore_errors=True)

    @staticmethod
    def say(what: str) -> None:
        print(what, flush=True)

    # --- HealthCheckTimeout ------------------------------------------------------------------
    def timeout(self) -> None:
        for interval, limit, sleep in ((5, "4", 8), (100, "90", 70), (100, None, 70)):
            self._timeout(interval, limit, sleep)

    def _timeout(self, interval: int, limit: str | None, sleep: int) -> None:
        c = self.cluster(nodes=["node1"], health_interval=interval,
                         slurm_settings={"HealthCheckTimeout": limit})
        try:
            c.write_files()
            (c.root / "hc.sleep").write_text(str(sleep))
            t0 = time.time()
            c.start(wait=False)
            registered = _wait(lambda: (n := c.node("node1")).slurmd_start_time
                               and n.responding, sleep + 30)
            took = time.time() - t0
            log = (c.root / "log" / "slurmd-node1.log").read_text(errors="replace")
            killed = [ln.split("] ", 1)[1] for ln in log.splitlines()
                      if "health_check" in ln]
            self.say(f"timeout: HealthCheckInterval={interval} HealthCheckTimeout="
                     f"{limit or 'unset'}, boot-time program sleeps {sleep} s: node "
                     f"registered at +{took:.1f} s ({'yes' if registered else 'no'}); "
                     f"slurmd: {killed or 'no kill'}")
        finally:
            self.done(c)

    # --- scontrol reboot [FORCE] ---------------------------------------------------------------
    def reboot(self) -> None:
        for force in ((), ("FORCE",)):
            self._reboot(force)

    def _reboot(self, force: tuple[str, ...]) -> None:
        c = self.cluster(nodes=["node1", "node2"])
        try:
            c.start(wait=True)
            c.slurm.drain("node1", "airlock: recover reboot r-1")
            t0 = time.time()
            c.run(["scontrol", "reboot", *force, "reason=airlock: recover reboot r-1",
                   "node1"])
            issued = _wait(lambda: "REBOOT_ISSUED" in c.node("node1").flags, 30)
            self.say(f"reboot: scontrol reboot {' '.join(force) or '(plain)'} of a drained "
                     f"idle node: issued after {time.time() - t0:.1f} s "
                     f"({'yes' if issued else 'never'})")
            job = c.sbatch("sleep 60", "-w", "node2")
            _wait(lambda: c.job(job).get("JobState") == "RUNNING", 30)
            c.run(["scontrol", "reboot", *force, "node2"])
            time.sleep(6)
            self.say(f"reboot: scontrol reboot {' '.join(force) or '(plain)'} of a busy "
                     f"node: after 6 s the node is {c.node('node2').state_text}, its job "
                     f"{c.job(job).get('JobState')} (restarts "
                     f"{c.job(job).get('Restarts', '0')})")
        finally:
            self.done(c)

    # --- reboot_from_controller ----------------------------------------------------------------
    def reboot_from_controller(self) -> None:
        for where in ("slurmd", "slurmctld"):
            self._reboot_from(where)

    def _reboot_from(self, where: str) -> None:
        settings = {"SlurmctldParameters": "reboot_from_controller"} \
            if where == "slurmctld" else {}
        c = self.cluster(nodes=["node1", "node2"], slurm_settings=settings)
        try:
            c.start(wait=True)
            boot = c.node("node1").boot_time
            for n in ("node1", "node2"):
                c.slurm.drain(n, "airlock: recover reboot r-1")
            c.stop_node("node1")
            t0 = time.time()
            c.run(["scontrol", "reboot", "node[1-2]"])
            back = _wait(lambda: (m := c.node("node1")).boot_time != boot and m.responding,
                         90)
            took = f"back after {time.time() - t0:.1f} s" if back else "not back in 90 s"
            n1 = c.node("node1")
            out = c.root / "log" / "reboot.out"
            calls = [ln.split(None, 1)[1] for ln in
                     (out.read_text().splitlines() if out.exists() else [])]
            self.say(f"reboot_from_controller: RebootProgram on {where}, node1's slurmd "
                     f"gone: {took} ({n1.state_text}, reason {n1.reason!r}); program "
                     f"calls: {calls}")
        finally:
            self.done(c)

    # --- scontrol reboot action= ---------------------------------------------------------------
    def action(self) -> None:
        c = self.cluster(nodes=["node1", "node2"])
        try:
            c.write_files()
            c.slurm_settings["PowerAction"] = \
                f'airlock_reboot Location=slurmctld Program="{c.root}/bin/reboot"'
            c.start(wait=True)
            for n in ("node1", "node2"):
                c.slurm.drain(n, f"airlock: recover reboot r-{n}")
            c.stop_node("node2")
            t0 = time.time()
            c.run(["scontrol", "reboot", "action=airlock_reboot", "node[1-2]"])
            back = _wait(lambda: all((m := c.node(n)).responding and "REBOOT" not in
                                     m.state_text and m.state != "DOWN"
                                     for n in ("node1", "node2")), 60)
            calls = (c.root / "log" / "reboot.out").read_text().splitlines()
            took = f"both back after {time.time() - t0:.1f} s" if back else "not back in 60 s"
            self.say(f"action: scontrol reboot action=airlock_reboot (Location=slurmctld), "
                     f"node2's slurmd gone: {took}; reasons "
                     f"{[c.node(n).reason for n in ('node1', 'node2')]}; program calls "
                     f"{[ln.split(None, 1)[1] for ln in calls]}")
        finally:
            self.done(c)

    # --- slurmctld's HTTP endpoints -----------------------------------------------------------
    def http(self) -> None:
        for metrics in ("", "metrics/openmetrics"):
            self._http(metrics)

    def _http(self, metrics: str) -> None:
        c = self.cluster(nodes=["node1", "node2", "node3"],
                         slurm_settings={"MetricsType": metrics or None})
        self.say(f"http: MetricsType={metrics or 'unset'}")
        try:
            c.start(wait=True)
            c.slurm.drain("node2", "airlock: FAIL row_remap gpu0")

            def get(path: str) -> tuple[int | None, float, str]:
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{c.ctld_port}{path}",
                                                timeout=5) as r:
                        body, code = r.read().decode(), r.status
                except urllib.error.HTTPError as exc:
                    body, code = exc.read().decode(), exc.code
                except OSError as exc:
                    body, code = str(exc), None
                return code, (time.perf_counter() - t0) * 1000, body

            for path in ("/healthz", "/readyz", "/metrics/nodes"):
                code, _, body = get(path)
                ms = min(get(path)[1] for _ in range(5))
                names = sorted({ln.split("{")[0].split()[0] for ln in body.splitlines()
                                if ln.strip() and not ln.startswith("#")})
                per_node = sorted({n for n in names if n.startswith("slurm_node_")})
                extra = f"; per-node series: {', '.join(per_node) or 'none'}; the body: " \
                    f"{len(body)} bytes{', ' + repr(body[:40]) if len(body) < 40 else ''}" \
                    if path.startswith("/metrics") else ""
                self.say(f"http: GET {path}: {code} in {ms:.1f} ms (best of 5){extra}")
            for argv in (["scontrol", "ping"], ["scontrol", "-o", "--future", "show", "node"]):
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    c.run(argv)
                    times.append((time.perf_counter() - t0) * 1000)
                self.say(f"http: {' '.join(argv)}: {min(times):.1f} ms (best of 5)")
        finally:
            self.done(c)

    # --- slurmrestd ------------------------------------------------------------------------------
    def restd(self) -> None:
        n = 40
        future = [f"f{i:02d}" for i in range(n)]
        hostlist = ",".join(future)
        c = self.cluster(nodes=["node1"], future=future)
        try:
            c.start(wait=True)
            t0 = time.perf_counter()
            c.run(["scontrol", "update", f"nodename={hostlist}", "state=drain",
                   "reason=airlock: pending standard check new"])
            one = (time.perf_counter() - t0) * 1000
            c.run(["scontrol", "update", f"nodename={hostlist}", "state=undrain"])
            t0 = time.perf_counter()
            for name in future:
                c.run(["scontrol", "update", f"nodename={name}", "state=drain",
                       "reason=airlock: pending standard check new"])
            each = (time.perf_counter() - t0) * 1000
            self.say(f"restd: scontrol update of {n} nodes: one call with the hostlist "
                     f"{one:.0f} ms, {n} calls {each:.0f} ms")
        finally:
            self.done(c)
        if not self.restd_chroot:
            self.say("restd: slurmrestd not measured (--restd-chroot: a copy of the sid chroot "
                     "with slurmrestd installed)")
            return
        c = self.cluster(nodes=["node1"], future=future, chroot=self.restd_chroot)
        try:
            c.start(wait=True)
            sock = c.root / "run" / "restd.sock"
            for path in (c.root, c.root / "munge", c.root / "run"):
                os.chmod(path, 0o755 if path != c.root / "run" else 0o777)
            for user in ("root", "65534"):
                c._spawn(["slurmrestd", *([] if user == "root" else ["-u", user, "-g", user]),
                          "-a", "rest_auth/local", "-s", "openapi/slurmctld", f"unix:{sock}"],
                         f"slurmrestd-{user}")
                if _wait(sock.exists, 10):
                    break
                log = (c.root / "log" / f"slurmrestd-{user}.out").read_text().strip()
                self.say(f"restd: as {user}: {log.splitlines()[-1] if log else 'no socket'}")
            body = {"node_names": future, "state": ["DRAIN"],
                    "reason": "airlock: pending standard check new"}
            # local auth serves only the daemon's own uid: ask as that user
            code = f"{POST}\nprint(json.dumps(post({str(sock)!r}, " \
                   f"'/slurm/v0.0.45/nodes/', {body!r})))"
            out = subprocess.run(["/usr/bin/python3", "-c", code], user=65534, group=65534,
                                 capture_output=True, text=True, cwd="/", timeout=30)
            status, ms, text = json.loads(out.stdout) if out.returncode == 0 else \
                (None, 0, out.stderr)
            errors = json.loads(text).get("errors") if status else text
            drained = sum(m.drained for m in c.slurm.nodes(future))
            self.say(f"restd: POST /slurm/v0.0.45/nodes/ ({n} nodes) as the daemon's user: "
                     f"{status} in {ms:.0f} ms, {drained} drained; errors: {errors}")
        finally:
            self.done(c)

    # --- an absent controller ------------------------------------------------------------------
    def unreachable(self) -> None:
        c = self.cluster(nodes=["node1"])
        try:
            c.start(wait=True)
            c.stop_controller()
            for argv in (["scontrol", "-o", "show", "node", "node1"], ["scontrol", "ping"]):
                t0 = time.time()
                proc = subprocess.run([c.client("scontrol"), *argv[1:]], env=c.env(),
                                      capture_output=True, text=True, timeout=60)
                self.say(f"unreachable: {' '.join(argv)} with slurmctld stopped: exit "
                         f"{proc.returncode} after {time.time() - t0:.1f} s")
        finally:
            self.done(c)


# One HTTP POST over a unix socket, as a program of its own: it runs as slurmrestd's user.
POST = """
import json, socket, time
from http.client import HTTPConnection

def post(sock, path, body):
    class Conn(HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(sock)
    conn = Conn("localhost")
    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, (time.perf_counter() - t0) * 1000, resp.read().decode()
"""


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # the daemons are still coming up
            pass
        time.sleep(0.2)
    return False


MEASUREMENTS = ("timeout", "reboot", "reboot_from_controller", "action", "http", "restd",
                "unreachable")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="26.05", choices=("22.05", "24.11", "26.05"))
    ap.add_argument("--only", action="append", choices=MEASUREMENTS)
    ap.add_argument("--restd-chroot", default="")
    args = ap.parse_args()
    bench = Bench(args.version, args.restd_chroot)
    print(f"Slurm {args.version}, dev clusters in /tmp (plain hooks)", flush=True)
    for name in args.only or MEASUREMENTS:
        getattr(bench, name)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
