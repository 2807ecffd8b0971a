"""The Dockerfiles of deploy/docker: what they copy, the toolchain and pins they name, and a
mirror of each runtime stage: every shared library the real binary (and the ONNX Runtime the
image ships) loads must come from a Debian package that stage installs."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import IMAGES, Layout, Report


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


@dataclass
class Dockerfile:
    path: Path
    args: dict[str, str]
    stages: list[Stage]

    @property
    def runtime(self) -> Stage:
        return self.stages[-1]


def parse(path: Path) -> Dockerfile:
    """Instructions (continuation lines joined, comments dropped), the global ARG defaults and
    the stages."""
    lines: list[str] = []
    current = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            stages.append(Stage(name=name, base=words[0]))
        elif not stages:
            if keyword == "ARG" and "=" in rest:
                k, v = rest.split("=", 1)
                args[k] = v
        else:
            stages[-1].instructions.append((keyword, rest))
    return Dockerfile(path=path, args=args, stages=stages)


def resolve(df: Dockerfile, text: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: df.args.get(m.group(1), m.group(0)), text)


def apt_packages(stage: Stage) -> set[str]:
    """The packages of the stage's `apt-get install` commands."""
    pkgs: set[str] = set()
    for run in stage.all("RUN"):
        for cmd in re.split(r"&&|;", run):
            words = shlex.split(cmd)
            if len(words) >= 2 and words[0] == "apt-get" and words[1] == "install":
                pkgs.update(w for w in words[2:] if not w.startswith("-"))
    return pkgs


def dockerignore(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def ignored(rel: str, patterns: list[str]) -> bool:
    for pat in patterns:
        pat = pat.removeprefix("**/")
        if fnmatch.fnmatch(rel, pat) or rel.startswith(pat.rstrip("/") + "/"):
            return True
    return False


def toolchain(root: Path) -> str:
    m = re.search(r'^channel\s*=\s*"([^"]+)"', (root / "rust-toolchain.toml").read_text(), re.MULTILINE)
    return m.group(1) if m else ""


def install_pins(root: Path) -> dict[str, str]:
    """name -> version of every "name==version" deploy/install.sh pins."""
    text = (root / "deploy" / "install.sh").read_text()
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r'"([A-Za-z0-9_.-]+)==([^"\s]+)"', text)}


def requirement_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def check_static(layout: Layout, report: Report) -> None:
    """Everything about the Dockerfiles that needs no binary."""
    root = layout.root
    patterns = dockerignore(root)
    report.check(bool(patterns), ".dockerignore: missing or empty at the repository root")
    for must in ("target", ".git", "deploy/compose/.env"):
        report.check(must in patterns, f".dockerignore: does not exclude {must}")
    channel = toolchain(root)
    pins = install_pins(root)
    for file, binary, port in IMAGES.values():
        path = layout.docker / file
        if not report.check(path.exists(), f"deploy/docker/{file}: missing"):
            continue
        df = parse(path)
        where = f"deploy/docker/{file}"
        build = next((s for s in df.stages if s.name == "build"), None)
        if report.check(build is not None, f"{where}: no build stage"):
            base = resolve(df, build.base)
            report.check(base.startswith(f"rust:{channel}-"), f"{where}: builder {base} is not Rust {channel}")
            report.check(
                any(f"RUSTUP_TOOLCHAIN={channel}" in e for e in build.all("ENV")),
                f"{where}: the build stage does not set RUSTUP_TOOLCHAIN={channel} (rust-toolchain.toml)",
            )
            runs = " ".join(build.all("RUN"))
            report.check(
                "--release --locked -p freshet-" in runs and f"--bin {binary}" in runs,
                f"{where}: the build stage does not build {binary} with --release --locked",
            )
        names = {s.name for s in df.stages}
        for stage in df.stages:
            base = resolve(df, stage.base)
            if base in names:
                continue
            report.check(":" in base and not base.endswith(":latest"), f"{where}: image {base} has no pinned tag")
            for copy in stage.all("COPY"):
                words = shlex.split(copy)
                if any(w.startswith("--from") for w in words):
                    continue
                for src in [w for w in words if not w.startswith("--")][:-1]:
                    report.check((root / src).exists(), f"{where}: COPY source {src} does not exist")
                    if src != ".":
                        report.check(not ignored(src, patterns), f"{where}: COPY source {src} is in .dockerignore")
        rt = df.runtime
        user = (rt.all("USER") or ["root"])[-1].split(":")[0]
        report.check(user not in ("root", "0"), f"{where}: the runtime stage runs as root")
        report.check(bool(rt.all("HEALTHCHECK")), f"{where}: no HEALTHCHECK")
        report.check(str(port) in " ".join(rt.all("EXPOSE")), f"{where}: does not EXPOSE {port}")
        report.check(
            f'"/usr/local/bin/{binary}"' in " ".join(rt.all("ENTRYPOINT")), f"{where}: ENTRYPOINT is not {binary}"
        )
        report.check(
            f'"{port}"' in " ".join(rt.all("HEALTHCHECK")), f"{where}: the HEALTHCHECK does not ask port {port}"
        )
        if any("--from=ort" in c for c in rt.all("COPY")):
            ort = layout.docker / "onnxruntime.txt"
            want = pins.get("onnxruntime")
            have = requirement_pins(ort).get("onnxruntime") if ort.exists() else None
            report.check(have == want, f"deploy/docker/onnxruntime.txt pins onnxruntime {have}, install.sh {want}")
        report.ok(f"{where}: stages, copies, toolchain {channel}, user, HEALTHCHECK, EXPOSE {port}")
    req = layout.docker / "model-requirements.txt"
    if report.check(req.exists(), "deploy/docker/model-requirements.txt: missing"):
        for pkg, version in requirement_pins(req).items():
            report.check(
                pins.get(pkg) == version,
                f"deploy/docker/model-requirements.txt pins {pkg}=={version}, deploy/install.sh {pins.get(pkg)}",
            )


