/*
 * pg_tsdg_vector: the shared object of pg_tsdg's own "vector" extension, for
 * servers without pgvector. The type's functions live apart from pg_tsdg.so
 * so that a backend that loads pgvector never has two definitions of
 * vector_in, l2_distance and the rest: pg_tsdg.so carries none of them among
 * its exported symbols, and this object is loaded only where the extension
 * "vector" is pg_tsdg's.
 */
#include "postgres.h"

#include "fmgr.h"

PG_MODULE_MAGIC;
