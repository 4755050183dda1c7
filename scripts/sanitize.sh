#!/usr/bin/env bash
# A test build of the extension with sanitizers (the glue and the core;
# never one to install for use), the core's unit tests built with them, and
# the pg_regress suite run against a server that loads them, in a copy of
# the committed tree, so that a normal build's objects stay as they are.
# Exits non-zero when a test fails or a sanitizer reports.
#   scripts/sanitize.sh [WORKDIR]
# TSDG_SANITIZERS picks the -fsanitize= list (default: address,undefined).
#
# PostgreSQL's own binaries are not instrumented, so the server loads the
# sanitizers' runtimes with LD_PRELOAD. AddressSanitizer's runtime must
# initialize before any constructor of the server's libraries allocates:
# initialized lazily inside libgpg-error's call of bindtextdomain (a library
# of the Debian server's), it leaves glibc's locale lock held and the server
# hangs at its start. The loader runs constructors in the reverse order of
# loading, so the server's own libraries are preloaded ahead of the runtime,
# all but the C and C++ runtimes, whose functions it must come before.
source "$(dirname "$0")/common.sh"

work=${1:-$(mktemp -d /tmp/pg_tsdg_sanitize.XXXXXX)}
sanitizers=${TSDG_SANITIZERS:-address,undefined}
mkdir -p "$work/tree" "$work/reports"
chmod 755 "$work"
chmod 777 "$work/reports"
git -C "$TSDG_ROOT" archive HEAD | tar -x -C "$work/tree"

# optimized, so that the unit tests' larger graphs take seconds, not minutes
sanitized_make() {
  make -s --no-print-directory -C "$work/tree" BUILD_TYPE=RelWithDebInfo \
    TSDG_CMAKE_OPTIONS="-DTSDG_WITH_CUDA=OFF -DTSDG_WITH_TESTS=ON -DTSDG_SANITIZE=$sanitizers" \
    TSDG_EXTRA_CFLAGS="-fsanitize=$sanitizers -fno-omit-frame-pointer -fno-sanitize-recover=all" \
    TSDG_EXTRA_LDFLAGS="-fsanitize=$sanitizers" \
    PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config "$@"
}
log "building with -fsanitize=$sanitizers in $work/tree"
sanitized_make -j"$(nproc)"

# each tool writes its reports to files of its own
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$work/reports/ubsan"

failed=0
log "unit tests (ctest) built with -fsanitize=$sanitizers"
ASAN_OPTIONS="log_path=$work/reports/asan-unit" \
  ctest --test-dir "$work/tree/build" --output-on-failure -j"$(nproc)" || failed=1

# a private copy of PostgreSQL with the sanitized modules, whatever
# TSDG_PG_PREFIX says: the normal install stays as it is
prefix=$work/pg
export PATH=$prefix/usr/lib/postgresql/$PG_MAJOR/bin:$PATH
mkdir -p "$prefix/usr/lib" "$prefix/usr/share"
cp -a /usr/lib/postgresql "$prefix/usr/lib/"
cp -a /usr/share/postgresql "$prefix/usr/share/"
sanitized_make install DESTDIR="$prefix" >/dev/null

preload=""
for runtime in ${sanitizers//,/ }; do
  case $runtime in
    address)
      preload="$preload:$(ldd "$prefix/usr/lib/postgresql/$PG_MAJOR/bin/postgres" |
        awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' | paste -sd:)"
      preload="$preload:$(gcc -print-file-name=libasan.so)" ;;
    undefined) preload="$preload:$(gcc -print-file-name=libubsan.so)" ;;
  esac
done
port=${TSDG_SANITIZE_PORT:-54339}
trap 'stop_cluster "$work"' EXIT
# Leaks are not looked for in the server: a backend leaves its memory to
# process exit.
export ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0:log_path=$work/reports/asan"
LD_PRELOAD=${preload#:} start_cluster "$work" "$port" "autovacuum = off" "tsdg.worker_backend = cpu"

# AddressSanitizer must be live in the backends, not merely loaded: a module
# that writes one byte past a block it allocates must be reported
if [[ ,$sanitizers, == *,address,* ]]; then
  cat >"$work/probe.c" <<'EOF'
#include "postgres.h"
#include "fmgr.h"
PG_MODULE_MAGIC;
void _PG_init(void);
void
_PG_init(void)
{
	volatile char *block = malloc(8);

	block[8] = 1;
	free((void *) block);
}
EOF
  gcc -fsanitize=address -fPIC -shared -I"$(/usr/lib/postgresql/$PG_MAJOR/bin/pg_config --includedir-server)" \
    -o "$prefix/usr/lib/postgresql/$PG_MAJOR/lib/tsdg_sanitize_probe.so" "$work/probe.c"
  psql -X -q -c "LOAD 'tsdg_sanitize_probe'" >/dev/null 2>&1 || true
  if grep -qs 'heap-buffer-overflow' "$work"/reports/asan.*; then
    mkdir -p "$work/probe"
    mv "$work"/reports/asan.* "$work/probe/"
    log "AddressSanitizer reported the planted overflow in a backend"
  else
    log "AddressSanitizer missed a planted overflow in a backend"
    failed=1
  fi
  # the backend died without cleaning up: the server restarts
  for _ in $(seq 1 60); do pg_isready -q && break; sleep 1; done
fi

log "pg_regress suite against the sanitized build"
sanitized_make installcheck || { failed=1; head -100 "$work/tree/regression.diffs" 2>/dev/null; }

reports=$(find "$work/reports" -type f | sort)
if [ -n "$reports" ]; then
  log "sanitizer reports"
  for report in $reports; do echo "== $report"; head -60 "$report"; done
  failed=1
fi
[ "$failed" -eq 0 ] && log "the unit tests and the regression suite passed on the sanitized build, with no sanitizer report"
exit "$failed"
