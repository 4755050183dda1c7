#!/usr/bin/env bash
# Packs what the GPU machine lacks to run pg_tsdg inside PostgreSQL: this
# machine's PostgreSQL 15 with the extension built and installed into it
# (TSDG_PG_PREFIX names a private copy to install into, as for the tests),
# pg_regress and the TAP test modules, the shared libraries the programs load
# beyond the C and C++ runtimes, and IPC::Run for the TAP tests. Writes
# .gpu/postgres.tar.gz (git-ignored); a device run carries .gpu and
# scripts/gpu/on-device.sh unpacks it there. Build with CUDA (nvcc on PATH)
# for the worker to find the GPU (sm_90 is the H100's and H200's):
#   TSDG_PG_PREFIX=/tmp/gpu-pg TSDG_DEVELOPER=0 \
#     TSDG_CMAKE_OPTIONS=-DCMAKE_CUDA_ARCHITECTURES=90-real bash scripts/gpu/pack-postgres.sh
source "$(dirname "$0")/../common.sh"
cd "$TSDG_ROOT"

build_and_install

pkglib=$(pg_config --pkglibdir)
pg_home=$(dirname "$pkglib")        # .../postgresql/15: bin and lib
stage=$(mktemp -d /tmp/pg_tsdg_pack.XXXXXX)
trap 'rm -rf "$stage"' EXIT

# the install as Debian lays it out, less JIT (the server runs without it)
mkdir -p "$stage/usr/lib/postgresql" "$stage/usr/share/postgresql"
cp -a "$pg_home" "$stage/usr/lib/postgresql/"
cp -a "$(pg_config --sharedir)" "$stage/usr/share/postgresql/"
rm -rf "$stage/usr/lib/postgresql/$PG_MAJOR/lib/bitcode" "$stage/usr/lib/postgresql/$PG_MAJOR/lib/llvmjit"*
# a CUDA backend not of this build would not match the module
if [ ! -f "${BUILD_DIR:-build}/pg_tsdg_cuda.so" ]; then
  echo "note: no CUDA backend was built: the worker will find no GPU" >&2
  rm -f "$stage/usr/lib/postgresql/$PG_MAJOR/lib/pg_tsdg_cuda.so"
fi

# libraries the programs and modules load, but for the C and C++ runtimes
# (the other machine's own are as new or newer) and CUDA's (it has its own
# toolkit, which the driver there matches); ldd fails on the scripts among
# the programs, and says nothing of them
libdir=$stage/usr/lib/x86_64-linux-gnu
mkdir -p "$libdir"
find "$stage/usr/lib/postgresql" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
  { xargs -0 ldd 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+)\.so|/libcu|/libnv|^/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$libdir/"; done

ipc_run=$(dirname "$(perl -MIPC::Run -e 'print $INC{"IPC/Run.pm"}')")
mkdir -p "$stage/usr/share/perl5/IPC"
cp -a "$ipc_run/Run.pm" "$ipc_run/Run" "$stage/usr/share/perl5/IPC/"

mkdir -p .gpu
tar czf .gpu/postgres.tar.gz -C "$stage" usr
echo "packed .gpu/postgres.tar.gz ($(du -h .gpu/postgres.tar.gz | cut -f1)): carry .gpu to the device run"
