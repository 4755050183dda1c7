/*
 * The index argument of the SQL functions that take a tsdg index
 * (tsdg_merge, tsdg_index_info, the batch searches): one place that checks
 * it is a tsdg index, the caller's right to its table, and locks it.
 */
#ifndef TSDG_INDEX_ARG_H
#define TSDG_INDEX_ARG_H

#include "postgres.h"

#include "storage/lockdefs.h"
#include "utils/relcache.h"

/*
 * The caller's right to what the function does with the table heap_oid that
 * index_oid belongs to; raises an error where it is missing. It runs before
 * any lock is taken, as RangeVarGetRelidExtended's callback does.
 */
typedef void (*TsdgIndexArgCheck) (Oid index_oid, Oid heap_oid, void *arg);

/* what TsdgOpenIndexArg takes and what it does for the function */
typedef struct TsdgIndexArg
{
	TsdgIndexArgCheck check;
	void	   *check_arg;
	LOCKMODE	heap_lock;		/* on the table, before the index: NoLock, none */
	LOCKMODE	index_lock;
	const char *partition_hint; /* what to do instead, for a partitioned index */
} TsdgIndexArg;

extern Relation TsdgOpenIndexArg(Oid index_oid, const TsdgIndexArg *arg, Oid *heap_oid);

#endif							/* TSDG_INDEX_ARG_H */
