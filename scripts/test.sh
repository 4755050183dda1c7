#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the unit tests
# (ctest), the pg_regress suite against a private cluster started with
# shared_preload_libraries = 'pg_tsdg' and the TAP tests (test/t, each on
# servers of its own), then both again on stock servers without the preload,
# where each session loads the library itself (TSDG_TEST_NO_PRELOAD=0 leaves
# those runs out). Exits non-zero on any failure.
source "$(dirname "$0")/common.sh"
cd "$TSDG_ROOT"

install_dependencies
build_and_install

log "unit tests (ctest)"
ctest --test-dir build --output-on-failure -j"$(nproc)"

work=$(mktemp -d /tmp/pg_tsdg_test.XXXXXX)
chmod 755 "$work"
port=${TSDG_TEST_PORT:-54329}
trap 'stop_cluster "$work/preload"; stop_cluster "$work/no_preload"; [ -n "${KEEP_TEST_DIR:-}" ] || rm -rf "$work"' EXIT

# regress DIR PORT [postgresql.conf lines...]: the pg_regress suite against
# a cluster of its own in DIR
regress() {
  local dir=$1
  start_cluster "$@"
  if ! make installcheck; then
    cat regression.diffs 2>/dev/null | head -200
    return 1
  fi
  stop_cluster "$dir"
}

log "pg_regress suite, pg_tsdg preloaded"
regress "$work/preload" "$port"
if [ "${TSDG_TEST_NO_PRELOAD:-1}" = 1 ]; then
  log "pg_regress suite, pg_tsdg not preloaded"
  regress "$work/no_preload" $((port + 1)) "shared_preload_libraries = ''"
fi

log "TAP tests (test/t)"
run_tap_tests "$work/tap"
if [ "${TSDG_TEST_NO_PRELOAD:-1}" = 1 ]; then
  # again on stock servers, crash recovery and replication included; the
  # worker's tests skip there, and the recall test is left out: its sessions
  # search on the CPU either way, and it is the longest
  log "TAP tests (test/t), pg_tsdg not preloaded"
  tests=()
  for t in test/t/*.pl; do
    [ "$t" = test/t/001_recall.pl ] || tests+=("$t")
  done
  TSDG_TAP_PRELOAD=0 run_tap_tests "$work/tap_no_preload" "${tests[@]}"
fi
log "all tests passed"
