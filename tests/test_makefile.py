"""`make demo` sets up only what the demo needs; `make test` adds the test tools and the engines.

Read off `make -n` (what make would run, nothing run) against a venv path that does not exist, so
every set-up step is printed: the demo's set-up must install the package without the `test` extra
and without the engines' script; the suite's must add both, after the demo's (one venv, two stamps).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _plan(target: str, tmp_path: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "no-venv-yet"
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.strip() for line in proc.stdout.splitlines() if line.strip() and not line.startswith("make")]


def test_demo_installs_the_core_package_only(tmp_path):
    plan = _plan("demo", tmp_path)
    installs = [line for line in plan if " pip install " in line]
    assert any(line.endswith(" -e .") and "--no-compile" in line and "torch==2.13.0" in line for line in installs), installs
    assert not any("[test]" in line for line in plan) and not any("setup-engines" in line for line in plan), plan
    assert plan[-1].endswith("bin/spladekit demo")


def test_test_adds_the_test_extra_and_the_engines_after_the_demo_set_up(tmp_path):
    plan = _plan("test", tmp_path)
    core = next(i for i, line in enumerate(plan) if line.endswith("-e ."))
    extra = next(i for i, line in enumerate(plan) if line.endswith('-e ".[test]"'))
    engines = next(i for i, line in enumerate(plan) if "scripts/setup-engines.sh" in line)
    assert core < extra < engines < len(plan) - 1 and "pytest" in plan[-1]
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"  # CI calls exactly the README's command
