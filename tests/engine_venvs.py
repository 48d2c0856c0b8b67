"""Virtual environments for engine libraries whose pins clash with the project's (test helper).

fastembed 0.9.1 wants huggingface_hub < 2 (ours: 2.x); opensearch-py-ml 1.3.0 and eland 9.2.0 import
names transformers 5 removed (``transformers.convert_graph_to_onnx``, ``RetriBertTokenizer``) and pin
pandas < 3. Each gets its own plain venv under ``benchmarks/.cache/engine-<name>`` (git-ignored), built
on first use from PyPI (a minute or two each; only when ``SPLADEKIT_ENGINE_VENVS=1``, else the test
skips saying so) and reused afterwards; the two tracers get the
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


def engine_python(name: str) -> Path:
    """The venv's python, building the venv first if needed; skips the test when it cannot be built."""
    packages = ENVS[name]
    root = CACHE / f"engine-{name}"
    python = root / "bin" / "python"
    marker = root / ".installed"
    if marker.exists() and marker.read_text() == json.dumps(packages):
        return python
    if not os.environ.get("SPLADEKIT_ENGINE_VENVS"):
        pytest.skip(f"opt-in: the {name} venv ({', '.join(packages)}) is not built; SPLADEKIT_ENGINE_VENVS=1 builds it "
                    f"under {root} (PyPI, a minute or more; reused afterwards)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(root)],
                       check=True, capture_output=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True, capture_output=True,
                       timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        err = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"could not build the {name} venv under {root} (PyPI needed once): {err.decode()[-300:]}")
    marker.write_text(json.dumps(packages))
    return python


def run_in(name: str, script: str, *args: str, env: dict | None = None, timeout: int = 300) -> str:
    """Run ``script`` (Python source) with the venv's python; returns stdout, fails with stderr."""
    full_env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1", **(env or {}))
    full_env.pop("PYTHONPATH", None)  # the engine's own view, not our sources
    proc = subprocess.run([str(engine_python(name)), "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
