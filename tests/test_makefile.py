"""`make demo` sets up only what the demo needs; `make test` adds the test tools and the engines.

Read off `make -n` (what make would run, nothing run) against a venv path that does not exist, so
every set-up step is printed: the demo's set-up must install the package without the `test` extra
and without the engines' script; the suite's must add both, after the demo's (one venv, two stamps).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _plan(target: str, tmp_path: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "no-venv-yet"
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.strip() for line in proc.stdout.splitlines() if line.strip() and not line.startswith("make")]


def test_demo_installs_the_core_package_only(tmp_path):
    plan = _plan("demo", tmp_path)
    installs = [line for line in plan if " pip install " in line]
    assert any(line.endswith(" -e .") and "--no-compile" in line and "torch==2.13.0" in line for line in installs), (
        installs
    )
    assert not any("[test]" in line for line in plan) and not any("setup-engines" in line for line in plan), plan
    assert plan[-1].endswith("bin/spladekit demo")
    compiled = next(i for i, line in enumerate(plan) if " -m compileall " in line)
    assert next(i for i, line in enumerate(plan) if line.endswith(" -e .")) < compiled < len(plan) - 1, plan


def test_test_adds_the_test_extra_and_the_engines_after_the_demo_set_up(tmp_path):
    plan = _plan("test", tmp_path)
    core = next(i for i, line in enumerate(plan) if line.endswith("-e ."))
    extra = next(i for i, line in enumerate(plan) if line.endswith('-e ".[test]"'))
    engines = next(i for i, line in enumerate(plan) if "scripts/setup-engines.sh" in line)
    assert core < extra < engines < len(plan) - 1 and "pytest" in plan[-1]
    assert " -m compileall " in plan[-3] and plan[-2].startswith("touch ")  # after the engines' venvs, before the stamp


def test_the_byte_compile_step_writes_bytecode_skips_tests_and_survives_a_bad_file(tmp_path):
    """The set-up's compileall line run as make runs it (sh -c), on a folder standing for the venv:
    bytecode for a package's module, none for a tests folder, and a file that does not compile (as
    torch's Python 3.12 test helper on 3.11) gives the note, not a failed step."""
    venv = tmp_path / "tests" / "venv"  # a venv below a folder named tests is compiled all the same
    line = next(line for line in _plan("test", tmp_path) if " -m compileall " in line and " src " not in line)
    package = venv / "lib" / "site-packages" / "pkg"
    (package / "tests").mkdir(parents=True)
    (package / "mod.py").write_text("X = 1\n")
    (package / "tests" / "test_mod.py").write_text("Y = 2\n")
    (package / "bad_syntax.py").write_text("def f(:\n")
    line = line.replace(str(tmp_path / "no-venv-yet" / "bin" / "python"), sys.executable).replace(
        str(tmp_path / "no-venv-yet"), str(venv)
    )
    proc = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "note: some files were not byte-compiled" in proc.stdout, proc.stdout + proc.stderr
    assert list((package / "__pycache__").glob("mod.*.pyc")) and not (package / "tests" / "__pycache__").exists()
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[
        -1
    ] == "make test"  # CI calls exactly the README's command


def test_docs_installs_the_docs_extra_and_serves_the_site(tmp_path):
    plan = _plan("docs", tmp_path)
    core = next(i for i, line in enumerate(plan) if line.endswith("-e ."))
    extra = next(i for i, line in enumerate(plan) if line.endswith('-e ".[docs]"'))
    assert core < extra < len(plan) - 1 and plan[-1].endswith("bin/mkdocs serve"), plan
    assert not any("[test]" in line for line in plan), plan
