# Two entry points: `make demo` (main job on the embedded default) and `make test` (the suite);
# `make docs` serves the documentation site (mkdocs.yml) at http://127.0.0.1:8000 with the `docs` extra.
# Both create .venv on a fresh machine. `make demo` installs only what the demo runs: the package and
# its core dependencies (stamp $(DEMO_STAMP)); `make test` adds the `test` extra (sentence-transformers,
# triton, the engines' Python packages, ...), scripts/setup-engines.sh (Java 17 via apt when
# missing, Anserini's fat jar from the pyserini wheel, torch 2.7.1's ATen declarations) and the venvs of
# the engine libraries whose pins clash with ours (fastembed, opensearch-py-ml, eland: tests/engine_venvs.py,
# under benchmarks/.cache) on top (stamp $(STAMP)); `make test-engines`
# runs only the engines tests. Under CI=true (.ci/run sets it) a skipped test fails the run unless
# no CI machine could meet its reason (tests/conftest.py, ALLOWED_SKIPS). The CPU torch wheel is
# installed first when no torch is present, so that the package's own range never pulls a CUDA build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.spladekit-demo
DOCS_STAMP := $(VENV)/.spladekit-docs
STAMP := $(VENV)/.spladekit-installed

.PHONY: setup setup-demo demo test test-engines test-matrix docs clean

# One pip call (CPU torch pinned in it when no torch is there), then the bytecode of the packages
# and of src/ written in parallel (compileall -j 0), the packages' tests left out (the pattern is matched
# against whole paths: only below site-packages, wherever the venv lives). Without it, where
# PYTHONDONTWRITEBYTECODE is set (as on our machines) Python never writes bytecode, and every process
# compiled torch's and transformers' sources again: about half of a server's start (benchmarks/runs/2026-12-06-bytecode.md).
# A file that does not compile on this Python (torch ships Python 3.12 syntax in its test helpers)
# is compiled, and refused, at import as without bytecode: a note, not a failed set-up.
COMPILE := $(PY) -m compileall -q -j 0 -x 'site-packages/(.*/)?tests?/|site-packages/torch/testing/_internal/'
COMPILED := >/dev/null || echo "note: some files were not byte-compiled (Python compiles them at import)"
$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile $$($(PY) -c "import torch" 2>/dev/null || echo torch==2.13.0) -e .
	$(COMPILE) $(VENV)/lib src $(COMPILED)
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP) pyproject.toml scripts/setup-engines.sh tests/engine_venvs.py
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	sh scripts/setup-engines.sh $(PY)
	$(PY) tests/engine_venvs.py
	$(COMPILE) $(VENV)/lib $(COMPILED)
	touch $(STAMP)

$(DOCS_STAMP): $(DEMO_STAMP) pyproject.toml
	$(PY) -m pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

setup-demo: $(DEMO_STAMP)

setup: $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/spladekit demo

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -q

# The site rebuilt on each change of docs/, the README, src/ (the API reference), benchmarks/ or scripts/;
# tests/test_docs_site.py builds it with --strict. NO_MKDOCS_2_WARNING: mkdocs-material's banner about mkdocs 2.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

test-engines: $(STAMP)
	$(PY) -m pytest -q -m engines

# The suite under each CPU/BLAS environment it must pass in (plain, OMP_NUM_THREADS=1, MKL_CBWR=AVX2,
# MKL_CBWR=COMPATIBLE, ATEN_CPU_CAPABILITY=default, serial), one after the other; CI runs `test` only.
test-matrix: $(STAMP)
	PY=$(PY) scripts/test-matrix.sh

clean:  # the venv, the demo's outputs, and the engines' own venvs that `make test` builds (tests/engine_venvs.py)
	rm -rf $(VENV) outputs benchmarks/.cache/engine-*
