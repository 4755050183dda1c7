#!/usr/bin/env bash
# A test build of the extension with sanitizers (the glue and the core;
# never one to install for use) and the pg_regress suite run against it,
# in a copy of the committed tree, so that a normal build's objects stay as
# they are. Exits non-zero when a test fails or a sanitizer reports.
#   scripts/sanitize.sh [WORKDIR]
# TSDG_SANITIZERS picks the -fsanitize= list (default: undefined).
# PostgreSQL's own binaries are not instrumented, so the server loads the
# sanitizers' runtimes with LD_PRELOAD: UBSan's works so; AddressSanitizer's
# stops Debian's postgres binary right after its initialization, so an
# address run needs a PostgreSQL built with it.
source "$(dirname "$0")/common.sh"

work=${1:-$(mktemp -d /tmp/pg_tsdg_sanitize.XXXXXX)}
sanitizers=${TSDG_SANITIZERS:-undefined}
mkdir -p "$work/tree" "$work/reports"
chmod 755 "$work"
chmod 777 "$work/reports"
git -C "$TSDG_ROOT" archive HEAD | tar -x -C "$work/tree"

sanitized_make() {
  make -s --no-print-directory -C "$work/tree" BUILD_TYPE=Debug \
    TSDG_CMAKE_OPTIONS="-DTSDG_WITH_CUDA=OFF -DTSDG_SANITIZE=$sanitizers" \
    TSDG_EXTRA_CFLAGS="-fsanitize=$sanitizers -fno-omit-frame-pointer -fno-sanitize-recover=all" \
    TSDG_EXTRA_LDFLAGS="-fsanitize=$sanitizers" \
    PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config "$@"
}
log "building with -fsanitize=$sanitizers in $work/tree"
sanitized_make -j"$(nproc)"

# a private copy of PostgreSQL with the sanitized modules, whatever
# TSDG_PG_PREFIX says: the normal install stays as it is
prefix=$work/pg
export PATH=$prefix/usr/lib/postgresql/$PG_MAJOR/bin:$PATH
mkdir -p "$prefix/usr/lib" "$prefix/usr/share"
cp -a /usr/lib/postgresql "$prefix/usr/lib/"
cp -a /usr/share/postgresql "$prefix/usr/share/"
sanitized_make install DESTDIR="$prefix" >/dev/null

runtimes=""
for runtime in ${sanitizers//,/ }; do
  case $runtime in
    address) runtimes="$runtimes:$(gcc -print-file-name=libasan.so)" ;;
    undefined) runtimes="$runtimes:$(gcc -print-file-name=libubsan.so)" ;;
  esac
done
port=${TSDG_SANITIZE_PORT:-54339}
trap 'stop_cluster "$work"' EXIT
# leaks are not looked for: a backend leaves its memory to process exit
LD_PRELOAD=${runtimes#:} ASAN_OPTIONS="detect_leaks=0:log_path=$work/reports/asan" \
  UBSAN_OPTIONS="print_stacktrace=1:log_path=$work/reports/ubsan" \
  start_cluster "$work" "$port" "autovacuum = off" "tsdg.worker_backend = cpu"

log "pg_regress suite against the sanitized build"
failed=0
sanitized_make installcheck || failed=1
[ "$failed" -eq 0 ] || head -100 "$work/tree/regression.diffs" 2>/dev/null

reports=$(find "$work/reports" -type f | sort)
if [ -n "$reports" ]; then
  log "sanitizer reports"
  for report in $reports; do echo "== $report"; head -60 "$report"; done
  failed=1
fi
[ "$failed" -eq 0 ] && log "the regression suite passed on the sanitized build, with no sanitizer report"
exit "$failed"
