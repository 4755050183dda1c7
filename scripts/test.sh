#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the unit tests
# (ctest), the pg_regress suite and the script tests against a private cluster
# started with shared_preload_libraries = 'pg_tsdg'. Exits non-zero on any failure.
source "$(dirname "$0")/common.sh"
cd "$TSDG_ROOT"

install_dependencies
build_and_install

log "unit tests (ctest)"
ctest --test-dir build --output-on-failure -j"$(nproc)"

work=$(mktemp -d /tmp/pg_tsdg_test.XXXXXX)
chmod 755 "$work"
port=${TSDG_TEST_PORT:-54329}
trap 'stop_cluster "$work"; [ -n "${KEEP_TEST_DIR:-}" ] || rm -rf "$work"' EXIT
log "starting a private cluster in $work"
start_cluster "$work" "$port"

log "pg_regress suite"
if ! make installcheck; then
  cat regression.diffs 2>/dev/null | head -200
  exit 1
fi

failed=0
for t in test/tap/*.sh; do
  [ -e "$t" ] || continue
  log "script test $t"
  if ! bash "$t" "$work"; then
    echo "FAILED: $t"
    failed=$((failed + 1))
  fi
done
[ "$failed" -eq 0 ] || { echo "$failed script test(s) failed"; exit 1; }
log "all tests passed"
