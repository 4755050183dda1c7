#!/usr/bin/env bash
# The TAP tests alone, for a quicker loop than scripts/test.sh: builds and
# installs (unless TSDG_SKIP_BUILD=1), then runs the tests named, or all of
# test/t, each on clusters of its own; their logs stay in the directory
# printed at the end.
#   bash scripts/tap.sh [test/t/NNN_name.pl...]
source "$(dirname "$0")/common.sh"
[ -n "${TSDG_SKIP_BUILD:-}" ] || build_and_install
work=$(mktemp -d /tmp/pg_tsdg_tap.XXXXXX)
chmod 755 "$work"
status=0
run_tap_tests "$work" "$@" || status=$?
echo "logs: $work/tmp_check/log"
exit $status
