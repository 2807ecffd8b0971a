"""python -m deploycheck [--root DIR] [--bin-dir DIR]... [--require-binaries | --no-binaries] [--self-test]

Run by deploy/validate-deploy.sh (which finds the validators in the freshet venv). Exit 0: every
check passed (warnings name what was not checked); 1: a check failed; 2: a validator is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import Layout, Report, binaries, buildsteps, compose, dockerfiles, k8s, k8s_stack, selftest

TOOLS = ("hadolint", "check-jsonschema", "kubernetes-validate")


def find_tools() -> dict[str, str] | None:
    venv_bin = Path(sys.executable).parent
    found = {}
    for tool in TOOLS:
        path = venv_bin / tool
        found[tool] = str(path) if path.exists() else (shutil.which(tool) or "")
    missing = [t for t, p in found.items() if not p]
    if missing:
        print(f"validate-deploy: {', '.join(missing)} not found; deploy/install.sh installs them", file=sys.stderr)
        return None
    return found


def guarded(what: str, check, *args) -> None:
    """A file too broken for a check to read fails that check (its schema errors say why)."""
    report = args[-1]
    try:
        check(*args)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
        report.error(f"{what}: cannot be read for its references ({type(e).__name__}: {e})")


def static(layout: Layout, tools: dict[str, str], report: Report) -> None:
    guarded("deploy/docker", dockerfiles.check_static, layout, report)
    dockerfiles.hadolint(layout, tools, report)
    compose.schema(layout, tools, report)
    guarded("deploy/compose/compose.yaml", compose.check, layout, report)
    k8s.schema(layout, tools, report)
    guarded("deploy/k8s", k8s.check, layout, report)
    k8s_stack.schema(layout, tools, report)
    guarded("deploy/k8s-stack", k8s_stack.check, layout, report)


def with_binaries(
    layout: Layout, bin_dirs: list[Path], require: bool, report: Report, assets: dict[str, Path] | None = None
) -> None:
    names = ("freshet", "freshet-query", "freshet-ingest")
    bins = {n: p for n in names if (p := binaries.find(n, bin_dirs))}
    home = Path(os.environ.get("FRESHET_HOME") or Path.home() / ".freshet")
    assets = assets or binaries.assets_here(home)
    ort = assets["ort"] if assets else None
    dockerfiles.check_runtime_libraries(layout, bins, ort, report)
    missing = [n for n in names if n not in bins]
    if missing or assets is None:
        where = ", ".join(map(str, bin_dirs)) or "(--no-binaries)"
        what = f"no {', '.join(missing)} in {where}" if missing else ""
        if assets is None:
            what += ("; " if what else "") + f"no model, dictionary or ORT_DYLIB_PATH under {home}"
        (report.error if require else report.warn)(f"config files not read by the binaries: {what}")
        return
    for label, text in binaries.configs(layout, k8s.config_text(layout)):
        binaries.check_config(label, text, bins, assets, report)


def print_report(report: Report) -> None:
    for line in report.passed:
        print(f"ok    {line}")
    for line in report.warnings:
        print(f"NOTE  {line}")
    for line in report.errors:
        print(f"FAIL  {line}")


def main() -> int:
    ap = argparse.ArgumentParser(prog="validate-deploy")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    ap.add_argument("--bin-dir", type=Path, action="append", default=[], help="where the built binaries are")
    ap.add_argument("--require-binaries", action="store_true", help="fail instead of skipping the binary checks")
    ap.add_argument("--no-binaries", action="store_true", help="only the checks that need no built binary")
    ap.add_argument(
        "--build-steps",
        action="store_true",
        help="run the Dockerfiles' ort, model and dictionary steps here (PyPI, Debian) and check with their output",
    )
    ap.add_argument("--self-test", action="store_true", help="break each file on purpose: every break must fail")
    args = ap.parse_args()
    tools = find_tools()
    if tools is None:
        return 2
    root = args.root.resolve()
    bin_dirs = [] if args.no_binaries else args.bin_dir or [root / "target" / "release", root / "target" / "debug"]
    if args.self_test:
        return selftest.run(root, tools, bin_dirs, static, with_binaries)
    report = Report()
    layout = Layout(root)
    static(layout, tools, report)
    with tempfile.TemporaryDirectory(prefix="freshet-buildsteps-") as tmp:
        assets = None
        if args.build_steps:
            assets = buildsteps.mirror(layout, Path(tmp), binaries.find("freshet-tools", bin_dirs), report)
        with_binaries(layout, bin_dirs, args.require_binaries, report, assets)
    print_report(report)
    print(
        f"validate-deploy: {len(report.passed)} passed, {len(report.errors)} failed"
        f" ({len(report.warnings)} notes: not checked here)"
    )
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
