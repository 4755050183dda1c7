/*
 * The index argument of the SQL functions that take a tsdg index.
 *
 * The argument is a regclass the caller names: before a lock is queued on
 * it, its kind and the caller's right to its table are read from the
 * catalogs alone, so that a caller without the right never waits behind
 * others' locks nor makes them wait (and a merge's lock would cancel
 * autovacuum). The table is locked before its index, as VACUUM and the
 * executor lock them. The index may be dropped and its OID reused between
 * the check and the lock: the table it belongs to is read again under the
 * lock.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "catalog/index.h"
#include "catalog/pg_class.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "tsdg.h"
#include "tsdgindexarg.h"

/*
 * Opens the tsdg index index_oid under arg->index_lock, its table under
 * arg->heap_lock (until the transaction ends or the caller unlocks it), after
 * arg->check; *heap_oid is the table's.
 */
Relation
TsdgOpenIndexArg(Oid index_oid, const TsdgIndexArg *arg, Oid *heap_oid)
{
	Relation	index;

	*heap_oid = IndexGetRelation(index_oid, true);
	if (get_rel_relkind(index_oid) == RELKIND_PARTITIONED_INDEX)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a partitioned index, which holds no rows itself",
						get_rel_name(index_oid)),
				 errhint("%s", arg->partition_hint)));
	if (!OidIsValid(*heap_oid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index",
						get_rel_name(index_oid) ? get_rel_name(index_oid) : "?")));
	arg->check(index_oid, *heap_oid, arg->check_arg);

	if (arg->heap_lock != NoLock)
		LockRelationOid(*heap_oid, arg->heap_lock);
	index = index_open(index_oid, arg->index_lock);
	if (index->rd_indam->ambuild != tsdgbuild)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a tsdg index", RelationGetRelationName(index))));
	if (IndexGetRelation(index_oid, false) != *heap_oid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" changed while it was opened",
						RelationGetRelationName(index))));
	return index;
}
