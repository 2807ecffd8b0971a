"""The command line and deploy/export-model.sh, the entry point deploy/install.sh calls."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import e5_config, e5_file, minilm_source

from freshet_model_export.cli import main

EXPORT_SH = Path(__file__).resolve().parents[2] / "deploy" / "export-model.sh"


def test_an_exporter_must_be_named(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    assert "EXPORTER" in capsys.readouterr().err


def test_bad_input_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    assert main(["minilm", "--source-dir", str(tmp_path / "empty"), "--out-dir", str(tmp_path / "o")]) == 2
    assert main(["e5", "--source-file", str(tmp_path / "nothing.bin"), "--out-dir", str(tmp_path / "o")]) == 2
    src = minilm_source(tmp_path / "src")
    assert main(["minilm", "--source-dir", str(src), "--out-dir", str(tmp_path / "o"), "--check"]) == 2
    assert not (tmp_path / "o").exists()


def test_a_failed_validation_exits_1_and_publishes_nothing(tmp_path, capsys):
    # a random model is exported, fails the semantic check, and is not published
    src = minilm_source(tmp_path / "src")
    out = tmp_path / "models" / "all-MiniLM-L6-v2"
    assert main(["minilm", "--source-dir", str(src), "--out-dir", str(out)]) == 1
    assert "VALIDATION FAILED" in capsys.readouterr().err
    assert [p.name for p in out.parent.iterdir()] == [".all-MiniLM-L6-v2.lock"]


def run_sh(*args, **env):
    return subprocess.run(["bash", str(EXPORT_SH), *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "FRESHET_PYTHON": sys.executable, **env})


def test_export_model_sh_runs_the_package(tmp_path):
    r = run_sh("--model", "all-MiniLM-L6-v2-int8", "--source-dir", str(minilm_source(tmp_path / "src")),
               "--out-dir", str(tmp_path / "out"))
    # the int8 variant of a random model: exported and quantized, then refused by the semantic check
    assert r.returncode == 1, r.stderr
    assert "quantizing the dense layers to int8" in r.stderr and "VALIDATION FAILED" in r.stderr
    assert not (tmp_path / "out").exists()

    e5_file(tmp_path / "e5.bin", e5_config())
    r = run_sh("--model", "multilingual-e5-small", "--source-file", str(tmp_path / "e5.bin"), "--check",
               FRESHET_MODEL_DIR=str(tmp_path / "e5-out"))
    assert r.returncode == 2 and f"{tmp_path / 'e5-out'} does not exist" in r.stderr, r.stderr
    # e5's int8 variant: exported, quantized, then refused (the tiny tokenizer disagrees with the engine)
    r = run_sh("--model", "multilingual-e5-small-int8", "--source-file", str(tmp_path / "e5.bin"),
               "--out-dir", str(tmp_path / "e5-int8"))
    assert r.returncode == 1, r.stderr
    assert "quantizing the dense layers to int8" in r.stderr and "VALIDATION FAILED" in r.stderr
    assert not (tmp_path / "e5-int8").exists()


def test_export_model_sh_refuses_an_unknown_model():
    r = run_sh("--model", "bge-m3")
    assert r.returncode == 2 and "unknown model 'bge-m3'" in r.stderr


def test_the_package_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "freshet_model_export", "e5", "--help"], capture_output=True, text=True,
                       check=False, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and "--source-file" in r.stdout
