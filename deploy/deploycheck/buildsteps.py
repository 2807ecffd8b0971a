"""--build-steps: the Dockerfiles' asset stages run here, from their own text. The `ort` and
`model` stages' RUN commands (and the dictionary step of the `build` stage) are taken out of the
pipeline Dockerfile and run with the image's paths mapped into a temporary directory (`/tmp/`,
`/out/`), the venv's `pip` and `python` first on PATH, the repository as `/src`. What they
produce is laid out as the runtime stage copies it (`/opt/freshet/lib`, `model`, `dict`), and
the binaries' config checks then load those files instead of the local install's. Not mirrored:
the `pip install` of the model stage (the venv holds the same pins, checked statically), the
`apt-get` steps, and the release build (the binaries checked are the ones built here)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from . import IMAGES, Layout, Report
from .dockerfiles import Dockerfile, Stage, parse, sha256

ASSET_STAGES = ("ort", "model")


def same_assets(layout: Layout, report: Report) -> Dockerfile:
    """The pipeline and query images build their assets with the same stages, word for word."""
    pipeline = parse(layout.docker / IMAGES["pipeline"][0])
    query = parse(layout.docker / IMAGES["query"][0])
    for name in ASSET_STAGES:
        a = next((s.instructions for s in pipeline.stages if s.name == name), None)
        b = next((s.instructions for s in query.stages if s.name == name), None)
        report.check(
            a is not None and a == b, f"deploy/docker: the {name} stages of the pipeline and query images differ"
        )
    return pipeline


def mapped(text: str, tmp: Path, venv_python: Path) -> str:
    return (
        text.replace("/usr/local/bin/python", str(venv_python))
        .replace("/tmp/", f"{tmp}/tmp/")
        .replace("/out/", f"{tmp}/out/")
    )


def run_stage(stage: Stage, df: Dockerfile, root: Path, tmp: Path, venv_bin: Path, report: Report) -> bool:
    # the caller's environment (proxies, pip's index) without freshet's own settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHET_")}
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    for kw, args in stage.instructions:
        if kw == "ARG" and "=" in args:
            k, v = args.split("=", 1)
            env[k] = v
    for kw, args in stage.instructions:
        if kw == "COPY" and "--from" not in args:
            src, dst = shlex.split(args)[-2:]
            if not dst.startswith("/tmp/"):
                continue  # into WORKDIR /src: the repository itself
            target = Path(mapped(dst, tmp, venv_bin / "python"))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / src, target)
        if kw != "RUN":
            continue
        if args.startswith("pip install"):
            report.warn(f"{stage.name} stage: `{args}` not run here (the venv holds the same pins)")
            continue
        cmd = mapped(args, tmp, venv_bin / "python")
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            report.error(f"the {stage.name} stage's RUN failed here ({proc.returncode}):\n{tail}")
            return False
    report.ok(f"deploy/docker: the {stage.name} stage's commands ran here")
    return True


def ja_dict(build: Stage, root: Path, tmp: Path, tools_bin: Path | None, report: Report) -> None:
    """The build stage's dictionary step, on Debian's mecab-ipadic as that stage installs it."""
    steps = [c.strip() for r in build.all("RUN") for c in r.split("&&") if "freshet-tools ja-dict" in c]
    if not report.check(len(steps) == 1, "deploy/docker: the build stage has no single `freshet-tools ja-dict` step"):
        return
    if tools_bin is None:
        report.warn("no freshet-tools binary here: the dictionary step was not run")
        return
    deb = tmp / "deb"
    deb.mkdir()
    got = subprocess.run(["apt-get", "download", "mecab-ipadic"], cwd=deb, capture_output=True, text=True, check=False)
    files = list(deb.glob("mecab-ipadic_*.deb"))
    if got.returncode != 0 or not files:
        report.warn(
            f"apt-get download mecab-ipadic failed here: the dictionary step was not run ({got.stderr.strip()})"
        )
        return
    subprocess.run(["dpkg-deb", "-x", str(files[0]), str(deb / "x")], check=True)
    cmd = mapped(steps[0], tmp, Path("/nonexistent")).replace(
        "target/release/freshet-tools", shlex.quote(str(tools_bin))
    )
    cmd = cmd.replace("/usr/share/mecab/dic/ipadic", str(deb / "x" / "usr/share/mecab/dic/ipadic"))
    proc = subprocess.run(["bash", "-c", cmd], cwd=root, capture_output=True, text=True, check=False)
    if report.check(proc.returncode == 0, f"the build stage's dictionary step failed here:\n{proc.stderr[-2000:]}"):
        report.ok(f"deploy/docker: the build stage's dictionary step ran here ({files[0].name})")


def mirror(layout: Layout, tmp: Path, tools_bin: Path | None, report: Report) -> dict[str, Path] | None:
    """Runs the asset stages into `tmp`; returns the image's assets as laid out here, or None."""
    venv_bin = Path(sys.executable).parent
    df = same_assets(layout, report)
    stages = {s.name: s for s in df.stages}
    for name in ASSET_STAGES:
        if not run_stage(stages[name], df, layout.root, tmp, venv_bin, report):
            return None
    build = stages.get("build")
    if build is not None:
        ja_dict(build, layout.root, tmp, tools_bin, report)
    out = tmp / "out"
    lib = out / "lib" / "libonnxruntime.so.1.31.1"
    model = out / "model"
    report.check(lib.is_file(), "the ort stage left no /out/lib/libonnxruntime.so.1.31.1")
    meta_path = model / "freshet-model.json"
    if not report.check(meta_path.is_file(), "the model stage left no /out/model/freshet-model.json"):
        return None
    meta = json.loads(meta_path.read_text())
    report.check(
        meta.get("sha256") == sha256(model / "model.onnx"), "the model stage's model.onnx differs from its manifest"
    )
    home = Path(os.environ.get("FRESHET_HOME") or Path.home() / ".freshet")
    args = dict(a.split("=", 1) for kw, a in stages["model"].instructions if kw == "ARG" and "=" in a)
    local = home / "models" / args.get("MODEL", "") / "freshet-model.json"
    if local.is_file():
        same = json.loads(local.read_text()).get("sha256") == meta.get("sha256")
        if report.check(
            same, f"the model stage's export differs from {local.parent}'s: the export is not reproducible"
        ):
            report.ok("the model stage's export is byte for byte the local install's (reproducible)")
    dictionary = out / "dict" / "ipadic"
    assets = {"model": model, "ort": lib, "dict": dictionary}
    if not (dictionary / "metadata.json").is_file():
        fallback = home / "dict" / "ipadic"
        report.warn(f"the configs load the local dictionary {fallback}, not one built by the image's step")
        assets["dict"] = fallback
    return assets