def hadolint(layout: Layout, tools: dict[str, str], report: Report) -> None:
    files = sorted(str(p) for p in layout.docker.glob("*.Dockerfile"))
    cfg = layout.docker / "hadolint.yaml"
    proc = subprocess.run(
        [tools["hadolint"], "--no-color", "--config", str(cfg), *files], capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        report.ok(f"hadolint: {len(files)} Dockerfiles clean")
    else:
        report.error("hadolint:\n" + (proc.stdout + proc.stderr).strip())


def debian_codename(image: str) -> str | None:
    m = re.match(r"debian:(\d+)", image)
    return {"12": "bookworm", "13": "trixie"}.get(m.group(1)) if m else None


def ldd(path: Path) -> tuple[list[str], list[str]]:
    """(resolved library paths, libraries not found)."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    found, missing = [], []
    for line in out.splitlines():
        line = line.strip()
        if "not found" in line:
            missing.append(line.split()[0])
        elif "=>" in line:
            target = line.split("=>", 1)[1].split("(")[0].strip()
            if target:
                found.append(target)
        elif line.startswith("/"):
            found.append(line.split()[0])
    return found, missing


def owner(lib: str) -> str | None:
    """The Debian package that ships `lib` (dpkg -S), trying the merged-/usr spellings."""
    candidates = [lib, os.path.realpath(lib)]
    for c in list(candidates):
        candidates.append(c[4:] if c.startswith("/usr/") else "/usr" + c)
    for c in candidates:
        proc = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return proc.stdout.split(":", 1)[0].strip()
    return None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_runtime_libraries(layout: Layout, bins: dict[str, Path], ort: Path | None, report: Report) -> None:
    """The runtime stage mirrored on this machine: ldd of the real binary (and of the ONNX Runtime
    for the images that ship it), each library mapped to its Debian package."""
    release = {}
    try:
        release = dict(ln.split("=", 1) for ln in Path("/etc/os-release").read_text().splitlines() if "=" in ln)
    except OSError:
        pass
    host = release.get("VERSION_CODENAME", "").strip('"')
    for file, binary, _port in IMAGES.values():
        df = parse(layout.docker / file)
        where = f"deploy/docker/{file}"
        codename = debian_codename(resolve(df, df.runtime.base))
        if codename != host:
            report.warn(f"{where}: runtime Debian {codename}, this machine {host or 'not Debian'}: ldd mirror skipped")
            continue
        installed = apt_packages(df.runtime)
        objects = []
        if binary in bins:
            objects.append(bins[binary])
        else:
            report.warn(f"{where}: no {binary} binary here: its libraries were not checked")
        ships_ort = any("--from=ort" in c for c in df.runtime.all("COPY"))
        if ships_ort:
            if ort is None:
                report.warn(f"{where}: no ONNX Runtime here (ORT_DYLIB_PATH): its libraries were not checked")
            else:
                want = re.search(r"([0-9a-f]{64})  /out/lib/libonnxruntime", path_text(df.path))
                report.check(
                    bool(want) and want.group(1) == sha256(ort),
                    f"{where}: the checksum of libonnxruntime differs from {ort}'s",
                )
                objects.append(ort)
        for obj in objects:
            found, missing = ldd(obj)
            report.check(not missing, f"{where}: {obj.name} needs libraries not found here: {missing}")
            for lib in found:
                if "linux-vdso" in lib:
                    continue
                pkg = owner(lib)
                if pkg is None:
                    report.error(f"{where}: {obj.name} loads {lib}, which no Debian package ships")
                elif pkg not in installed:
                    report.error(
                        f"{where}: {obj.name} loads {lib} from {pkg}, which the runtime stage does not install"
                    )
            report.ok(f"{where}: every library {obj.name} loads is installed by the runtime stage ({len(found)})")


def path_text(path: Path) -> str:
    return path.read_text()
