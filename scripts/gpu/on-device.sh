#!/usr/bin/env bash
# On the GPU machine, in a device run of the repository that carried .gpu
# (made here by scripts/gpu/pack-postgres.sh): unpacks the packed PostgreSQL
# into TSDG_PG_PREFIX (default /tmp/tsdg-pg) unless that very package is
# there already (a machine kept warm between runs keeps /tmp, and with it
# the package of an earlier run), and runs COMMAND with it as the private
# PostgreSQL copy the scripts use, its libraries, the CUDA libraries and the
# packed Perl modules found:
#   bash scripts/gpu/on-device.sh bash test/gpu/pg_worker_run.sh tests
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=${TSDG_PG_PREFIX:-/tmp/tsdg-pg}
[ -f .gpu/postgres.tar.gz ] || { echo "no .gpu/postgres.tar.gz: pack it and carry .gpu" >&2; exit 1; }
package=$(sha256sum .gpu/postgres.tar.gz | cut -d' ' -f1)
if [ ! -x "$prefix/usr/lib/postgresql/15/bin/postgres" ] || [ "$(cat "$prefix/.package" 2>/dev/null)" != "$package" ]; then
  rm -rf "$prefix"
  mkdir -p "$prefix"
  tar xzf .gpu/postgres.tar.gz -C "$prefix"
  echo "$package" > "$prefix/.package"
  # the cluster user runs the server and the TAP tests from it
  chmod -R a+rX "$prefix"
fi
export TSDG_PG_PREFIX=$prefix
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PERL5LIB="$prefix/usr/share/perl5${PERL5LIB:+:$PERL5LIB}"
exec "$@"
