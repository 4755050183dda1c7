/*
 * The newest rows of a resident graph that its searches do not reach (runs
 * in the GPU server process): found after a load or a merge, repaired where
 * the merge's lists allow, and kept with the graph, whose every search scores
 * them exactly.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "tsdggpuserver.h"

/*
 * ids (count rows of [first, n), ascending, with room for known_count more)
 * joined by the rows of known below first and below n, ascending without
 * duplicates; returns their count.
 */
static int64
TsdgMergeKnownRows(uint32 *ids, int64 count, int64 first, const uint32 *known, int64 known_count, int64 n)
{
	int64		kept = count;

	for (int64 i = 0; i < known_count; i++)
		if (known[i] < first && known[i] < n)
			ids[kept++] = known[i];
	qsort(ids, kept, sizeof(uint32), TsdgCompareNodeIds);
	count = 0;
	for (int64 i = 0; i < kept; i++)
		if (count == 0 || ids[count - 1] != ids[i])
			ids[count++] = ids[i];
	return count;
}

/*
 * The rows [n - check->rows, n) of r, a merge's batch, that its searches
 * at the check's ef do not reach: kept with r and scored exactly for every
 * search (MergeUnreachedIds, MergeUnreachedTids), so that a row just merged
 * is always found. With repair_changed (the merge's changed flags, whose
 * graph r holds), the graph is first repaired for them and for the old rows
 * the merge marked TSDG_CHANGED_RECHECK, which are checked too
 * (tsdg_index_unreached_rows_repaired): the lists it changes are marked
 * TSDG_CHANGED_REPAIR there, for the session to write again, even when it
 * fails. Without it, the rows of known (known_count of them, any order: the
 * rows an earlier merge left unreached, which the metapage lists) are kept
 * as well. False, with none kept, when they could not be found.
 */
bool
TsdgFindUnreached(ResidentIndex *r, const TsdgUnreachedCheck *check, uint8 *repair_changed,
				  const uint32 *known, int64 known_count, TsdgError *error)
{
	int64		first = r->n - Min(check->rows, r->n);
	int64		count = 0;
	int64		found = 0;
	int64		lists_repaired = 0;
	uint32	   *ids;
	TimestampTz start = GetCurrentTimestamp();
	int64		rechecked = 0;

	for (int64 u = 0; repair_changed != NULL && u < first; u++)
		rechecked += (repair_changed[u] & TSDG_CHANGED_RECHECK) != 0;
	if (first == r->n && rechecked == 0 && known_count == 0)
		return true;
	/* a repair may also report old rows: room for every row */
	ids = malloc(sizeof(uint32) * (repair_changed == NULL ? r->n - first + known_count : r->n));
	if (ids == NULL)
	{
		strlcpy(error->message, "out of host memory", sizeof(error->message));
		return false;
	}
	if ((repair_changed == NULL ?
		 tsdg_index_unreached_rows(r->index, first, check->ef, check->lambda_limit, ids,
								   r->n - first, &count, error) :
		 tsdg_index_unreached_rows_repaired(r->index, r->rows, r->neighbors, r->lambdas, r->degree,
											r->metric, first, check->ef, check->lambda_limit, ids,
											r->n, &count, &found, repair_changed,
											&lists_repaired, error)) != TSDG_OK)
	{
		free(ids);
		return false;
	}
	if (repair_changed == NULL && known_count > 0)
		count = TsdgMergeKnownRows(ids, count, first, known, known_count, r->n);
	if (count > 0)
	{
		float	   *rows = malloc(sizeof(float) * r->dims * count);
		bool		kept = false;

		if (rows == NULL)
			strlcpy(error->message, "out of host memory", sizeof(error->message));
		else
		{
			for (int64 i = 0; i < count; i++)
				memcpy(rows + i * r->dims, r->rows + (Size) ids[i] * r->dims,
					   sizeof(float) * r->dims);
			r->unreached_set = tsdg_exact_set_create(TsdgDeviceBackend, r->dims, r->metric, error);
			kept = r->unreached_set != NULL &&
				tsdg_exact_set_append(r->unreached_set, rows, count, error) == TSDG_OK;
			free(rows);
		}
		if (!kept)
		{
			if (r->unreached_set != NULL)
				tsdg_exact_set_free(r->unreached_set);
			r->unreached_set = NULL;
			free(ids);
			return false;
		}
	}
	r->unreached = ids;
	r->unreached_count = count;
	if (repair_changed != NULL)
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: %lld of the last %lld rows and of %lld older ones that lost an edge into them of index %u/%u version " UINT64_FORMAT " are not reached by the walk for their own vector at ef %d (the large-batch kernel's, or the CPU's); %lld lists given an edge into those and the rows a walk at ef %d misses, then %lld not reached by a search, searched exactly (%.3f s)",
						(long long) found, (long long) (r->n - first), (long long) rechecked, r->key.database,
						r->key.relfilenode, r->key.graph_version, check->ef,
						(long long) lists_repaired, Min(check->ef, TSDG_REPAIR_NARROW_EF),
						(long long) count, TsdgSecondsSince(start))));
	else
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: %lld of the last %lld rows of index %u/%u version " UINT64_FORMAT " are not reached by a search for their own vector at ef %d, searched exactly (%.3f s)",
						(long long) count, (long long) (r->n - first), r->key.database,
						r->key.relfilenode, r->key.graph_version, check->ef, TsdgSecondsSince(start))));
	return true;
}
