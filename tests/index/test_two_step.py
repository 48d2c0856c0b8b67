"""Two-step search (spladekit.index.two_step) and the pruned copy it reads (spladekit.index.pruned_store).

Two-step's scores are compared with exact search's with ``==``: the rescoring adds the same float32
products ``q_j · d_j`` in the same (ascending term) order as exact search's kernels, each product and
each sum rounded on its own (``rescore_rows``: scipy's compiled CSR product, as exact search's kernels
are compiled loops of scipy; the same argument as tests/index/test_maxscore.py's), so a candidate's score is
exact's float32 value. The candidates themselves are checked against a first
step computed here by hand: the pruned documents (``prune``, tested by hand in tests/model/test_pruning.py)
times the query in float64, a document a candidate when its product is > 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import spladekit.index.exact as exact
from spladekit.errors import DataFormatError
from spladekit.index.exact import exact_search
from spladekit.index.index import SEARCHERS, Index, searcher_config
from spladekit.index.pruned_store import open_or_build
from spladekit.index.searcher import ExactConfig
from spladekit.index.two_step import TwoStepConfig
from spladekit.model.pruning import prune

ROOT = Path(__file__).resolve().parents[2]
RULES = ["top_k=3", "mass=0.6", "max_ratio=0.4", "threshold=9"]


def corpus(seed: int, num_docs: int = 600, vocab: int = 60, integer: bool = True):
    """Skewed documents with repeated rows (ties), queries of 3-12 terms, ids out of row order."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** 0.9
    rows = []
    for _ in range(num_docs // 2):
        terms = np.unique(rng.choice(vocab, size=rng.integers(1, 15), p=p / p.sum()))
        values = rng.integers(1, 40, terms.size) if integer else rng.gamma(1.5, 8.0, terms.size)
        rows.append((terms, values.astype(np.float32)))
    order = rng.permutation(np.repeat(np.arange(len(rows)), 2))
    indptr = np.concatenate([[0], np.cumsum([rows[i][0].size for i in order])])
    docs = sp.csr_matrix(
        (np.concatenate([rows[i][1] for i in order]), np.concatenate([rows[i][0] for i in order]), indptr),
        shape=(order.size, vocab),
    )
    queries = []
    for _ in range(20):
        terms = np.unique(rng.choice(vocab, size=rng.integers(3, 13)))
        weights = rng.integers(1, 9, terms.size) if integer else rng.uniform(0.05, 3, terms.size)
        queries.append(sp.csr_matrix((weights.astype(np.float32), terms, [0, terms.size]), shape=(1, vocab)))
    ids = [f"d{i:05d}" for i in rng.permutation(order.size)]
    return docs, sp.vstack(queries).tocsr(), ids


def candidates_by_hand(
    docs: sp.csr_matrix,
    query: sp.csr_matrix,
    rule: str,
    query_rule: str | None = None,
    depth: int | None = None,
    ids: list[str] | None = None,
) -> np.ndarray:
    """Rows whose pruned vector meets the (pruned) query: float64 products, all terms ≥ 0, so > 0 iff
    a shared term; with ``depth``, the first ``depth`` of them by product descending, then id."""
    first = prune(query, query_rule) if query_rule else query
    scores = (prune(docs, rule).astype(np.float64) @ first.T.astype(np.float64)).toarray().ravel()
    rows = np.flatnonzero(scores > 0)
    if depth is None:
        return rows
    return np.array(sorted(rows, key=lambda r: (-scores[r], ids[r]))[:depth], np.int64)


def exact_over(
    docs: sp.csr_matrix, rows: np.ndarray, query: sp.csr_matrix, k: int, ids: list[str]
) -> list[tuple[str, float]]:
    """Exact search over the documents of ``rows`` alone (the others emptied), named."""
    mask = np.zeros(docs.shape[0], bool)
    mask[rows] = True
    kept = sp.diags(mask.astype(np.float32)) @ docs
    return [(ids[r], s) for r, s in exact_search(query, kept, k, doc_ids=ids)[0]]


@pytest.fixture(params=["short-lists", "term-at-a-time"])
def kernels(request, monkeypatch):
    """Both kernels of exact search, the reference (MaxScore included), on these small corpora."""
    if request.param == "term-at-a-time":
        monkeypatch.setattr(exact, "TAAT_FROM", 0)
        monkeypatch.setattr(exact, "PRUNE_FROM", 0)
    return request.param


# ----------------------------------------------------------------------------------- equal to exact
@pytest.mark.parametrize("integer", [True, False], ids=["integer", "float"])
@pytest.mark.parametrize("rule", RULES)
def test_two_step_is_exact_search_over_its_candidates(tmp_path, kernels, integer, rule):
    docs, queries, ids = corpus(1, integer=integer)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    for query_rule in (None, "top_k=4"):
        for c in (docs.shape[0], 25):
            config = TwoStepConfig(first=rule, candidates=c, first_query=query_rule)
            for k in (1, 10, 100):
                got = index.search(queries, k=k, searcher=config).hits
                for q in range(queries.shape[0]):
                    rows = candidates_by_hand(docs, queries[q], rule, query_rule)
                    if max(c, k) >= rows.size:  # c covers every document with a nonzero first-step score
                        assert got[q] == exact_over(docs, rows, queries[q], k, ids), (q, k)
                    elif integer:  # integer sums: float64 by hand ranks as float32 does; ties by id
                        top = candidates_by_hand(docs, queries[q], rule, query_rule, max(c, k), ids)
                        assert got[q] == exact_over(docs, top, queries[q], k, ids), (q, k)
                    else:  # max(c, k) of them, rescored exactly
                        assert len(got[q]) == min(k, max(c, k)) and {d for d, _ in got[q]} <= {ids[r] for r in rows}
                        full = dict(exact_over(docs, rows, queries[q], docs.shape[0], ids))
                        assert all(full[d] == s for d, s in got[q])


@pytest.mark.parametrize("rule", ["threshold=20", "max_ratio=0.5"])
def test_two_step_equals_exact_when_c_covers_every_document_with_a_nonzero_score(tmp_path, kernels, rule):
    # query terms 0-9 carry every document's heaviest weights (20-39), the other terms light ones
    # (1-9): the rule keeps each document's query terms, so every document with a nonzero score is a
    # candidate (checked), while the copy holds under half the entries of the index
    rng = np.random.default_rng(7)
    num_docs, vocab = 500, 80
    dense = np.zeros((num_docs, vocab), np.float32)
    for d in range(num_docs):
        heavy = rng.choice(10, size=rng.integers(0, 3), replace=False)
        light = rng.choice(np.arange(10, vocab), size=rng.integers(3, 20), replace=False)
        dense[d, heavy] = rng.integers(20, 40, heavy.size)
        dense[d, light] = rng.integers(1, 10, light.size)
    docs = sp.csr_matrix(dense)
    ids = [f"doc{i}" for i in rng.permutation(num_docs)]
    queries = sp.csr_matrix(
        np.where(rng.random((15, vocab)) < 0.5, rng.uniform(0.1, 2, (15, vocab)), 0)[:, :10].astype(np.float32)
    )
    queries = sp.hstack([queries, sp.csr_matrix((15, vocab - 10), dtype=np.float32)]).tocsr()
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    assert index.pruned(rule).postings.nnz < docs.nnz / 2
    nonzero = [(docs @ queries[q].T).nnz for q in range(queries.shape[0])]
    assert all(
        set(candidates_by_hand(docs, queries[q], rule)) == set(np.flatnonzero((docs @ queries[q].T).toarray()))
        for q in range(15)
    )
    for k in (1, 10, 1000):
        want = index.search(queries, k=k, searcher=ExactConfig()).hits
        assert (
            index.search(
                queries, k=k, searcher=TwoStepConfig(first=rule, candidates=max(nonzero), first_query=None)
            ).hits
            == want
        )
        assert (
            index.search(queries, k=k, searcher=TwoStepConfig(first=rule, candidates=num_docs, first_query=None)).hits
            == want
        )
    assert (
        max(nonzero) > 10
        and index.search(queries, k=10, searcher=TwoStepConfig(first=rule, candidates=1, first_query=None)).hits != want
    )


def test_ties_follow_the_document_ids(tmp_path):
    # every document twice (integer impacts): equal scores ordered by id, as exact search orders them
    docs, queries, ids = corpus(3)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    got = index.search(
        queries, k=50, searcher=TwoStepConfig(first="top_k=100", candidates=docs.shape[0], first_query="none")
    ).hits
    assert got == index.search(queries, k=50).hits  # top_k=100 keeps every term of these documents
    assert any(len({s for _, s in hits}) < len(hits) for hits in got)


def test_rescoring_adds_in_term_order_as_exact_search():
    # by hand: document 0 shares terms 4 and 7 with the query, document 1 term 4 only; float32 in term order
    from spladekit.index.two_step import rescore_rows

    docs = sp.csr_matrix((np.array([0.1, 0.3, 0.7, 2.0], np.float32), np.array([1, 4, 7, 4]), [0, 3, 4]), shape=(2, 8))
    want0 = np.float32(np.float32(0.3) * np.float32(1.5)) + np.float32(np.float32(0.7) * np.float32(0.9))
    got = rescore_rows(docs, np.array([0, 1]), np.array([4, 7]), np.array([1.5, 0.9], np.float32))
    assert got.tolist() == [float(want0), float(np.float32(2.0) * np.float32(1.5))]
    # against the posting-list rescoring of exact search's pruned kernel, on float weights: the same bits
    from spladekit.index.maxscore import rescore

    docs, queries, _ = corpus(9, integer=False)
    postings = docs.T.tocsr()
    rows = np.sort(np.random.default_rng(0).choice(docs.shape[0], 200, replace=False))
    for q in queries:
        assert (
            rescore_rows(docs, rows, q.indices, q.data).tobytes()
            == rescore(postings, rows, q.indices, q.data).tobytes()
        )
    assert rescore_rows(docs, np.zeros(0, np.int64), q.indices, q.data).size == 0


# ----------------------------------------------------------------------------------- the stored copy
def test_the_copy_is_stored_reopened_and_replaced_by_another_rule(tmp_path):
    docs, queries, ids = corpus(2)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    first = index.search(queries, k=10, searcher=TwoStepConfig(first="mass=0.5", candidates=40))
    assert first.built and "pruned copy" in first.built[0]
    record = json.loads((index.folder / "pruned" / "pruned.json").read_text())
    assert record["rule"] == {"kind": "mass", "value": 0.5} and record["content_hash"] == index.metadata["content_hash"]
    assert record["nnz"] == prune(docs, "mass=0.5").nnz
    stored = index.pruned()
    want = sp.csr_matrix(prune(docs, "mass=0.5").T)
    assert (stored.postings != want).nnz == 0 and stored.postings.indices.tolist() == sp.csr_matrix(
        want
    ).indices.tolist()
    again = Index.open(index.folder, verify=True)  # postings_hash checked
    reopened = again.search(queries, k=10, searcher=TwoStepConfig(candidates=40))  # the stored rule
    assert reopened.built == [] and reopened.hits == first.hits
    assert reopened.settings.backend == "two_step"
    assert reopened.settings.two_step == {
        "first": {"kind": "mass", "value": 0.5},
        "first_query": {"kind": "top_k", "value": 16},
        "candidates": 40,
        "pruned_hash": record["postings_hash"],
    }
    other = again.search(queries, k=10, searcher=TwoStepConfig(first="top_k=2", candidates=40))
    assert other.built and json.loads((index.folder / "pruned" / "pruned.json").read_text())["rule"] == {
        "kind": "top_k",
        "value": 2,
    }
    assert sorted(p.name for p in index.folder.iterdir() if p.name.startswith(".")) == []  # no journal or backup left


def test_the_configuration_is_typed_and_registered():
    assert SEARCHERS["two_step"] is TwoStepConfig
    config = searcher_config("two_step", first={"kind": "top_k", "value": 8}, candidates=300)
    assert (config.first, config.candidates) == ("top_k=8", 300) and hash(config) == hash(
        TwoStepConfig(first="top_k=8", candidates=300)
    )
    defaults = TwoStepConfig()
    assert (defaults.first, defaults.candidates, defaults.first_query) == (
        None,
        700,
        "top_k=16",
    )  # None: the stored copy's rule
    assert TwoStepConfig(first_query="none").first_query is None and TwoStepConfig(first_query=None).first_query is None
    for bad in ({"first": "mass=2"}, {"candidates": 0}, {"candidates": True}, {"first_query": "top=3"}, {"unknown": 1}):
        with pytest.raises(ValueError):
            TwoStepConfig(**bad)


KILLED_BUILD = """
import os, signal, sys
from spladekit.index.index import Index
from spladekit.index.pruned_store import open_or_build
index = Index.open(sys.argv[1])
def stop(number):
    if number == 1:  # ranges 0 and 1 are stored: the process dies before range 2
        os.kill(os.getpid(), signal.SIGKILL)
open_or_build(index.folder, index.docs, index.postings, index.metadata["content_hash"], "mass=0.5", max_entries=700, on_range=stop)
"""


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_killed_build_keeps_the_old_copy_and_resumes(tmp_path):
    docs, queries, ids = corpus(4, num_docs=1000)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    index.pruned("top_k=2")  # an older copy, of another rule
    old = _digests(index.folder / "pruned")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_BUILD, str(index.folder)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -9, proc.stderr  # really killed (SIGKILL), not a clean exit
    work = index.folder / ".pruned.build"
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("range-")) == [
        "range-000000.npz",
        "range-000001.npz",
    ]
    assert _digests(index.folder / "pruned") == old  # the old copy, whole
    assert Index.open(index.folder, verify=True).pruned().rule == {"kind": "top_k", "value": 2}
    kept = {name: digest for name, digest in _digests(work).items() if name.startswith("range-")}
    resumed = []
    copy = open_or_build(
        index.folder,
        index.docs,
        index.postings,
        index.metadata["content_hash"],
        "mass=0.5",
        max_entries=700,
        on_range=resumed.append,
    )
    assert resumed[0] == 2 and len(resumed) >= 2  # only the ranges the killed run had not stored
    assert not work.exists() and copy.rule == {"kind": "mass", "value": 0.5}
    # an uninterrupted build in a second folder: the same files, byte for byte
    other = Index.from_vectors(tmp_path / "other", docs, ids)
    open_or_build(other.folder, other.docs, other.postings, other.metadata["content_hash"], "mass=0.5", max_entries=700)
    assert _digests(index.folder / "pruned") == _digests(other.folder / "pruned")
    assert kept  # (the stored ranges were reused, not rewritten: resumed starts at 2)
    Index.open(index.folder, verify=True)


