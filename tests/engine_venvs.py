"""Virtual environments for engine libraries whose pins clash with the project's (test helper).

fastembed 0.9.1 wants huggingface_hub < 2 (ours: 2.x); opensearch-py-ml 1.3.0 and eland 9.2.0 import
names transformers 5 removed (``transformers.convert_graph_to_onnx``, ``RetriBertTokenizer``) and pin
pandas < 3. Each gets its own plain venv under ``benchmarks/.cache/engine-<name>`` (git-ignored), built
by ``make test``'s set-up (``python tests/engine_venvs.py``; a minute or two each from PyPI; a test
also builds it when ``SPLADEKIT_ENGINE_VENVS=1``, else skips saying so) and reused afterwards; the two tracers get the
project's torch version (2.13.0, the CPU build here) with transformers 4.x. Nothing is installed
into the project's venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CACHE = Path(__file__).resolve().parents[1] / "benchmarks" / ".cache"
TRACER = ["torch==2.13.0", "transformers>=4.50,<5", "sentence-transformers>=4,<5.2"]
ENVS = {  # name → pip requirements
    "fastembed": ["fastembed==0.9.1"],
    "opensearch-py-ml": TRACER + ["opensearch-py-ml==1.3.0", "mdutils", "accelerate"],
    "eland": TRACER + ["eland==9.2.0"],
}


def build(name: str) -> Path:
    """Build (or reuse) the venv of engine ``name``; returns its python. Raises CalledProcessError or
    TimeoutExpired when pip fails (called by ``make test``'s set-up, and by a test when
    ``SPLADEKIT_ENGINE_VENVS=1``)."""
    packages = ENVS[name]
    root = CACHE / f"engine-{name}"
    python = root / "bin" / "python"
    marker = root / ".installed"
    if marker.exists() and marker.read_text() == json.dumps(packages):
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True, capture_output=True, timeout=300)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *packages], check=True, capture_output=True, timeout=1800
    )
    marker.write_text(json.dumps(packages))  # written last: a half-built venv is rebuilt (--clear) next time
    return python


def engine_python(name: str) -> Path:
    """The venv's python: built by ``make test``'s set-up (``python tests/engine_venvs.py``); a test
    skips saying so when it is not there (or builds it first when ``SPLADEKIT_ENGINE_VENVS=1``)."""
    root = CACHE / f"engine-{name}"
    marker = root / ".installed"
    if marker.exists() and marker.read_text() == json.dumps(ENVS[name]):
        return root / "bin" / "python"
    if not os.environ.get("SPLADEKIT_ENGINE_VENVS"):
        pytest.skip(
            f"the {name} venv ({', '.join(ENVS[name])}) is not built under {root}: `make test` builds it "
            f"(python tests/engine_venvs.py), or SPLADEKIT_ENGINE_VENVS=1 lets the test build it"
        )
    try:
        return build(name)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        err = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"could not build the {name} venv under {root} (PyPI needed once): {err.decode()[-300:]}")


def run_in(name: str, script: str, *args: str, env: dict | None = None, timeout: int = 300) -> str:
    """Run ``script`` (Python source) with the venv's python; returns stdout, fails with stderr."""
    full_env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1", **(env or {}))
    full_env.pop("PYTHONPATH", None)  # the engine's own view, not our sources
    proc = subprocess.run(
        [str(engine_python(name)), "-c", script, *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


if __name__ == "__main__":  # `make test`'s set-up: every engine venv, one after the other
    for engine in ENVS:
        try:
            print(f"engine venv {engine}: {build(engine).parent.parent}")
        except subprocess.CalledProcessError as exc:
            sys.exit(f"engine venv {engine}: pip failed: {(exc.stderr or b'').decode()[-2000:]}")
