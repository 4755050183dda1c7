#!/usr/bin/env bash
# pgvector built from its release archive (PGVECTOR_TARBALL) with PGXS
# against this machine's PostgreSQL, its installed files (the module, the
# control file and the scripts; no headers) packed as FILE (default
# .gpu/pgvector.tar.gz, git-ignored) for test/soak/soak.sh, also on a
# machine that has no PostgreSQL headers to build it:
#   PGVECTOR_TARBALL=.../pgvector-0.8.6.tar.gz bash test/soak/pack-pgvector.sh [FILE]
source "$(dirname "$0")/../../scripts/common.sh"

tarball=${PGVECTOR_TARBALL:?PGVECTOR_TARBALL names the release archive of pgvector}
out=${1:-$TSDG_ROOT/.gpu/pgvector.tar.gz}
work=$(mktemp -d /tmp/pgvector_pack.XXXXXX)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src" "$work/stage" "$(dirname "$out")"
tar xzf "$tarball" -C "$work/src"
src=$(echo "$work"/src/pgvector-*)
# OPTFLAGS empty: no -march=native, so that the module runs on any x86-64
pgxs=(PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config OPTFLAGS= with_llvm=no)
make -s -C "$src" -j2 "${pgxs[@]}"
make -s -C "$src" "${pgxs[@]}" install DESTDIR="$work/stage"
rm -rf "$work/stage/usr/include"
tar czf "$out" -C "$work/stage" usr
echo "packed $out: $(tar tzf "$out" | grep -c .) files"