# ----------------------------------------------------------------------------------- hostile copies
@pytest.fixture
def stored(tmp_path):
    docs, queries, ids = corpus(5)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    index.pruned("top_k=4")
    return index, docs, queries, ids


def _open_two_step(folder: Path, verify: bool = False):
    index = Index.open(folder, verify=verify)
    index.check(TwoStepConfig())
    return index.search(sp.csr_matrix((1, index.docs.shape[1]), dtype=np.float32), k=1, searcher=TwoStepConfig())


def test_a_copy_of_another_index_is_refused_naming_pruned_json(stored, tmp_path):
    index, docs, _, ids = stored
    other_docs = docs.copy()
    other_docs.data = other_docs.data + 1
    other = Index.from_vectors(tmp_path / "other", other_docs, ids)
    other.pruned("top_k=4")
    shutil.rmtree(index.folder / "pruned")
    shutil.copytree(other.folder / "pruned", index.folder / "pruned")
    with pytest.raises(DataFormatError, match="content_hash") as info:
        _open_two_step(index.folder)
    assert info.value.path == index.folder / "pruned" / "pruned.json"
    # the same with its record forged to this index's hash: its lists are not this index's
    record = json.loads((index.folder / "pruned" / "pruned.json").read_text())
    record["content_hash"] = index.metadata["content_hash"]
    (index.folder / "pruned" / "pruned.json").write_text(json.dumps(record))
    with pytest.raises(DataFormatError, match="is not part of the index's") as info:
        _open_two_step(index.folder)
    assert info.value.path == index.folder / "pruned" / "postings.indices.npy"


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda r: r.pop("rule"), "rule"),
        (lambda r: r.update(rule={"kind": "top_k", "value": -1}), "rule"),
        (lambda r: r.update(rule={"kind": "exec", "value": "os.system"}), "rule"),
        (lambda r: r.update(nnz=10**12), None),
        (lambda r: r.update(num_docs=3), "num_docs"),
        (lambda r: r.update(nnz="12"), "nnz"),
    ],
)
def test_a_malformed_record_is_refused_before_searching(stored, change, field):
    index, *_ = stored
    path = index.folder / "pruned" / "pruned.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(DataFormatError) as info:
        _open_two_step(index.folder)
    assert "pruned" in str(info.value.path) and (field is None or info.value.field == field), str(info.value)


