"""The Index: built once (streamed, resumable), opened memory-mapped, searched; shards; older folders refused.

Reference values are computed independently: scores by a dense float64 dot product (numpy); older
folders are written by hand (``scipy.sparse.save_npz``, JSON).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.index import Index, ShardedIndex
from spladekit.index.results import recall_at_k
from spladekit.io import atomic_folder, recover_folder
from tests.index_helpers import DOCS, QUERIES, make_beir, make_model

EPS32 = np.finfo(np.float32).eps


def random_vectors(rows: int, vocab: int, density: float, seed: int, integer: bool = False) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    m = sp.random(rows, vocab, density=density, random_state=rng, format="csr", dtype=np.float32)
    if integer:  # small integers: every float32 sum below 2^24 is exact, so ties are real ties
        m.data = rng.integers(1, 4, size=m.nnz).astype(np.float32)
    return m


def shuffled_ids(n: int, seed: int) -> list[str]:
    """Document ids whose sorted order is not the row order (so the tie rule is visible)."""
    perm = np.random.default_rng(seed).permutation(n)
    return [f"doc{p:05d}" for p in perm]


def truth_ranking(q: np.ndarray, d: np.ndarray, ids: list[str], k: int) -> list[list[tuple[str, float]]]:
    """Brute force: float64 dense scores, score desc then id asc, score > 0."""
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    out = []
    for row in scores:
        order = sorted((i for i in range(len(ids)) if row[i] > 0), key=lambda i: (-row[i], ids[i]))[:k]
        out.append([(ids[i], float(row[i])) for i in order])
    return out


def test_exact_search_equals_dense_dot_product_within_float32_bound(tmp_path):
    docs, queries = random_vectors(400, 60, 0.1, 1), random_vectors(25, 60, 0.15, 2)
    ids = shuffled_ids(400, 3)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    got = index.search(queries, k=20)
    q, d = queries.toarray(), docs.toarray()
    exact = q.astype(np.float64) @ d.astype(np.float64).T
    # float32 accumulation of n products: |error| ≤ n·eps·Σ|q_j d_j| (Higham, γ_n bound), n ≤ query terms
    n_terms = np.diff(queries.indptr)
    bound = (n_terms[:, None] + 1) * EPS32 * (np.abs(q).astype(np.float64) @ np.abs(d).astype(np.float64).T)
    position = {doc: i for i, doc in enumerate(ids)}
    for qi, hits in enumerate(got.hits):
        row, tol = exact[qi], bound[qi]
        for doc, score in hits:
            assert abs(score - row[position[doc]]) <= tol[position[doc]]
        # every document clearly above the k-th returned score is returned, none clearly above is missing
        if len(hits) == 20:
            kth = hits[-1][1]
            clearly_in = {ids[i] for i in np.flatnonzero(row > kth + 2 * tol.max())}
            assert clearly_in <= {doc for doc, _ in hits}
        else:
            assert {doc for doc, _ in hits} == {ids[i] for i in np.flatnonzero(row > 0)}


def test_ties_break_by_document_id_and_one_at_a_time_equals_batch(tmp_path):
    docs, queries = random_vectors(300, 20, 0.2, 4, integer=True), random_vectors(15, 20, 0.2, 5, integer=True)
    ids = shuffled_ids(300, 6)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    batch = index.search(queries, k=10)
    # integer data: float32 sums are exact, so the brute-force ranking (ties included) must match exactly
    assert batch.hits == truth_ranking(queries.toarray(), docs.toarray(), ids, 10)
    single = index.search(queries, k=10, one_at_a_time=True)
    assert single.hits == batch.hits  # same code path, one row at a time: same bits
    assert single.latency.mode == "one_at_a_time" and single.latency.num_queries == 15
    assert batch.latency.num_queries == 15 and batch.latency.mean_ms >= 0
    assert batch.settings.tie_rule.startswith("score descending, then document id")


def mapped(array) -> bool:
    """The array is a view of a memory-mapped file (not a copy in memory)."""
    import mmap

    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False


def test_open_memory_maps_and_search_copies_nothing(tmp_path):
    docs = random_vectors(500, 50, 0.1, 7)
    Index.from_vectors(tmp_path / "i", docs, [f"d{i}" for i in range(500)], {"model": "m"})
    index = Index.open(tmp_path / "i")
    for matrix in (index.docs, index.postings):
        for array in (matrix.data, matrix.indices, matrix.indptr):
            assert mapped(array) and not array.flags.writeable
    assert np.array_equal(index.docs.toarray(), docs.toarray())  # stored as float32: exact round trip
    assert np.array_equal(index.postings.toarray(), docs.toarray().T)  # the term-major copy is the transpose
    index.search(random_vectors(3, 50, 0.2, 8), k=5)
    assert mapped(index.postings.data) and mapped(
        index.postings.indices
    )  # scipy did not convert (copy) the posting arrays
    stored = sum(
        (tmp_path / "i" / f"{m}.{p}.npy").stat().st_size
        for m in ("docs", "postings")
        for p in ("indptr", "indices", "data")
    )
    arrays = 2 * (docs.nnz * (4 + 4)) + (500 + 1 + 50 + 1) * 4  # int32 indices, float32 data, int32 indptr
    assert arrays <= stored <= arrays + 6 * 256  # plus a .npy header (≤ 256 bytes) per array


def test_two_shards_give_the_run_of_one_folder(tmp_path):
    docs, queries = random_vectors(600, 40, 0.1, 9, integer=True), random_vectors(20, 40, 0.2, 10, integer=True)
    ids = shuffled_ids(600, 11)
    one = Index.from_vectors(tmp_path / "one", docs, ids)
    a, b = np.arange(0, 600, 2), np.arange(1, 600, 2)
    shards = ShardedIndex(
        [
            Index.from_vectors(tmp_path / "a", docs[a], [ids[i] for i in a]),
            Index.from_vectors(tmp_path / "b", docs[b], [ids[i] for i in b]),
        ]
    )
    for k in (1, 7, 100):
        # a document's score is summed over the query's terms in the same order in any folder: same bits
        assert shards.search(queries, k=k).hits == one.search(queries, k=k).hits
    # latency: each query's own time summed over the shards (not every query given the mean)
    timed = shards.search(queries, k=10, one_at_a_time=True)
    assert timed.seconds.shape == (20,) and np.unique(timed.seconds).size > 1
    assert (
        timed.latency.max_ms == pytest.approx(1000 * timed.seconds.max())
        and timed.latency.max_ms > timed.latency.mean_ms
    )
    with pytest.raises(ValueError, match="two shards"):
        ShardedIndex([one, shards.shards[0]])


def test_shards_of_different_models_or_vocabularies_are_refused(tmp_path):
    """A query vector names the same terms in every shard only when one model built them all."""
    docs = random_vectors(10, 4, 0.5, 12, integer=True)
    vocab = ["a", "b", "c", "d"]
    base = Index.from_vectors(tmp_path / "base", docs[:5], [f"x{i}" for i in range(5)], {"model": "m1"}, vocab)
    other_model = Index.from_vectors(tmp_path / "m2", docs[5:], [f"y{i}" for i in range(5)], {"model": "m2"}, vocab)
    swapped = Index.from_vectors(
        tmp_path / "v2", docs[5:], [f"z{i}" for i in range(5)], {"model": "m1"}, ["b", "a", "c", "d"]
    )
    with pytest.raises(ValueError, match="different models"):
        ShardedIndex([base, other_model])
    with pytest.raises(ValueError, match="different vocabularies"):
        ShardedIndex([base, swapped])


class CountingEncoder:
    """A real SpladeEncoder, with a record of the texts it encoded and an optional failure after
    ``fail_after`` calls (a simulated kill)."""

    def __init__(self, encoder, fail_after: int | None = None):
        self.inner, self.fail_after, self.encoded = encoder, fail_after, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode_documents(self, texts, **kwargs):
        if self.fail_after is not None and len(self.encoded) >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.encoded.append(list(texts))
        return self.inner.encode_documents(texts, **kwargs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return make_model(root / "model"), make_beir(root / "beir")


def test_build_resumes_after_a_kill_encoding_each_chunk_once(tiny, tmp_path):
    from spladekit.model.encoder import SpladeEncoder

    model, beir = tiny
    encoder = SpladeEncoder.from_pretrained(str(model), head_impl="plain")
    out = tmp_path / "index"
    killed = CountingEncoder(encoder, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        Index.build(killed, beir, out, chunk_size=2)
    assert not out.exists() and len(killed.encoded) == 2
    resumed = CountingEncoder(encoder)
    index = Index.build(resumed, beir, out, chunk_size=2)
    chunks = [DOCS[i : i + 2] for i in range(0, len(DOCS), 2)]
    assert killed.encoded + resumed.encoded == chunks  # every chunk once, none twice
    assert index.build_stats["reused"] == 2 and index.build_stats["encoded"] == len(chunks) - 2
    assert not (tmp_path / ".index.build").exists()
    # the folder holds what encoding each document alone gives (chunking changes padding only)
    want = sp.vstack([encoder.encode_documents([t]) for t in DOCS]).toarray()
    assert index.doc_ids == [f"d{i}" for i in range(len(DOCS))]
    assert np.allclose(index.docs.toarray(), want, atol=1e-5)
    # text queries are encoded with the model recorded in the index... (none recorded here: pass it)
    result = index.search(QUERIES, k=3, encoder=encoder)
    assert list(result.run) == list(QUERIES) and result.settings.query_max_length == encoder.metadata.query_max_length


def test_a_resumed_build_encodes_again_a_chunk_whose_documents_changed(tiny, tmp_path):
    """The corpus file was edited between the kill and the resume (same path, same ids): the chunk
    holding the edited document is encoded again, the untouched one is reused."""
    import shutil

    from spladekit.model.encoder import SpladeEncoder

    model, beir = tiny
    corpus = tmp_path / "beir"
    shutil.copytree(beir, corpus)
    encoder = SpladeEncoder.from_pretrained(str(model), head_impl="plain")
    out = tmp_path / "index"
    with pytest.raises(KeyboardInterrupt):
        Index.build(CountingEncoder(encoder, fail_after=2), corpus, out, chunk_size=2)
    lines = (corpus / "corpus.jsonl").read_text().splitlines()
    record = json.loads(lines[1])  # d1, in chunk 0
    record["text"] = "an edited text"
    lines[1] = json.dumps(record)
    (corpus / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    resumed = CountingEncoder(encoder)
    index = Index.build(resumed, corpus, out, chunk_size=2)
    assert resumed.encoded[0] == [DOCS[0], "an edited text"] and index.build_stats["reused"] == 1
    assert np.allclose(index.docs[1].toarray(), encoder.encode_documents(["an edited text"]).toarray(), atol=1e-5)


def test_a_resumed_build_encodes_again_when_the_model_changed_at_the_same_path(tiny, tmp_path):
    """The model folder was retrained in place between the kill and the resume (same path, same
    spladekit.json): no chunk of the old model is reused; the index equals a fresh build's."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from spladekit.model.encoder import SpladeEncoder

    model, beir = tiny
    folder = tmp_path / "model"
    shutil.copytree(model, folder)
    out = tmp_path / "index"
    with pytest.raises(KeyboardInterrupt):
        Index.build(
            CountingEncoder(SpladeEncoder.from_pretrained(str(folder), head_impl="plain"), fail_after=2),
            beir,
            out,
            chunk_size=2,
        )
    weights = load_file(folder / "model.safetensors")
    weights = {name: (t * 1.5 if t.dtype == torch.float32 else t) for name, t in weights.items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    encoder = SpladeEncoder.from_pretrained(str(folder), head_impl="plain")
    resumed = CountingEncoder(encoder)
    index = Index.build(resumed, beir, out, chunk_size=2)
    assert index.build_stats["reused"] == 0 and resumed.encoded == [DOCS[i : i + 2] for i in range(0, len(DOCS), 2)]
    fresh = Index.build(encoder, beir, tmp_path / "fresh", chunk_size=2)
    assert (index.docs != fresh.docs).nnz == 0  # the same computation twice


def test_seismic_index_is_built_once_stored_and_reopened(tmp_path):
    pytest.importorskip("seismic")
    from spladekit.index.seismic import SeismicBuildParams
    from spladekit.index.seismic_store import SeismicConfig

    docs, queries = random_vectors(800, 80, 0.08, 12), random_vectors(30, 80, 0.1, 13)
    ids = [f"d{i}" for i in range(800)]
    Index.from_vectors(tmp_path / "i", docs, ids)
    first = Index.open(tmp_path / "i").search(queries, k=10, searcher=SeismicConfig())
    stored = tmp_path / "i" / "seismic" / "index.index.seismic"
    params = json.loads((tmp_path / "i" / "seismic" / "params.json").read_text())
    assert stored.exists() and params["build"]["n_postings"] == SeismicBuildParams().n_postings
    mtime = stored.stat().st_mtime_ns
    again = Index.open(tmp_path / "i").search(queries, k=10, searcher=SeismicConfig())
    assert stored.stat().st_mtime_ns == mtime  # reopened, not rebuilt
    assert again.hits == first.hits and again.settings.seismic_build == params["build"]
    exact = Index.open(tmp_path / "i").search(queries, k=10)
    assert recall_at_k(first.hits, exact.hits, k=10) >= 0.95  # lists of 800 docs fit Seismic's 3500 budget
    assert (
        first.built == ["the Seismic index and stored it in " + str(tmp_path / "i" / "seismic")] and again.built == []
    )
    other = SeismicBuildParams(n_postings=50, summary_energy=0.2)
    Index.open(tmp_path / "i").search(queries, k=10, searcher=SeismicConfig(build=other))
    assert json.loads((tmp_path / "i" / "seismic" / "params.json").read_text())["build"]["n_postings"] == 50
    # build fields not asked for keep the stored index's: n_postings 50 stays, summary_energy changes
    Index.open(tmp_path / "i").search(
        queries, k=10, searcher=SeismicConfig(build=SeismicBuildParams(summary_energy=0.3))
    )
    built = json.loads((tmp_path / "i" / "seismic" / "params.json").read_text())["build"]
    assert built == dict(SeismicBuildParams().model_dump(), n_postings=50, summary_energy=0.3)


def test_folders_of_an_older_layout_are_refused_naming_the_file(tmp_path):
    """No reader of older layouts: format 1 (vectors.npz), ids in doc_ids.json, a folder without its
    tie ranks or hashes, and a Seismic params.json without an entry are each refused, saying rebuild it."""
    docs, ids = random_vectors(60, 30, 0.15, 14, integer=True), shuffled_ids(60, 16)
    old = tmp_path / "old"
    old.mkdir()
    sp.save_npz(old / "vectors.npz", docs)  # format 1, written by hand
    (old / "doc_ids.json").write_text(json.dumps(ids))
    (old / "index.json").write_text(json.dumps({"model": "m"}))
    with pytest.raises(DataFormatError, match="rebuild it") as raised:
        Index.open(old)
    assert raised.value.path == old / "index.json" and raised.value.field == "format"
    folder = tmp_path / "i"
    Index.from_vectors(folder, docs, ids, {"model": "m"})
    for name in ("doc_ids.offsets.npy", "doc_ids.utf8.npy"):  # the ids of an older layout, written by hand
        (folder / name).unlink()
    (folder / "doc_ids.json").write_text(json.dumps(ids))
    with pytest.raises(DataFormatError, match="rebuild") as raised:
        Index.open(folder)
    assert raised.value.path == folder / "doc_ids.json"
    Index.from_vectors(folder, docs, ids, {"model": "m"})
    (folder / "tie_rank.npy").unlink()
    with pytest.raises(DataFormatError, match="missing") as raised:
        Index.open(folder)
    assert raised.value.path == folder / "tie_rank.npy"
    Index.from_vectors(folder, docs, ids, {"model": "m"})
    meta = json.loads((folder / "index.json").read_text())
    del meta["postings_hash"]
    (folder / "index.json").write_text(json.dumps(meta))
    with pytest.raises(DataFormatError, match="no postings_hash"):
        Index.open(folder, verify=True)


def test_a_seismic_params_json_of_an_older_spladekit_is_refused(tmp_path):
    pytest.importorskip("seismic")
    docs, ids = random_vectors(60, 30, 0.15, 14), [f"d{i}" for i in range(60)]
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    index.seismic()
    params = tmp_path / "i" / "seismic" / "params.json"
    record = json.loads(params.read_text())
    for key in ("shards", "shard_postings", "shard_files"):  # the three entries older folders lacked
        params.write_text(json.dumps({name: value for name, value in record.items() if name != key}))
        with pytest.raises(DataFormatError, match="older spladekit.*rebuild it") as raised:
            Index.open(tmp_path / "i").seismic()
        assert raised.value.path == params and raised.value.field == key


@pytest.mark.parametrize("ids", [[], ["only"], ["d1", "", "ünï/cødé", "x" * 300, "日本"]])
def test_doc_ids_are_memory_mapped_and_decode_back(tmp_path, ids):
    """The stored ids read back exactly (by index, negative index, slice, iteration), empty and
    non-ASCII ids included, and opening maps them without decoding any."""
    docs = sp.csr_matrix(np.ones((len(ids), 4), dtype=np.float32)) if ids else sp.csr_matrix((0, 4), dtype=np.float32)
    index = Index.from_vectors(tmp_path / "i", docs, ids)
    got = index.doc_ids
    assert isinstance(got.offsets, np.memmap) and len(got) == len(ids)
    assert list(got) == ids and [got[i] for i in range(len(ids))] == ids and got[1:] == ids[1:]
    assert got[::-1] == ids[::-1] and got[::2] == ids[::2] and got[-2:] == ids[-2:]
    if ids:
        assert got[-1] == ids[-1]
    with pytest.raises(IndexError):
        got[len(ids)]


def test_atomic_folder_keeps_the_old_folder_until_the_new_one_is_in_place(tmp_path):
    final = tmp_path / "out"
    with atomic_folder(final) as tmp:
        (tmp / "a").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_folder(final) as tmp:
            (tmp / "a").write_text("new")
            raise RuntimeError("crash while writing")
    assert (final / "a").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # a crash between the two renames: the old folder sits at .out.old and out is missing
    final.rename(tmp_path / ".out.old")
    assert not final.exists()
    recover_folder(final)
    assert (final / "a").read_text() == "old" and not (tmp_path / ".out.old").exists()


def test_verify_recomputes_the_tie_ranks(tmp_path):
    """tie_rank.npy is derived from the ids (not hashed): a damaged one reorders ties silently, so
    verify recomputes it."""
    docs = sp.csr_matrix(np.ones((4, 3), dtype=np.float32))  # every score ties: only the ranks order them
    Index.from_vectors(tmp_path / "i", docs, ["b", "a", "d", "c"])
    assert [
        d
        for d, _ in Index.open(tmp_path / "i", verify=True)
        .search(sp.csr_matrix(np.ones((1, 3), np.float32)), k=4)
        .hits[0]
    ] == ["a", "b", "c", "d"]
    ranks = np.load(tmp_path / "i" / "tie_rank.npy")
    np.save(tmp_path / "i" / "tie_rank.npy", ranks[::-1].copy())
    with pytest.raises(DataFormatError, match="tie_rank.npy"):
        Index.open(tmp_path / "i", verify=True)


def test_a_stored_seismic_index_without_its_file_is_an_error(tmp_path):
    """params.json without the index file would search as an empty index (no hit for any query)."""
    pytest.importorskip("seismic")
    from spladekit.index.seismic import SeismicSearcher

    docs = random_vectors(60, 30, 0.2, 31, integer=True)
    Index.from_vectors(tmp_path / "i", docs, [f"d{i}" for i in range(60)]).seismic()
    (tmp_path / "i" / "seismic" / SeismicSearcher.INDEX_FILE).unlink()
    with pytest.raises(DataFormatError, match="missing: the stored Seismic index"):
        Index.open(tmp_path / "i").seismic()


def test_the_progress_bar_counts_documents_as_batches_finish(tiny, tmp_path, monkeypatch):
    """One chunk of all documents, batches of 3: the bar moves by 3, 3, ... (not once at the end)."""
    import tqdm.auto

    from spladekit.model.encoder import SpladeEncoder

    updates: list[int] = []

    class Recording(tqdm.auto.tqdm):
        def update(self, n=1):
            updates.append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    model, beir = tiny
    encoder = SpladeEncoder.from_pretrained(str(model), head_impl="plain", batch_size=3)
    Index.build(encoder, beir, tmp_path / "index", chunk_size=100, show_progress=True)
    n = len(DOCS)
    assert updates == [3] * (n // 3) + ([n % 3] if n % 3 else [])
