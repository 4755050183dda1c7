#!/usr/bin/env bash
# export_list.sh OUT OBJECT...: writes the linker version script OUT that
# exports from a PostgreSQL module only what PostgreSQL looks up by name in
# the OBJECTs: the magic block, _PG_init, the SQL-callable functions declared
# with PG_FUNCTION_INFO_V1 (each with its pg_finfo_ record), and the functions
# that background and parallel workers start at, as the objects' sources name
# them to PostgreSQL. Every other symbol stays local, so that another module
# loaded into the same backend (pgvector, which defines functions of the same
# names) neither calls into this one nor is called by it.
set -euo pipefail
out=$1
shift
sources=()
for object in "$@"; do sources+=("${object%.o}.c"); done
{
  echo "{"
  echo "  global:"
  {
    nm --defined-only "$@" | awk '$2 == "T" {
      if ($3 == "Pg_magic_func" || $3 == "_PG_init")
        print $3
      else if ($3 ~ /^pg_finfo_/)
        print $3 "\n" substr($3, 10)
    }'
    sed -n -e 's/.*CreateParallelContext("[^"]*", *"\([A-Za-z0-9_]*\)".*/\1/p' \
      -e 's/.*bgw_function_name, *BGW_MAXLEN, *"\([A-Za-z0-9_]*\)".*/\1/p' "${sources[@]}"
  } | sort -u | sed 's/.*/    &;/'
  echo "  local:"
  echo "    *;"
  echo "};"
} > "$out.tmp"
mv "$out.tmp" "$out"
