# Sourced by the scripts in this folder: installing what is missing, building,
# and a private PostgreSQL cluster run by an unprivileged user.
set -euo pipefail

TSDG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_MAJOR=15
# TSDG_PG_PREFIX: a private copy of the system's PostgreSQL to install into and
# run from, so that several checkouts can test side by side on one machine.
TSDG_PG_PREFIX=${TSDG_PG_PREFIX:-}
if [ -n "$TSDG_PG_PREFIX" ]; then
  PGBIN=$TSDG_PG_PREFIX/usr/lib/postgresql/$PG_MAJOR/bin
fi
export PGBIN=${PGBIN:-/usr/lib/postgresql/$PG_MAJOR/bin}  # override to build against another install
export PATH=$PGBIN:$PATH
# TSDG_PORT_OFFSET moves every port the tests listen on, likewise.
TSDG_PORT_OFFSET=${TSDG_PORT_OFFSET:-0}

log() { printf '\n== %s\n' "$*"; }

install_dependencies() {
  local need=()
  local pkg
  for pkg in postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-contrib \
             build-essential cmake libgtest-dev libhnswlib-dev python3 python3-numpy \
             python3-matplotlib libipc-run-perl; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    if [ "$(id -u)" -ne 0 ]; then
      echo "missing packages: ${need[*]} (run as root to install them)" >&2
      return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

build_and_install() {
  log "building"
  # warnings are errors here, and the tests and bench tools are built, unless
  # the caller says TSDG_DEVELOPER=0
  export TSDG_DEVELOPER=${TSDG_DEVELOPER:-1}
  # against the install the private copy is made of: the copy has no headers
  local pg_config=()
  [ -z "$TSDG_PG_PREFIX" ] || pg_config=(PG_CONFIG="/usr/lib/postgresql/$PG_MAJOR/bin/pg_config")
  make -s --no-print-directory -C "$TSDG_ROOT" -j"$(nproc)" "${pg_config[@]}"
  if [ -n "$TSDG_PG_PREFIX" ]; then
    if [ ! -x "$PGBIN/postgres" ]; then
      mkdir -p "$TSDG_PG_PREFIX/usr/lib" "$TSDG_PG_PREFIX/usr/share"
      cp -a /usr/lib/postgresql "$TSDG_PG_PREFIX/usr/lib/"
      cp -a /usr/share/postgresql "$TSDG_PG_PREFIX/usr/share/"
    fi
    log "installing into $TSDG_PG_PREFIX"
    make -s --no-print-directory -C "$TSDG_ROOT" install DESTDIR="$TSDG_PG_PREFIX" "${pg_config[@]}" >/dev/null
    # the copy keeps whatever module the system had when it was made: a test
    # of that one would pass for a test of this build
    cmp -s "$TSDG_ROOT/pg_tsdg.so" "$PGBIN/../lib/pg_tsdg.so" ||
      { echo "pg_tsdg.so was not installed into $TSDG_PG_PREFIX" >&2; return 1; }
  else
    log "installing into $(pg_config --pkglibdir)"
    make -s --no-print-directory -C "$TSDG_ROOT" install >/dev/null
  fi
}

# The cluster belongs to an unprivileged user: PostgreSQL refuses to run as root.
CLUSTER_USER=${CLUSTER_USER:-$( [ "$(id -u)" -eq 0 ] && echo tsdgrun || id -un )}

# The dynamic_shared_memory_type a server here should use: posix, unless
# /dev/shm is under 8 GB (containers often cap it), where the segments go to
# files (mmap, in the data directory's pg_dynshmem/).
shared_memory_type() {
  local shm_kb
  shm_kb=$(df -k --output=size /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
  if [ -z "$shm_kb" ] || [ "$shm_kb" -lt $((8 * 1024 * 1024)) ]; then echo mmap; else echo posix; fi
}

# The GPU worker's state once it has settled (ready, or no gpu), or the last
# one seen after a minute; empty when the server has no worker.
settled_worker_state() {
  local state=""
  for _ in $(seq 1 120); do
    state=$(psql -X -At -c "SELECT state FROM tsdg_gpu_status()" 2>/dev/null)
    { [ "$state" = ready ] || [ "$state" = "no gpu" ]; } && break
    sleep 0.5
  done
  echo "$state"
}

# A Python that has numpy: the system's (python3-numpy) here, the one on PATH
# elsewhere (the GPU machine's /usr/bin/python3 has none).
numpy_python() {
  local candidate
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c "import numpy" 2>/dev/null; then echo "$candidate"; return; fi
  done
  echo python3
}

# Runs from /, since the cluster user may not be allowed into the caller's directory.
as_cluster_user() {
  if [ "$(id -un)" = "$CLUSTER_USER" ]; then
    (cd / && "$@")
  else
    (cd / && runuser -u "$CLUSTER_USER" -- "$@")
  fi
}

ensure_cluster_user() {
  if ! id "$CLUSTER_USER" >/dev/null 2>&1; then useradd --create-home "$CLUSTER_USER"; fi
}

# start_cluster DIR PORT [extra postgresql.conf lines...]
start_cluster() {
  local dir=$1 port=$(( $2 + TSDG_PORT_OFFSET ))
  shift 2
  ensure_cluster_user
  mkdir -p "$dir"
  chown "$CLUSTER_USER" "$dir"
  # C.UTF-8 is built into glibc: no locale to install, and the same sort order everywhere
  as_cluster_user initdb -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  {
    echo "port = $port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'pg_tsdg'"
    echo "max_wal_size = 4GB"
    echo "wal_level = replica"
    local line
    for line in "$@"; do echo "$line"; done
  } >> "$dir/data/postgresql.conf"
  if ! as_cluster_user pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null; then
    cat "$dir/server.log" >&2
    return 1
  fi
  export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
}

stop_cluster() {
  local dir=$1
  as_cluster_user pg_ctl -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

# run_tap_tests DIR [TEST.pl...]: the TAP tests (by default every test/t/*.pl)
# through prove, as the cluster user since each test starts its own servers
# with PostgreSQL::Test::Cluster, which picks free ports itself. DIR holds
# their data directories, sockets and logs (DIR/tmp_check/log); the log of
# each failed test is printed.
run_tap_tests() {
  local dir=$1 pgxs
  shift
  local tests=() t
  # absolute: prove runs from /, where the cluster user may read
  for t in "$@"; do tests+=("$(realpath "$t")"); done
  [ ${#tests[@]} -gt 0 ] || tests=("$TSDG_ROOT"/test/t/*.pl)
  pgxs=$(dirname "$(dirname "$(pg_config --pgxs)")")
  ensure_cluster_user
  mkdir -p "$dir"
  chown "$CLUSTER_USER" "$dir"
  # one port lock directory for every checkout on this machine, so that
  # concurrent runs do not pick the same free port
  mkdir -p -m 1777 /tmp/pg_tsdg_test_ports
  # the server's headers, for tests that build a module of their own: the
  # private copy has none, the install it was made of has them
  local includedir system_pg_config=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
  includedir=$(pg_config --includedir-server 2>/dev/null || true)
  if [ ! -f "$includedir/postgres.h" ] && [ -x "$system_pg_config" ]; then
    includedir=$("$system_pg_config" --includedir-server 2>/dev/null || true)
  fi
  if as_cluster_user env PATH="$PATH" TESTDIR="$dir" TMPDIR="$dir" \
       PG_TEST_PORT_DIR=/tmp/pg_tsdg_test_ports PG_REGRESS="$pgxs/test/regress/pg_regress" \
       TSDG_SERVER_INCLUDEDIR="$includedir" \
       prove --timer -I "$pgxs/test/perl" -I "$TSDG_ROOT/test/support" "${tests[@]}"; then
    return 0
  fi
  local log
  for log in "$dir"/tmp_check/log/regress_log_*; do
    if grep -q ' not ok \|# Looks like\|BAIL' "$log"; then
      log "$log"
      tail -60 "$log"
    fi
  done
  return 1
}

# tsv_dims FILE: the dimension of the first vector of a file of rows (an id,
# a tab, a vector's text).
tsv_dims() {
  echo $(( $(head -1 "$1" | cut -f2 | tr -cd , | wc -c) + 1 ))
}

# load_vector_tables DIR ROWS.tsv QUERIES.tsv [truth]: the rows and queries
# (as tsv_dims reads them), copied into DIR for the server to read, into
# tables items and queries, each an id and a vector column of the rows'
# dimension, in the server psql reaches; with "truth" also table truth:
# each query's exact 10 nearest rows by L2, computed with no index.
load_vector_tables() {
  local dir=$1 dims
  [ "$2" -ef "$dir/items.tsv" ] || cp "$2" "$dir/items.tsv"
  [ "$3" -ef "$dir/queries.tsv" ] || cp "$3" "$dir/queries.tsv"
  chmod 644 "$dir/items.tsv" "$dir/queries.tsv"
  dims=$(tsv_dims "$dir/items.tsv")
  local statements=(-c "CREATE TABLE items (id int PRIMARY KEY, v vector($dims))"
    -c "CREATE TABLE queries (id int PRIMARY KEY, v vector($dims))"
    -c "\\copy items FROM '$dir/items.tsv'" -c "\\copy queries FROM '$dir/queries.tsv'"
    -c "VACUUM ANALYZE items")
  if [ "${4:-}" = truth ]; then
    statements+=(-c "SET enable_indexscan = off"
      -c "CREATE TABLE truth AS SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids FROM queries q")
  fi
  psql -X -q -v ON_ERROR_STOP=1 "${statements[@]}"
}
