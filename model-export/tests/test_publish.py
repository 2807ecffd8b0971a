"""The export protocol: publish atomically, never leave a half-written or unvalidated directory
where a reader looks, clean up after killed runs."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from freshet_model_export.common import TOKENIZER_FILES, CheckFailed, UsageError, sha256_file, write_json
from freshet_model_export.publish import (
    check_or_export,
    export_atomically,
    export_is_current,
    remove_stale_temp_dirs,
    run_exporter,
)


def writer(text):
    def export(tmp):
        (tmp / "model.onnx").write_text(text)
    return export


def siblings(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name != f".{out.name}.lock")


def test_a_new_export_is_validated_then_renamed_into_place(tmp_path, capsys):
    out = tmp_path / "models" / "m"
    seen = []

    def check(d):
        seen.append((d, (d / "model.onnx").read_text()))
        assert not out.exists()  # validated before anyone can see it
        return {"ok": 1}

    assert export_atomically(out, force=False, validate_existing=True, is_up_to_date=lambda d: False,
                             export=writer("v1"), check=check) == 0
    assert (out / "model.onnx").read_text() == "v1"
    assert seen[0][0] != out and seen[0][0].parent == out.parent and seen[0][1] == "v1"
    assert siblings(out) == ["m"]  # no temporary directory left
    assert oct(out.stat().st_mode & 0o777) == "0o755"
    assert capsys.readouterr().out == f"{out}\n"


def test_a_failed_validation_keeps_the_previous_export(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.onnx").write_text("old")

    def check(d):
        raise CheckFailed("bad model")

    with pytest.raises(CheckFailed, match="bad model"):
        export_atomically(out, force=True, validate_existing=True, is_up_to_date=lambda d: False,
                          export=writer("new"), check=check)
    assert (out / "model.onnx").read_text() == "old"
    assert siblings(out) == ["m"]


def test_an_interrupted_export_leaves_nothing_behind(tmp_path):
    out = tmp_path / "m"

    def export(tmp):
        (tmp / "half").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_atomically(out, force=False, validate_existing=True, is_up_to_date=lambda d: False,
                          export=export, check=lambda d: {})
    assert siblings(out) == []


def test_a_second_export_replaces_the_first(tmp_path):
    out = tmp_path / "m"
    for text in ("v1", "v2"):
        export_atomically(out, force=True, validate_existing=True, is_up_to_date=lambda d: True,
                          export=writer(text), check=lambda d: {})
    assert (out / "model.onnx").read_text() == "v2"
    assert siblings(out) == ["m"]  # the previous directory, moved aside, is removed


@pytest.mark.parametrize("validate", [True, False])
def test_an_up_to_date_export_is_only_revalidated(tmp_path, capsys, validate):
    out = tmp_path / "m"
    out.mkdir()
    checked = []

    def export(tmp):
        raise AssertionError("must not export")

    assert export_atomically(out, force=False, validate_existing=validate, is_up_to_date=lambda d: True,
                             export=export, check=lambda d: checked.append(d) or {}) == 0
    assert checked == ([out] if validate else [])
    assert capsys.readouterr().out == f"{out}\n"


def test_check_mode_validates_without_exporting(tmp_path):
    out = tmp_path / "m"
    args = SimpleNamespace(check=True, force=False, no_check=False)
    with pytest.raises(UsageError, match="does not exist"):
        check_or_export(out, args, is_up_to_date=lambda d: False, export=writer("x"), check=lambda d: {})
    assert not out.exists()
    out.mkdir()

    def stale(d):
        raise CheckFailed("stale")

    with pytest.raises(CheckFailed):
        check_or_export(out, args, is_up_to_date=lambda d: False, export=writer("x"), check=stale)
    assert list(out.iterdir()) == []


def test_leftovers_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    out = tmp_path / "m"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    kept = [f".m.tmp-{os.getpid()}-def", ".m.tmp-notapid-x", f".m.backup-{dead_pid}", f".other.tmp-{dead_pid}-x", "m"]
    for n in [f".m.tmp-{dead_pid}-abc", f".m.old-{dead_pid}", *kept]:
        (tmp_path / n).mkdir()
    remove_stale_temp_dirs(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


def test_export_is_current_needs_the_same_source_version_and_files(tmp_path):
    src = tmp_path / "weights.bin"
    src.write_bytes(b"weights")
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"graph")
    for f in TOKENIZER_FILES + ("freshet-check.json",):
        (out / f).write_text("{}")
    meta = {"exporter_version": 3, "source_sha256": sha256_file(src), "sha256": sha256_file(out / "model.onnx")}
    write_json(out / "freshet-model.json", meta)
    assert export_is_current(out, src, 3)
    assert not export_is_current(out, src, 4)
    (out / "model.onnx").write_bytes(b"graph, edited")
    assert not export_is_current(out, src, 3)
    (out / "model.onnx").write_bytes(b"graph")
    src.write_bytes(b"other weights")
    assert not export_is_current(out, src, 3)
    src.write_bytes(b"weights")
    (out / "tokenizer.json").unlink()
    assert not export_is_current(out, src, 3)
    (out / "tokenizer.json").write_text("{}")
    (out / "freshet-model.json").write_text("{not json")
    assert not export_is_current(out, src, 3)
    write_json(out / "freshet-model.json", meta)
    assert export_is_current(out, src, 3)
    assert json.loads((out / "freshet-model.json").read_text()) == meta


def test_failures_map_to_exit_statuses(capsys):
    assert run_exporter(lambda: 0) == 0

    def usage():
        raise UsageError("no such package")

    def failed():
        raise CheckFailed("cosine 0.2")

    assert run_exporter(usage) == 2
    assert run_exporter(failed) == 1
    err = capsys.readouterr().err
    assert "[export-model] error: no such package" in err
    assert "[export-model] VALIDATION FAILED: cosine 0.2" in err
