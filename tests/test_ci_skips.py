"""The suite's skip rule (tests/conftest.py): under ``CI=true`` a skip for something the set-up
provides (a package, an engine, a shared file) fails the run, a skip on the allow-list (a CUDA
device) stays a skip, an expected failure stays one; without CI every skip is a skip.

The rule is run by pytest itself on a small suite made here (pytester, in process), with the hooks
of tests/conftest.py registered as a plugin: each kind of skip (a module-level ``importorskip``, one
inside a test, a skipping fixture, a ``skipif`` marker) once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import conftest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
CUDA = "needs a CUDA device (run on the GPU machine)"

SUITE = {
    "test_module_skip.py": """
import pytest

pytest.importorskip("spladekit_no_such_package", reason="spladekit_no_such_package not installed")


def test_never_collected():
    pass
""",
    "test_kinds.py": f"""
import pytest


@pytest.fixture()
def shared_file():
    pytest.skip("../shared (or $SPLADEKIT_SHARED) is not present: real-data test skipped")


def test_missing_package_inside():
    pytest.importorskip("spladekit_no_such_package")


def test_missing_shared_file(shared_file):
    pass


@pytest.mark.skipif(True, reason={CUDA!r})
def test_cuda_marker():
    pass


def test_cuda_inside():
    pytest.skip({CUDA!r})


@pytest.mark.skipif(True, reason="needs a CUDA device")  # not word for word: not on the list
def test_near_miss():
    pass


@pytest.mark.xfail(reason="a known limitation", strict=True)
def test_expected_failure():
    assert False


def test_plain():
    pass
""",
}


def _run(pytester, monkeypatch, ci: str | None):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(**{name[:-3]: text for name, text in SUITE.items()})
    # a failed collection stops a plain run before any test; going on shows every outcome in one run
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-rsfE", "--continue-on-collection-errors", plugins=[conftest]
    )


def test_under_ci_a_skip_for_what_the_set_up_provides_fails(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "true")
    # failed: the importorskip inside a test; errors (at collection or set-up): the module-level
    # importorskip, the skipping fixture, the skipif marker whose reason is not word for word the CUDA one
    result.assert_outcomes(passed=1, skipped=2, failed=1, errors=3, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    failed = [
        line.split("where a skip fails the run: ", 1)[1]
        for line in out.splitlines()
        if line.startswith("skipped under CI=true, where a skip fails the run: ")
    ]
    assert sorted(failed) == sorted(
        [
            "spladekit_no_such_package not installed",
            "could not import 'spladekit_no_such_package': No module named 'spladekit_no_such_package'",
            "../shared (or $SPLADEKIT_SHARED) is not present: real-data test skipped",
            "needs a CUDA device",
        ]
    )
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2 and all(line.endswith(f": {CUDA}") for line in skipped), skipped


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_without_ci_every_skip_is_a_skip(pytester, monkeypatch, ci):
    result = _run(pytester, monkeypatch, ci)
    result.assert_outcomes(passed=1, skipped=6, xfailed=1)
    assert "where a skip fails the run" not in result.stdout.str()


@pytest.mark.parametrize(
    "value, enforced",
    [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("false", False), ("0", False), ("", False)],
)
def test_which_ci_values_enforce_the_rule(monkeypatch, value, enforced):
    monkeypatch.setenv("CI", value)
    assert conftest.on_ci() is enforced


def test_each_allowed_reason_is_still_given_by_a_test():
    """An allow-list entry that no test gives any more would let a later skip of that wording pass:
    each must appear word for word in a test file (tests/**/*.py, this file and conftest.py aside)."""
    sources = "".join(
        p.read_text(encoding="utf-8")
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if p.name not in {"conftest.py", Path(__file__).name}
    )
    assert conftest.ALLOWED_SKIPS and all(f'"{reason}"' in sources for reason in conftest.ALLOWED_SKIPS)


def test_ci_entry_point_runs_make_test_with_ci_set(tmp_path):
    """``.ci/run`` run as CI runs it, with a ``make`` first on PATH that prints what it was given:
    ``make test`` with ``CI=true``, whatever the caller's environment said."""
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "make $* CI=$CI"\n')
    fake.chmod(0o755)
    env = dict(os.environ, CI="false")
    env["PATH"] = f"{fake.parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "make test CI=true", proc.stdout + proc.stderr
