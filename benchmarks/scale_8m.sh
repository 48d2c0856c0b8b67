#!/usr/bin/env bash
# Issue 35 parts 2-3: the 8.8M row (spladekit exact, Seismic by shards, PISA MaxScore / BlockMaxWAND)
# and `spladekit serve` on the Seismic shards, in an order that fits a 2-core, 24 GB machine:
#   1. spladekit's bounded build (≈ 8 CPU min, 1 GiB budget, 28 GB on disk) beside PISA's build
#      (≈ 42 CPU min, peak ≈ 17 GB estimated): one core each, together ≈ 19 GB;
#   2. Seismic by shards only after PISA's build has ended (a shard's build ≈ 5-10 GB would not fit
#      beside PISA's peak), RAYON_NUM_THREADS=2 (both cores);
#   3. every search phase one after the other on the otherwise idle machine (exact, PISA, Seismic),
#      SPLADEKIT_BENCH_QUERIES queries (SPLADEKIT_BENCH_ONE of them one per call);
#   4. the tables (tables.md, results.json), then benchmarks/serve.py on the same folder with --backend seismic,
#      1 and 8 clients, SERVE_WORKERS workers (default "1 2"; "none" skips serving), --share-index (workers forked
#      after the load: one copy of the shards; SERVE_SHARE=0 loads them in each worker, ≈ 10 GB a worker at 8.8M).
# Each phase is its own process (its peak RSS is its own); results go to $WORK/*.json, logs to $WORK/*.log.
#
#   bash benchmarks/scale_8m.sh [DOCS=8800000] [WORK=/tmp/b35] [SHARDS=8]
# PISA=0 leaves PISA out (its build, ≈ 1 h of one core and a 17.6 GB peak, and its searches, ≈ 40 min): the
# rest of the row then fits in ≈ 1.5 h; the tables name what was not run.
# SHARDS=8 is the library's default at 8.8M (11 GiB ÷ 51.2 B an entry = 231M entries, `build_bytes_per_entry`; 1,739M entries
# in 8 ranges of ≈ 217M; 12 until 6 Dec 22:00, by 14 GiB ÷ 96 B).
# A small DOCS (e.g. 20000) checks the script itself in minutes.
# SPLADEKIT_BENCH_N_POSTINGS=42000 builds the shards with that n_postings (the whole index's; each shard its
# share; default the library's 3500) and SPLADEKIT_BENCH_MAX_FRACTION=24 with that max_fraction (default the
# library's 6: on this synthetic corpus recall@10 0.88 at 10 / 0.7, 24 gives 0.92; benchmarks/RESULTS.md);
# SPLADEKIT_BENCH_NKNN=30 builds each shard's k-NN graph of that size (≈ 4x the build time), searched with
# SPLADEKIT_BENCH_SHARD_SETTINGS entries of the form query_cut:heap_factor:n_knn (e.g. "10:0.7:30,20:0.8:30").
set -euo pipefail
cd "$(dirname "$0")/.."
DOCS=${1:-8800000}
WORK=${2:-/tmp/b35}
SHARDS=${3:-8}
PY=${PY:-.venv/bin/python}
CORPUS=synthetic-$DOCS
export PYTHONPATH=src SPLADEKIT_BENCH_QUERIES=${SPLADEKIT_BENCH_QUERIES:-100} SPLADEKIT_BENCH_ONE=${SPLADEKIT_BENCH_ONE:-30}
mkdir -p "$WORK"
phase() {  # phase NAME [env...]: one process, its JSON line to $WORK/NAME.json
    local name=$1; shift
    echo "$(date -u +%H:%M:%S) $name (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    env "$@" "$PY" benchmarks/retrieval.py --phase "$name" --corpus "$CORPUS" --work "$WORK" > "$WORK/$name.out" 2> "$WORK/$name.log"
    tail -n 1 "$WORK/$name.out" > "$WORK/$name.json"  # the phase's result is its last line (PISA logs to stdout before it)
}
"$PY" -c "import sys; sys.path.insert(0, 'benchmarks'); import retrieval; retrieval.scifact_vectors()"  # the cache, once
if [ "${PISA:-1}" != 0 ]; then phase pisa_build & PISA_PID=$!; fi
phase build
if [ "${PISA:-1}" != 0 ]; then wait "$PISA_PID"; fi
phase seismic_shards_build SPLADEKIT_BENCH_SHARD_COUNT="$SHARDS" RAYON_NUM_THREADS=2
phase search
if [ "${PISA:-1}" != 0 ]; then phase pisa_search; fi
phase seismic_shards_search SPLADEKIT_BENCH_SHARD_COUNT="$SHARDS"
SPLADEKIT_BENCH_SHARDS="$SHARDS" "$PY" -c '
import json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
import retrieval
work, corpus, shards = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
r = {name: json.loads((work / f"{name}.json").read_text()) for name in ("build", "search", "pisa_build", "pisa_search")
     if (work / f"{name}.json").exists()}  # PISA=0: no PISA rows
for step in ("build", "search"):
    r[f"seismic_shards_{step}_{shards}"] = json.loads((work / f"seismic_shards_{step}.json").read_text())
(work / "results.json").write_text(json.dumps({corpus: r}, indent=1))
print(retrieval.table(corpus, r) + "\n\n" + retrieval.shard_table(corpus, r))
' "$WORK" "$CORPUS" "$SHARDS" > "$WORK/tables.md"
cat "$WORK/tables.md"
if [ "${SERVE_WORKERS:-1 2}" != none ]; then  # SERVE_WORKERS="1" serves with one worker only; "none" skips serving
    echo "$(date -u +%H:%M:%S) serve" >&2
    workers=(); for w in ${SERVE_WORKERS:-1 2}; do workers+=(--workers "$w"); done
    share=(--share-index); [ "${SERVE_SHARE:-1}" = 0 ] && share=()  # SERVE_SHARE=0: each worker loads its own shards
    "$PY" benchmarks/serve.py --index "$WORK/$CORPUS/spladekit" --backend seismic --clients 1 --clients 8 "${workers[@]}" "${share[@]}" \
        --anchor-queries "$SPLADEKIT_BENCH_QUERIES" --no-overload --out "$WORK/serve.json" > "$WORK/serve.log" 2>&1
fi
echo "$(date -u +%H:%M:%S) done: $WORK (tables.md, results.json, serve.json)" >&2
