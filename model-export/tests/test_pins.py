"""The versions pyproject.toml names are the ones deploy/install.sh installs."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def install_pins() -> dict:
    text = (ROOT / "deploy" / "install.sh").read_text()
    return {name.lower(): version for name, version in re.findall(r'"([A-Za-z0-9_.-]+)==([^"]+)"', text)}


def test_pyproject_pins_match_install_sh():
    project = tomllib.loads((ROOT / "model-export" / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [s for extra in project["optional-dependencies"].values() for s in extra]
    pins = install_pins()
    assert specs
    for spec in specs:
        name, version = spec.split("==")
        assert pins.get(name.lower()) == version, f"{spec}: deploy/install.sh pins {pins.get(name.lower())}"
