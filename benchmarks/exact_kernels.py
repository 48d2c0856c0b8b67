"""Where exact search's two kernels cross: scipy's sparse product vs term at a time; and, with
``--blocks``, the term-at-a-time kernel's document block (``DOC_BLOCK``).

``spladekit.index.exact.search_postings`` scores a query term at a time when its terms' mean
posting-list length is at least ``TAAT_FROM``, else by scipy's product over a block of queries. This
prints, per corpus size, the CPU ms per query of each kernel forced (``TAAT_FROM`` = ∞ / 0) on the
synthetic corpora of ``benchmarks/retrieval.py`` (built in memory) and the first 100 SciFact test
queries, k = 10, 1 thread, with the ratio measured in the same run.

    PYTHONPATH=src python benchmarks/exact_kernels.py --docs 20000 --docs 100000 --docs 300000

With ``--blocks B`` (repeatable) it prints instead, per corpus size, term at a time forced with each
``DOC_BLOCK`` = B and with one block (B ≥ D: the unblocked kernel, the anchor), CPU ms per query and
the ratio to the anchor, measured in the same run (interleaved, median of ``--repeats``):

    PYTHONPATH=src python benchmarks/exact_kernels.py --docs 1000000 --blocks 32768 --blocks 131072 --blocks 524288

With ``--prune`` it prints, per corpus size and k (10, 100, 1000), term at a time with every posting
added (the anchor) against the pruned kernel (``spladekit.index.maxscore``: MaxScore over blocks)
at each ``--prune-block`` × ``--candidate-cost`` (defaults: the library's), CPU ms per query and the
ratio to the anchor, interleaved, median of ``--repeats``; the block maxima are filled by a first,
untimed pass (its time printed), and every pruned list is checked equal to the anchor's:

    PYTHONPATH=src python benchmarks/exact_kernels.py --docs 200000 --docs 1000000 --prune --candidate-cost 1000 --candidate-cost 4000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import retrieval
import scipy.sparse as sp

import spladekit.index.exact as exact
import spladekit.index.maxscore as maxscore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, action="append", help="corpus sizes (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--blocks", type=int, action="append", help="DOC_BLOCK sizes to compare with one block (repeatable)"
    )
    parser.add_argument("--prune", action="store_true", help="pruned kernel against every posting added")
    parser.add_argument("--prune-block", type=int, action="append", help="PRUNE_BLOCK values (repeatable)")
    parser.add_argument("--candidate-cost", type=int, action="append", help="CANDIDATE_COST values (repeatable)")
    args = parser.parse_args()
    if args.prune:
        return pruning(args)
    if args.blocks:
        return block_sizes(args)
    queries = retrieval.queries()[0][:100].tocsr().astype(np.float32)
    print(
        "| documents | mean list length (median over queries) | product ms/q | term at a time ms/q | product ÷ term at a time |"
    )
    print("|---|---|---|---|---|")
    for n in args.docs or [20_000, 100_000]:
        blocks, _, _ = retrieval.corpus_blocks(f"synthetic-{n}")
        postings = sp.vstack(list(blocks())).tocsr().astype(np.float32).T.tocsr()
        lengths = np.diff(postings.indptr)[queries.indices]
        mean_list = np.median(np.add.reduceat(lengths, queries.indptr[:-1]) / np.diff(queries.indptr))
        timing = {}
        for name, switch in [("product", 10**18), ("taat", 0)] * args.repeats:
            exact.TAAT_FROM = switch
            began = time.process_time()
            exact.search_postings(queries, postings, 10)
            timing.setdefault(name, []).append((time.process_time() - began) / queries.shape[0] * 1e3)
        product, taat = np.median(timing["product"]), np.median(timing["taat"])
        print(f"| {n} | {mean_list:.0f} | {product:.2f} | {taat:.2f} | {product / taat:.2f} |")


def block_sizes(args) -> None:
    """Term at a time forced (``TAAT_FROM`` 0), each ``DOC_BLOCK`` against one block, interleaved."""
    queries = retrieval.queries()[0][:100].tocsr().astype(np.float32)
    print("| documents | DOC_BLOCK | term at a time CPU ms/q | ÷ one block |")
    print("|---|---|---|---|")
    exact.TAAT_FROM = 0
    for n in args.docs or [1_000_000]:
        blocks_of, _, _ = retrieval.corpus_blocks(f"synthetic-{n}")
        postings = sp.vstack(list(blocks_of())).tocsr().astype(np.float32).T.tocsr()
        sizes = [n + 1] + sorted(set(args.blocks))
        timing = {}
        exact.search_postings(queries[:5], postings, 10)  # warm-up
        for _ in range(args.repeats):
            for size in sizes:
                exact.DOC_BLOCK = size
                began = time.process_time()
                exact.search_postings(queries, postings, 10)
                timing.setdefault(size, []).append((time.process_time() - began) / queries.shape[0] * 1e3)
        anchor = np.median(timing[n + 1])
        for size in sizes:
            label = "one block (anchor)" if size == n + 1 else str(size)
            print(f"| {n} | {label} | {np.median(timing[size]):.2f} | {np.median(timing[size]) / anchor:.2f} |")
        del postings


def pruning(args) -> None:
    """Every posting added (``TAAT_FROM`` 0, no maxima) against the pruned kernel, interleaved."""
    queries = retrieval.queries()[0][:100].tocsr().astype(np.float32)
    exact.TAAT_FROM, exact.PRUNE_FROM = 0, 0
    print(
        "| documents | k | PRUNE_BLOCK | CANDIDATE_COST | every posting CPU ms/q | pruned CPU ms/q | pruned ÷ every posting | maxima fill s | same lists |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.docs or [200_000]:
        blocks, _, _ = retrieval.corpus_blocks(f"synthetic-{n}")
        postings = sp.vstack(list(blocks())).tocsr().astype(np.float32).T.tocsr()
        for block in args.prune_block or [maxscore.PRUNE_BLOCK]:
            maxima = maxscore.BlockMaxima(postings, block)
            began = time.process_time()
            exact.search_postings(queries, postings, 10, maxima=maxima)  # fills the maxima of every query term
            fill = time.process_time() - began
            for k in (10, 100, 1000):
                for cost in args.candidate_cost or [maxscore.CANDIDATE_COST]:
                    maxscore.CANDIDATE_COST = cost
                    timing, found = {}, {}
                    for name, given in [("every", None), ("pruned", maxima)] * args.repeats:
                        began = time.process_time()
                        found[name] = exact.search_postings(queries, postings, k, maxima=given)
                        timing.setdefault(name, []).append((time.process_time() - began) / queries.shape[0] * 1e3)
                    every, pruned = np.median(timing["every"]), np.median(timing["pruned"])
                    print(
                        f"| {n} | {k} | {block} | {cost} | {every:.2f} | {pruned:.2f} | {pruned / every:.2f} | {fill:.2f} | {found['every'] == found['pruned']} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
