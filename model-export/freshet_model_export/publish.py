"""The export protocol both exporters share: an up-to-date export is only re-validated; otherwise
the model is written into a temporary sibling directory under a lock, validated there, and renamed
into place, so a reader of the model directory sees the old export or the new one, never a part of
either. Failures map to exit statuses: 2 bad input or environment, 1 a failed validation."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from .common import TOKENIZER_FILES, CheckFailed, UsageError, log, sha256_file


def fsync_dir_files(d: Path) -> None:
    for p in d.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def export_is_current(out: Path, source_file: Path, exporter_version: int) -> bool:
    """Whether `out` holds a complete export of `source_file` by this exporter version, with
    model.onnx as freshet-model.json describes it."""
    try:
        meta = json.loads((out / "freshet-model.json").read_text())
        return (meta.get("exporter_version") == exporter_version
                and meta.get("source_sha256") == sha256_file(source_file)
                and meta.get("sha256") == sha256_file(out / "model.onnx")
                and all((out / f).is_file() for f in TOKENIZER_FILES + ("freshet-check.json",)))
    except (OSError, ValueError):
        return False


def remove_stale_temp_dirs(out: Path) -> None:
    """Removes .<name>.tmp-<pid>-* / .<name>.old-<pid> left by killed runs (pid no longer alive)."""
    for p in out.parent.glob(f".{out.name}.*-*"):
        kind, _, rest = p.name[len(out.name) + 2 :].partition("-")
        if kind not in ("tmp", "old") or not p.is_dir():
            continue
        try:
            pid = int(rest.split("-")[0])
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        log(f"removing {p} left by an interrupted run")
        shutil.rmtree(p, ignore_errors=True)


def publish(tmp: Path, out: Path) -> None:
    """Renames tmp into place; an existing directory is moved aside first and removed after."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        if old is not None:
            os.rename(old, out)
        raise
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def run_exporter(run) -> int:
    """Runs an exporter's main body, mapping its failures to exit statuses (2: bad input or
    environment, 1: a failed validation)."""
    try:
        return run()
    except UsageError as e:
        log(f"error: {e}")
        return 2
    except CheckFailed as e:
        log(f"VALIDATION FAILED: {e}")
        return 1


def check_or_export(out: Path, args, *, is_up_to_date, export, check) -> int:
    """`--check`: validate the existing export; otherwise export (see export_atomically)."""
    if args.check:
        if not out.is_dir():
            raise UsageError(f"{out} does not exist; run without --check to export")
        log(f"OK: {out} is valid {json.dumps(check(out))}")
        return 0
    return export_atomically(out, force=args.force, validate_existing=not args.no_check,
                             is_up_to_date=is_up_to_date, export=export, check=check)


def export_atomically(out: Path, *, force: bool, validate_existing: bool, is_up_to_date, export,
                      check) -> int:
    """The export protocol shared by the exporters: skip an up-to-date target (re-validating it
    unless told not to), else export into a temporary sibling directory under a lock, validate it
    and rename it into place. Prints the model directory on stdout; returns the exit status."""
    if not force and is_up_to_date(out):
        log(f"{out} is up to date (use --force to re-export)")
        if validate_existing:
            log(f"OK: {json.dumps(check(out))}")
        print(out)
        return 0

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one export of this directory at a time
        if not force and is_up_to_date(out):  # another run finished while we waited
            log(f"{out} was exported meanwhile")
            print(out)
            return 0
        remove_stale_temp_dirs(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
        try:
            t0 = time.time()
            export(tmp)
            log(f"exported in {time.time() - t0:.1f}s; validating")
            res = check(tmp)
            fsync_dir_files(tmp)
            os.chmod(tmp, 0o755)
            publish(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log(f"OK: wrote {out} {json.dumps(res)}")
    print(out)
    return 0