def test_altered_arrays_are_refused_naming_the_file(stored):
    index, *_ = stored
    folder = index.folder / "pruned"
    data = np.load(folder / "postings.data.npy")
    np.save(
        folder / "postings.data.npy", np.array(list(data), dtype=object), allow_pickle=True
    )  # a pickle: never loaded
    with pytest.raises(DataFormatError, match="cannot read") as info:
        _open_two_step(index.folder)
    assert info.value.path == folder / "postings.data.npy"
    np.save(folder / "postings.data.npy", data * 2)  # impacts changed
    with pytest.raises(DataFormatError) as info:
        _open_two_step(index.folder)
    assert info.value.path == folder / "postings.indices.npy"
    np.save(folder / "postings.data.npy", data)
    indptr = np.load(folder / "postings.indptr.npy")
    np.save(folder / "postings.indptr.npy", indptr[::-1].copy())
    with pytest.raises(DataFormatError, match="offsets") as info:
        _open_two_step(index.folder)
    np.save(folder / "postings.indptr.npy", indptr)
    _open_two_step(index.folder, verify=True)  # restored: accepted
    # a change the cheap checks do not see (a middle list's impact) is found by the hash
    middle = int(np.argsort(np.diff(indptr))[len(indptr) // 2])
    altered = data.copy()
    altered[indptr[middle]] += 1
    np.save(folder / "postings.data.npy", altered)
    with pytest.raises(DataFormatError, match="postings_hash") as info:
        _open_two_step(index.folder, verify=True)
    assert info.value.path == folder / "pruned.json"


def test_damaged_document_rows_are_refused_not_read(stored):
    # a row offset beyond the entries (the last offset intact, so the folder opens unverified), then a
    # column beyond the vocabulary: the rescoring's compiled loops check no bound, so both are checked
    # before they run
    index, docs, queries, _ = stored
    path = index.folder / "docs.indptr.npy"
    original = np.load(path)
    indptr = original.copy()
    indptr[1 : len(indptr) - 1] = indptr[-1] + 1000
    np.save(path, indptr)
    damaged = Index.open(index.folder)
    with pytest.raises(ValueError, match="docs.indptr.npy is damaged"):
        damaged.search(queries, k=5, searcher=TwoStepConfig(candidates=docs.shape[0]))
    np.save(path, original)
    columns = np.load(index.folder / "docs.indices.npy")
    columns[len(columns) // 2] = docs.shape[1] + 7  # a column outside the vocabulary
    np.save(index.folder / "docs.indices.npy", columns)
    with pytest.raises(ValueError, match="docs.indices.npy is damaged"):
        Index.open(index.folder).search(
            queries, k=5, searcher=TwoStepConfig(candidates=docs.shape[0], first_query=None)
        )


def test_a_link_out_of_the_index_folder_is_refused_read_or_built_through(stored, tmp_path):
    index, *_ = stored
    folder = index.folder / "pruned"
    outside = tmp_path / "outside"
    outside.mkdir()
    # an array of the copy that is a link to a file elsewhere (the same bytes: every other check passes)
    shutil.move(folder / "postings.data.npy", outside / "postings.data.npy")
    (folder / "postings.data.npy").symlink_to(outside / "postings.data.npy")
    for do in (lambda: _open_two_step(index.folder), lambda: _open_two_step(index.folder, verify=True)):
        with pytest.raises(DataFormatError, match="outside the index folder") as info:
            do()
        assert info.value.path == folder / "postings.data.npy"
    # pruned/ itself a link to a folder elsewhere
    shutil.move(outside / "postings.data.npy", folder / "postings.data.npy", copy_function=shutil.copy)
    shutil.move(folder, outside / "pruned")
    folder.symlink_to(outside / "pruned")
    with pytest.raises(DataFormatError, match="outside the index folder") as info:
        _open_two_step(index.folder)
    assert info.value.path == folder
    # no copy, and the build folder a link elsewhere: building through it would write range files
    # there and clear its done/ folder
    folder.unlink()
    (outside / "done").mkdir()
    (outside / "done" / "keep.txt").write_text("not spladekit's")
    (index.folder / ".pruned.build").symlink_to(outside)
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    with pytest.raises(DataFormatError, match="outside the index folder") as info:
        Index.open(index.folder).pruned("top_k=4")
    assert info.value.path == index.folder / ".pruned.build"
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before
    assert (outside / "done" / "keep.txt").read_text() == "not spladekit's"


# ----------------------------------------------------------------------------------- serve
def test_serve_offers_two_step_only_with_a_stored_copy(tmp_path):
    """The service in this process over an index of vectors (no query model): without a stored copy
    two-step search is refused with the reason, never built; with one it answers as Index.search."""
    from pydantic import ValidationError

    from spladekit.serve.config import ServeConfig
    from spladekit.serve.service import Service

    docs, queries, ids = corpus(6)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    service = Service(ServeConfig(index=str(index.folder)), threads=1)
    assert (
        "two_step" not in service.backends
        and "pruned copy stored" in service.info()["unavailable_backends"]["two_step"]
    )
    vector = {"indices": queries[0].indices.tolist(), "values": queries[0].data.tolist()}
    with pytest.raises(ValidationError, match="backend 'two_step' is not available on this server"):
        service.request_model.model_validate({"vector": vector, "backend": "two_step"})
    assert not (index.folder / "pruned").exists()
    index.pruned("top_k=3")
    service = Service(ServeConfig(index=str(index.folder)), threads=1)
    assert service.backends[-1] == "two_step" and "two_step" not in service.info()["unavailable_backends"]
    request = service.request_model.model_validate(
        {"vector": vector, "backend": "two_step", "k": 7, "two_step": {"candidates": 9}}
    )
    answer = service.run_batch([request])[0]
    want = index.search(queries[0], k=7, searcher=TwoStepConfig(candidates=9)).hits[0]
    assert [(h["id"], h["score"]) for h in answer["results"][0]["hits"]] == want
