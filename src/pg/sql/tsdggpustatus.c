/*
 * tsdg_gpu_status(): what the GPU worker is doing, from its shared memory:
 * state, device, processes, memory, the indexes resident on the device and
 * their graph versions, queue depth, batches served, mean batch size, builds,
 * loads and the requests sessions ran on the CPU instead (fallbacks).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/index.h"
#include "catalog/pg_authid.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/relfilenodemap.h"
#include "utils/timestamp.h"

#include "tsdgipc.h"

PG_FUNCTION_INFO_V1(tsdg_gpu_status);

#define TSDG_STATUS_COLUMNS 17

static const char *
TsdgServerStateName(TsdgServerState state)
{
	switch (state)
	{
		case TSDG_SERVER_STOPPED:
			return "stopped";
		case TSDG_SERVER_STARTING:
			return "starting";
		case TSDG_SERVER_READY:
			return "ready";
		case TSDG_SERVER_BUSY:
			return "busy";
		case TSDG_SERVER_NO_DEVICE:
			return "no gpu";
		case TSDG_SERVER_DISABLED:
			return "disabled";
	}
	return "unknown";
}

/*
 * [{"database", "index" (its name in this database, else null), "relfilenode",
 *   "graph_version", "nodes", "deleted", "knn_lists", "bytes", "last_used",
 *   "loaded_at"}, ...]; knn_lists: the worker keeps the k-NN lists too (it
 *   built or merged the graph), so a merge reads nothing of the old graph
 */
/*
 * An index's sizes and last use say how much a table holds and when it was
 * searched: shown, like pg_stat_activity's details, to roles that may read
 * all statistics, and otherwise only for indexes in this database on tables
 * the caller may read.
 */
static bool
TsdgMayShowCachedIndex(Oid relid, bool all_stats)
{
	Oid			heapid;

	if (all_stats)
		return true;
	if (!OidIsValid(relid))
		return false;
	heapid = IndexGetRelation(relid, true);
	return OidIsValid(heapid) && pg_class_aclcheck(heapid, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
}

static Datum
TsdgCachedIndexesJson(const TsdgResidentIndexInfo *resident, int count)
{
	StringInfoData buf;
	bool		all_stats = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	bool		first = true;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < count; i++)
	{
		const TsdgResidentIndexInfo *c = &resident[i];
		Oid			relid = InvalidOid;

		if (c->key.database == MyDatabaseId)
			relid = RelidByRelfilenode(c->key.tablespace, c->key.relfilenode);
		if (!TsdgMayShowCachedIndex(relid, all_stats))
			continue;
		if (!first)
			appendStringInfoString(&buf, ", ");
		first = false;
		appendStringInfo(&buf, "{\"database\": %u, \"index\": ", c->key.database);
		if (OidIsValid(relid) && get_rel_name(relid) != NULL)
			escape_json(&buf, get_rel_name(relid));
		else
			appendStringInfoString(&buf, "null");
		appendStringInfo(&buf,
						 ", \"relfilenode\": %u, \"graph_version\": " UINT64_FORMAT
						 ", \"nodes\": %u, \"deleted\": %u, \"knn_lists\": %s, \"pending_rows\": "
						 INT64_FORMAT ", \"bytes\": " INT64_FORMAT ", \"last_used\": ",
						 c->key.relfilenode, c->key.graph_version, c->key.node_count,
						 c->key.deleted_count, c->with_knn ? "true" : "false", c->pending_rows,
						 c->bytes);
		escape_json(&buf, timestamptz_to_str(c->last_used));
		appendStringInfoString(&buf, ", \"loaded_at\": ");
		escape_json(&buf, timestamptz_to_str(c->loaded_at));
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, ']');
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

Datum
tsdg_gpu_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[TSDG_STATUS_COLUMNS];
	bool		nulls[TSDG_STATUS_COLUMNS];
	TsdgServerState state;
	char		device[TSDG_DEVICE_NAME_LEN];
	char		last_error[TSDG_ERROR_MESSAGE_LEN];
	pid_t		supervisor_pid,
				server_pid;
	int			starts;
	int64		memory_used,
				device_free,
				device_total,
				memory_limit;
	TsdgResidentIndexInfo *resident;
	int			resident_count;
	uint64		batches,
				batched_queries;
	int			col = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	if (!TsdgIpcIsAvailable())
	{
		/* not preloaded: there is no worker, everything runs on the CPU */
		memset(nulls, true, sizeof(nulls));
		values[0] = CStringGetTextDatum("not preloaded");
		nulls[0] = false;
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
	}

	resident = palloc(sizeof(TsdgResidentIndexInfo) * TSDG_MAX_RESIDENT_INDEXES);
	SpinLockAcquire(&TsdgShared->mutex);
	state = TsdgShared->state;
	strlcpy(device, TsdgShared->device, sizeof(device));
	strlcpy(last_error, TsdgShared->last_error, sizeof(last_error));
	supervisor_pid = TsdgShared->supervisor_pid;
	server_pid = TsdgShared->server_pid;
	starts = TsdgShared->server_starts;
	memory_used = TsdgShared->memory_used;
	device_free = TsdgShared->device_free;
	device_total = TsdgShared->device_total;
	memory_limit = TsdgShared->memory_limit_bytes;
	resident_count = TsdgShared->resident_count;
	memcpy(resident, TsdgShared->resident, sizeof(TsdgResidentIndexInfo) * resident_count);
	SpinLockRelease(&TsdgShared->mutex);
	batches = pg_atomic_read_u64(&TsdgShared->batches);
	batched_queries = pg_atomic_read_u64(&TsdgShared->batched_queries);

	values[col++] = CStringGetTextDatum(TsdgServerStateName(state));
	nulls[col] = device[0] == '\0';
	values[col++] = CStringGetTextDatum(device);
	nulls[col] = supervisor_pid == 0;
	values[col++] = Int32GetDatum((int32) supervisor_pid);
	nulls[col] = server_pid == 0;
	values[col++] = Int32GetDatum((int32) server_pid);
	values[col++] = Int32GetDatum(starts);
	values[col++] = Int64GetDatum(memory_used);
	nulls[col] = device_free <= 0;
	values[col++] = Int64GetDatum(device_free);
	nulls[col] = device_total <= 0;
	values[col++] = Int64GetDatum(device_total);
	nulls[col] = memory_limit == 0;
	values[col++] = Int64GetDatum(memory_limit);
	values[col++] = TsdgCachedIndexesJson(resident, resident_count);
	values[col++] = Int32GetDatum((int32) pg_atomic_read_u32(&TsdgShared->queued));
	values[col++] = Int64GetDatum((int64) batches);
	nulls[col] = batches == 0;
	values[col++] = Float8GetDatum(batches == 0 ? 0.0 : (double) batched_queries / batches);
	values[col++] = Int64GetDatum((int64) pg_atomic_read_u64(&TsdgShared->builds));
	values[col++] = Int64GetDatum((int64) pg_atomic_read_u64(&TsdgShared->loads));
	values[col++] = Int64GetDatum((int64) pg_atomic_read_u64(&TsdgShared->fallbacks));
	nulls[col] = last_error[0] == '\0';
	values[col++] = CStringGetTextDatum(last_error);
	Assert(col == TSDG_STATUS_COLUMNS);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
