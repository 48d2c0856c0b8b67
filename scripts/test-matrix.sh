#!/usr/bin/env bash
# Run the test suite under each CPU/BLAS environment the suite must pass in, one after the other,
# and print pass/fail per environment (issue 11). CI runs plain `make test` only; this is for a
# person checking that a change holds on every code path of this machine.
#
#   scripts/test-matrix.sh [pytest args...]     e.g. scripts/test-matrix.sh tests/model/test_fused.py
#
# Environment: PY (the Python with pytest; default .venv/bin/python), XDIST (default "-n 2 --dist loadgroup", as
# `make test`). Exit status: the number of environments that failed (0 = all passed).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
XDIST=${XDIST:--n 2 --dist loadgroup}
LOGS=${LOGS:-$(mktemp -d -t spladekit-test-matrix.XXXXXX)}

# name | environment assignments (space-separated) | pytest options replacing $XDIST
ENVIRONMENTS=(
  "plain||"
  "OMP_NUM_THREADS=1|OMP_NUM_THREADS=1|"
  "MKL_CBWR=AVX2|MKL_CBWR=AVX2|"
  "MKL_CBWR=COMPATIBLE|MKL_CBWR=COMPATIBLE|"
  "ATEN_CPU_CAPABILITY=default|ATEN_CPU_CAPABILITY=default|"
  "serial (-p no:xdist)||-p no:xdist"
)

failed=0
summary=()
for entry in "${ENVIRONMENTS[@]}"; do
  IFS='|' read -r name assignments options <<<"$entry"
  log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_=-' '_').log"
  options=${options:-$XDIST}
  echo "=== $name: env $assignments $PY -m pytest $options -q $*"
  start=$(date +%s)
  # shellcheck disable=SC2086  # word splitting of the assignments and options is intended
  env $assignments "$PY" -m pytest $options -q -p no:cacheprovider "$@" >"$log" 2>&1
  rc=$?
  tail_line=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$log" | tail -n 1)
  status=PASS
  if [ "$rc" -ne 0 ]; then status=FAIL; failed=$((failed + 1)); grep -E '^(FAILED|ERROR) ' "$log"; fi
  summary+=("$(printf '%-28s %s (rc %s, %ss) %s' "$name" "$status" "$rc" "$(( $(date +%s) - start ))" "$tail_line")")
done
echo
echo "=== test matrix (logs in $LOGS)"
printf '%s\n' "${summary[@]}"
exit "$failed"
