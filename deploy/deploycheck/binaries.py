"""The config files of the images, compose and the ConfigMap, read by the real binaries: each
binary is started on each file (the container paths and listen addresses rewritten to this
machine's, nothing else changed; a clean environment, as in the image) until it has read and
checked the file and loaded what it names: the query node and the ingest service until /healthz
answers, the pipeline until it has loaded the model, checked the chunk budget and goes on to the
broker (which is not there). The images' HEALTHCHECK script is run against the live query node."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import Layout, Report

# Rewritten in each config: the container paths of the images and their listen addresses.
LISTENS = {"pipeline": "0.0.0.0:9464", "query": "0.0.0.0:8080", "ingest": "0.0.0.0:8090"}
PIPELINE_READ_CONFIG = "checking the topics on"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find(binary: str, bin_dirs: list[Path]) -> Path | None:
    for d in bin_dirs:
        p = d / binary
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError:
        return 0, ""


class Service:
    """One binary started on one config file, stopped (its own process only) when done."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.log = log
        self.out = log.open("w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        self.out.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


def wait_until(cond, svc: Service, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if not svc.alive():
            return cond()
        time.sleep(0.3)
    return False


def rewrite(text: str, assets: dict[str, Path], tmp: Path, ports: dict[str, int]) -> tuple[str, list[str]]:
    """The config as it reads on this machine, and the container paths it did not name."""
    absent = []
    subs = {
        "/opt/freshet/model": str(assets["model"]),
        "/opt/freshet/dict/ipadic": str(assets["dict"]),
        "/var/lib/freshet": str(tmp / "state"),
        "/run/secrets/freshet": str(tmp / "secrets"),
    }
    # Every interface, as in a container (a service refuses some settings there only); asked on
    # 127.0.0.1.
    subs.update({addr: f"0.0.0.0:{ports[name]}" for name, addr in LISTENS.items()})
    for old, new in subs.items():
        if old not in text and old != "/run/secrets/freshet":
            absent.append(old)
        text = text.replace(old, new)
    return text, absent


def check_config(label: str, text: str, bins: dict[str, Path], assets: dict[str, Path], report: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="freshet-deploycheck-") as d:
        tmp = Path(d)
        (tmp / "state").mkdir()
        (tmp / "secrets").mkdir()
        for key in ("query-app", "ingest-writer"):
            (tmp / "secrets" / key).write_text(f"deploycheck-{key}-0123456789abcdef\n")
        ports = {name: free_port() for name in LISTENS}
        config, absent = rewrite(text, assets, tmp, ports)
        for path in absent:
            report.error(f"{label}: does not set {path} (where the images keep it)")
        cfg = tmp / "freshet.toml"
        cfg.write_text(config)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "FRESHET_HOME": str(tmp / "state"),
            "FRESHET_CONFIG": str(cfg),
            "ORT_DYLIB_PATH": str(assets["ort"]),
            "FRESHET_LOG": "info",
            "FRESHET_QUERY_APP_KEY": "deploycheck-query-app-0123456789abcdef",
            "FRESHET_INGEST_WRITER_KEY": "deploycheck-ingest-writer-0123456789abcdef",
        }
        # Without writer keys or an issuer the ingest service must refuse to listen beyond
        # loopback (docs/ingest.md): the images' own file has none, on purpose.
        ingest_open = "[[ingest.keys]]" not in text and "[ingest.jwt]" not in text
        for name, argv, until in (
            ("query", [str(bins["freshet-query"]), "serve"], "/healthz"),
            ("ingest", [str(bins["freshet-ingest"]), "serve"], "/healthz"),
            ("pipeline", [str(bins["freshet"]), "run"], None),
        ):
            svc = Service(argv, env, tmp / f"{name}.log")
            binary = Path(argv[0]).name
            try:
                url = f"http://127.0.0.1:{ports[name]}"
                if name == "ingest" and ingest_open:
                    svc.proc.wait(timeout=30)
                    refused = svc.proc.returncode != 0 and "beyond loopback" in svc.tail()
                    if report.check(refused, f"{label}: {binary} without keys did not refuse:\n{svc.tail()}"):
                        report.ok(f"{label}: {binary} refuses to serve unidentified writers beyond loopback")
                    continue
                if until:
                    ok = wait_until(lambda u=url + until: get(u)[0] == 200, svc, 90)
                else:
                    ok = wait_until(lambda s=svc: PIPELINE_READ_CONFIG in s.log.read_text(errors="replace"), svc, 120)
                if not ok:
                    report.error(f"{label}: {binary} did not take it:\n{svc.tail()}")
                    continue
                report.ok(f"{label}: read and checked by the real {binary}")
                if name == "query":
                    healthcheck(ports[name], report)
            except subprocess.TimeoutExpired:
                report.error(f"{label}: {binary} without keys kept running beyond loopback:\n{svc.tail()}")
            finally:
                svc.stop()


def healthcheck(port: int, report: Report) -> None:
    """deploy/docker/healthcheck.sh against the live node, and against a port nobody serves."""
    script = Path(__file__).resolve().parent.parent / "docker" / "healthcheck.sh"
    live = subprocess.run(["bash", str(script), str(port), "/healthz"], capture_output=True, text=True, check=False)
    dead = subprocess.run(
        ["bash", str(script), str(free_port()), "/healthz"], capture_output=True, text=True, check=False
    )
    missing = subprocess.run(
        ["bash", str(script), str(port), "/no-such-path"], capture_output=True, text=True, check=False
    )
    if live.returncode == 0 and dead.returncode != 0 and missing.returncode != 0:
        report.ok("deploy/docker/healthcheck.sh: 0 on the live /healthz, non-zero on a closed port and on a 404")
    else:
        report.error(
            "deploy/docker/healthcheck.sh: live "
            f"{live.returncode} {live.stderr.strip()}, closed port {dead.returncode}, 404 {missing.returncode}"
        )


def assets_here(freshet_home: Path) -> dict[str, Path] | None:
    """The model, dictionary and ONNX Runtime of the local install, standing in for the image's."""
    ort = os.environ.get("ORT_DYLIB_PATH", "")
    found = {
        "model": freshet_home / "models" / "all-MiniLM-L6-v2-int8",
        "dict": freshet_home / "dict" / "ipadic",
        "ort": Path(ort) if ort else Path("/nonexistent"),
    }
    if all(p.exists() for p in found.values()):
        return found
    return None


def configs(layout: Layout, k8s_text: str | None) -> list[tuple[str, str]]:
    out = [
        ("deploy/docker/freshet.toml", (layout.docker / "freshet.toml").read_text()),
        ("deploy/compose/freshet.toml", (layout.compose_dir / "freshet.toml").read_text()),
    ]
    if k8s_text is not None:
        out.append(("deploy/k8s/configmap.yaml freshet.toml", k8s_text))
    return out
