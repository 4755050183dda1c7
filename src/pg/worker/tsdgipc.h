/*
 * Shared memory between the sessions and the GPU worker: one request slot per
 * backend (indexed by BackendId, so a slot can never be lost by a backend
 * that dies: the next backend with that id takes it over), the worker's
 * counters, and the list of indexes resident on the GPU for tsdg_gpu_status().
 *
 * A request is written into the slot under its spinlock and marked QUEUED; the
 * GPU server scans the slots as a ring, takes every QUEUED one as one batch
 * (RUNNING), answers (ANSWERED, with a reply code) and sets the requester's
 * latch. Every request carries a fresh request_id: an answer is written only
 * while the slot still holds the request it answers, so a backend that gave up
 * (timeout, cancel, exit) never receives a late answer meant for an older
 * request.
 *
 * Small payloads (one query, its results) travel inline in the slot; bulk data
 * (a build's rows and graph, an index image, a batch of queries) travels in a
 * DSM segment created by the backend, whose layout is a TsdgBulkHeader
 * followed by the arrays at the offsets it names.
 *
 * The GPU server is not a PostgreSQL backend (see tsdgworker.c): it uses only
 * the spinlocks, semaphore and latches of this segment, never LWLocks.
 */
#ifndef TSDG_IPC_H
#define TSDG_IPC_H

#include "postgres.h"

#include <semaphore.h>

#include "port/atomics.h"
#include "storage/backendid.h"
#include "storage/dsm_impl.h"
#include "storage/itemptr.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "tsdg_capi.h"

/*
 * inline payload of a slot: a query going in, (distance, node id, heap TID)
 * triples coming out, so that the session reads no row page for the TIDs
 */
#define TSDG_SLOT_PAYLOAD_BYTES	32768
#define TSDG_SLOT_MAX_DIMS		(TSDG_SLOT_PAYLOAD_BYTES / (int) sizeof(float))
#define TSDG_SLOT_MAX_RESULTS \
	(TSDG_SLOT_PAYLOAD_BYTES / (int) (sizeof(float) + sizeof(uint32) + sizeof(ItemPointerData)))

#define TSDG_MAX_RESIDENT_INDEXES	64
#define TSDG_DEVICE_NAME_LEN	128

typedef enum TsdgSlotState
{
	TSDG_SLOT_FREE = 0,
	TSDG_SLOT_QUEUED,
	TSDG_SLOT_RUNNING,
	TSDG_SLOT_ANSWERED
} TsdgSlotState;

typedef enum TsdgRequestKind
{
	TSDG_REQUEST_SEARCH = 1,	/* one query, inline */
	TSDG_REQUEST_SEARCH_BATCH,	/* many queries, in a DSM segment */
	TSDG_REQUEST_LOAD_INDEX,	/* an index image to make resident */
	TSDG_REQUEST_BUILD,			/* rows in, graph out, in a DSM segment */
	TSDG_REQUEST_MERGE,			/* old graph and new rows in, merged graph out */
	TSDG_REQUEST_PENDING_ROWS	/* rows added to the worker's copy of the pending rows */
} TsdgRequestKind;

typedef enum TsdgReply
{
	TSDG_REPLY_OK = 0,
	TSDG_REPLY_NEED_INDEX,		/* not resident: the requester ships it */
	TSDG_REPLY_NOT_RESIDENT,	/* not resident, another backend ships it */
	TSDG_REPLY_BUSY,			/* building or loading: search on the CPU */
	TSDG_REPLY_OUT_OF_MEMORY,	/* GPU memory exhausted */
	TSDG_REPLY_CANCELLED,
	TSDG_REPLY_FAILED			/* message says why */
} TsdgReply;

typedef enum TsdgServerState
{
	TSDG_SERVER_STOPPED = 0,	/* no worker (not preloaded) or not started yet */
	TSDG_SERVER_STARTING,
	TSDG_SERVER_READY,			/* a device is loaded and answers requests */
	TSDG_SERVER_BUSY,			/* building or loading: searches go to the CPU */
	TSDG_SERVER_NO_DEVICE,		/* no GPU or no CUDA backend: idle */
	TSDG_SERVER_DISABLED		/* tsdg.device = cpu in the server configuration */
} TsdgServerState;

/*
 * Which graph a GPU copy is of. relfilenode rather than the index OID: REINDEX
 * and TRUNCATE give the index new storage, whose graph_version starts over.
 * A relfilenode is unique only within its tablespace, hence tablespace.
 * deleted_count: VACUUM marks nodes deleted, which must not be returned.
 * last_merge: the metapage's stamp of the merge that made the graph (0 for a
 * build); a merge that failed after the worker kept its graph made the same
 * graph_version with another stamp, so its graph is never taken for the one
 * the next merge writes.
 */
typedef struct TsdgIndexKey
{
	Oid			database;
	Oid			tablespace;
	Oid			relfilenode;
	BackendId	backend;		/* a temporary index's backend, else InvalidBackendId */
	uint64		graph_version;
	uint32		deleted_count;
	uint32		node_count;
	int64		last_merge;
} TsdgIndexKey;

extern bool TsdgIndexKeysEqual(const TsdgIndexKey *a, const TsdgIndexKey *b);

typedef struct TsdgSearchArgs
{
	TsdgIndexKey key;
	int			dims;
	int			k;				/* results wanted */
	int			ef;
	int			lambda_limit;
	int			nq;				/* queries (1 for an inline search) */
	/*
	 * The pending rows the session's metapage has: the worker searches its
	 * copy of them too when it holds them all (pending_searched in the
	 * answer). 0: the session scans them itself.
	 */
	int64		pending_rows;
	uint64		pending_epoch;
} TsdgSearchArgs;

/*
 * Rows [first, first + n) of the index's pending list (in the segment's rows
 * and tids), for the worker's copy of the pending rows of key's graph at
 * pending_epoch (tsdg.h). The worker keeps the part past the rows it has;
 * a newer epoch replaces its copy. The last row sent lies in end_block, the
 * end_offset-th there: the next session to send rows reads on from it, not
 * from the list's head (pages only fill at the list's tail within an epoch
 * and a graph).
 */
typedef struct TsdgPendingArgs
{
	TsdgIndexKey key;
	uint64		pending_epoch;
	int64		first;
	int64		n;
	int			dims;
	BlockNumber end_block;
	int			end_offset;
} TsdgPendingArgs;

typedef struct TsdgBuildArgs
{
	TsdgIndexKey key;			/* what the built graph will be, to keep it resident */
	int64		n;
	int			dims;
	TsdgMetric	metric;
	TsdgBuildParams params;
	/*
	 * the segment has room for a part of the rows only: they travel in parts,
	 * and so does the graph (TsdgPartTurns)
	 */
	bool		in_parts;
} TsdgBuildArgs;

/* rows [0, n_old) are the old graph's nodes, [n_old, n_old + n_new) the new rows */
/*
 * The searches a graph's newest rows are checked against: the worker keeps
 * the rows [n - rows, n) they do not reach and scores them exactly for every
 * search (TsdgMetaPageData.unreached).
 */
typedef struct TsdgUnreachedCheck
{
	int64		rows;
	int			ef;
	int			lambda_limit;
} TsdgUnreachedCheck;

typedef struct TsdgMergeArgs
{
	Oid			database;		/* of the index, for the worker's LOG lines */
	Oid			relfilenode;
	int64		n_old;
	int64		n_new;
	int			dims;
	TsdgMetric	metric;
	TsdgBuildParams params;
	TsdgIndexKey old_key;		/* the graph merged into, as the metapage has it */
	/* the old rows are not in the segment: the worker copies them from its copy of old_key */
	bool		rows_resident;
	/* nor are the old k-NN and search lists: the worker's copy has them too */
	bool		graph_resident;
	/* the merged graph, kept resident under this key */
	TsdgIndexKey new_key;
	/* the searches that must reach the new rows (TsdgBuildSummary.unreached) */
	TsdgUnreachedCheck check;
	/*
	 * the segment has room for a part of the rows only: the inputs travel in
	 * parts, and so does the merged graph (TsdgPartTurns, tsdgparts.h)
	 */
	bool		in_parts;
} TsdgMergeArgs;

/*
 * In a loaded image's flags (TsdgBulkHeader.flags), besides the node flags:
 * a row the metapage lists as not reached by searches
 * (TsdgMetaPageData.unreached), which the worker scores exactly too.
 */
#define TSDG_IMAGE_UNREACHED	(1 << 7)

typedef struct TsdgLoadArgs
{
	TsdgIndexKey key;
	int64		n;
	int			dims;
	int			degree;
	TsdgMetric	metric;
	TsdgUnreachedCheck check;	/* rows: the metapage's unreached_checked */
	int64		layer_nodes;	/* the navigating layer's lists in the image */
} TsdgLoadArgs;

/*
 * The arrays of a bulk segment, as byte offsets from its start (0: absent).
 * Which are used depends on the request kind:
 *   build:  rows, tids (in: the heap scan writes them here), neighbors,
 *           lambdas, knn_ids, changed (out, before the answer; changed
 *           TSDG_CHANGED_LINK where the build's check changed a list after
 *           lists_ready counted it), summary (out, after the answer: see
 *           TsdgBuildSummary); arrays sized for capacity rows; parts, for a
 *           build in parts (TsdgBuildArgs.in_parts), where capacity rows are
 *           one part and changed is absent; layer_ids, layer_lambdas (out,
 *           with the summary: the navigating layer's lists, sized for the
 *           layer of capacity rows, or of n rows in parts)
 *   load:   rows, neighbors, lambdas, tids, flags, layer_ids and
 *           layer_lambdas (TsdgLoadArgs.layer_nodes lists) (in)
 *   batch:  queries (in), tids, dists (out, nq * k)
 *   pending rows: rows, tids (in, n)
 *   merge:  rows (n - rows_from rows, from row rows_from: rows_from is n_old
 *           when rows_resident and the worker takes the old rows from its
 *           copy into memory of its own, else 0), tids (n; the first n_old
 *           filled by the worker when rows_resident), knn_ids (n_old *
 *           build_k), neighbors, lambdas (n_old * degree): the old graph, in
 *           (filled by the worker when graph_resident); flags (n_old, the old
 *           lists repaired after deletes) and dists (the old lists'
 *           distances) in, each 0 when absent; merged_knn_ids (0 when the
 *           session leaves its k-NN pages as they are: the worker keeps the
 *           merged lists in memory of its own), merged_neighbors,
 *           merged_lambdas, changed (n: TSDG_CHANGED_KNN | TSDG_CHANGED_GRAPH)
 *           out, before the answer; summary (out, after the answer, of the
 *           merged graph; 0 when the session computes it), layer_ids and
 *           layer_lambdas (out, with the summary: the merged graph's layer)
 *   merge in parts (TsdgMergeArgs.in_parts): the same arrays, each with room
 *           for capacity rows (one part), the layer's for all n rows, and
 *           parts; the summary and the layer come before the last part
 */
typedef struct TsdgBulkHeader
{
	Size		total_size;
	int64		capacity;		/* build, merge in parts: rows the arrays have room for */
	int64		rows_from;		/* merge: the row that rows starts at */
	Size		rows;
	Size		neighbors;
	Size		lambdas;
	Size		knn_ids;
	Size		tids;
	Size		flags;
	Size		queries;
	Size		dists;
	Size		summary;
	Size		merged_knn_ids;
	Size		merged_neighbors;
	Size		merged_lambdas;
	Size		changed;
	Size		parts;
	Size		layer_ids;
	Size		layer_lambdas;
} TsdgBulkHeader;

/*
 * The turns of a request in parts (tsdgparts.h), whose segment has room for
 * one part of its rows (maintenance_work_mem bounds it) where the request has
 * more: a build's rows in and graph out, a merge's inputs in and merged graph
 * out. The session writes in-part i once in_taken is i and sets in_sent to
 * i + 1; the worker copies it into memory of its own (what the device
 * computes from, and the resident copy keeps) and sets in_taken to i + 1.
 * The answer comes back the same way: the worker writes out-part j once
 * out_taken is j and sets out_sent to j + 1, the session copies it into its
 * own arrays and sets out_taken to j + 1; the worker answers after the last.
 * Each side wakes the other after its step (the session's latch, the
 * server's semaphore), and reads the arrays only after the other's counter
 * (a read barrier after it, a write barrier before it).
 */
typedef struct TsdgPartTurns
{
	pg_atomic_uint64 in_sent;
	pg_atomic_uint64 in_taken;
	pg_atomic_uint64 out_sent;
	pg_atomic_uint64 out_taken;
} TsdgPartTurns;

typedef enum TsdgSummaryState
{
	TSDG_SUMMARY_PENDING = 0,
	TSDG_SUMMARY_READY,
	TSDG_SUMMARY_FAILED			/* the session computes it itself */
} TsdgSummaryState;

/*
 * Where a build's rings of identical rows stand (tsdgduplicates.c): the
 * session links them into the segment's lists once it has the answer, and
 * the worker waits for that before it reads the lists again for the summary
 * and its resident copy.
 */
typedef enum TsdgRingsState
{
	TSDG_RINGS_UNKNOWN = 0,		/* the session has not found the groups yet */
	TSDG_RINGS_NONE,			/* no groups, or the session gave the build up */
	TSDG_RINGS_PENDING,			/* groups found, to be linked after the answer */
	TSDG_RINGS_LINKED
} TsdgRingsState;

#define TSDG_SUMMARY_MAX_ENTRIES	256 /* TSDG_MAX_ENTRY_POINTS of the metapage */
#define TSDG_SUMMARY_MAX_UNREACHED	1560	/* TSDG_MAX_UNREACHED of the metapage */

/*
 * What the metapage needs besides the graph: the navigating set and d_nn1+,
 * and the pages the navigating layer. The worker answers a build or a merge
 * as soon as the graph is in the segment and computes these afterwards from
 * the rows and graph it holds, while the session writes the pages; it then
 * sets state and the session's latch.
 */
typedef struct TsdgBuildSummary
{
	pg_atomic_uint32 state;		/* TsdgSummaryState */
	/*
	 * 1 once the k-NN lists (a merge's merged ones) are final in the
	 * segment, before the answer (the worker diversifies meanwhile; the
	 * session's latch is set)
	 */
	pg_atomic_uint32 knn_ready;
	/*
	 * the rows whose search lists are in the segment, in row order, before
	 * the answer (the worker then links a merge's components, and checks a
	 * build's or a merge's graph, marking the lists it changes
	 * TSDG_CHANGED_LINK; the session's latch is set at each step)
	 */
	pg_atomic_uint64 lists_ready;
	/* a build's TsdgRingsState, set by the session */
	pg_atomic_uint32 rings;
	int32		entry_count;
	float		nn1_bound;
	uint32		entry_points[TSDG_SUMMARY_MAX_ENTRIES];
	/*
	 * merge: the new rows the merged graph's searches do not reach
	 * (TsdgMergeArgs.check), all of them counted, the first
	 * TSDG_SUMMARY_MAX_UNREACHED listed
	 */
	int64		unreached_count;
	uint32		unreached[TSDG_SUMMARY_MAX_UNREACHED];
	/* the navigating layer's lists in the segment's layer arrays (READY) */
	int64		layer_nodes;
} TsdgBuildSummary;

typedef struct TsdgRequestSlot
{
	slock_t		mutex;
	TsdgSlotState state;
	uint64		request_id;
	Latch	   *requester_latch;
	TsdgRequestKind kind;
	union
	{
		TsdgSearchArgs search;
		TsdgBuildArgs build;
		TsdgLoadArgs load;
		TsdgMergeArgs merge;
		TsdgPendingArgs pending;
	}			args;
	dsm_handle	bulk_handle;	/* DSM segment of bulk requests */
	Size		bulk_size;
	bool		in_batch_area;	/* SEARCH_BATCH: bulk data in the batch area, not a segment */
	bool		cancel_requested;

	/* build and merge progress (pg_stat_progress_create_index for builds) */
	int			phase;
	int64		done;
	int64		total;

	/* when the worker took the request and answered it, for the wake-up costs */
	TimestampTz taken_at;
	TimestampTz answered_at;

	/* the answer */
	TsdgReply	reply;
	int			result_count;
	bool		pending_searched;	/* searches: the results include the pending rows */
	float		pending_bound;	/* those past them are at least this far (+inf: none is) */
	char		message[TSDG_ERROR_MESSAGE_LEN];

	/* SEARCH: the query in; then the dists, node ids and heap TIDs of the results */
	char		payload[TSDG_SLOT_PAYLOAD_BYTES];
} TsdgRequestSlot;

#define TsdgSlotQuery(slot)			((float *) (slot)->payload)
#define TsdgSlotResultDists(slot)	((float *) (slot)->payload)
#define TsdgSlotResultIds(slot, max_results) \
	((uint32 *) ((slot)->payload + sizeof(float) * (max_results)))
#define TsdgSlotResultTids(slot, max_results) \
	((ItemPointerData *) ((slot)->payload + (sizeof(float) + sizeof(uint32)) * (max_results)))

/* an index the worker holds resident, as tsdg_gpu_status() lists it (cached_indexes) */
typedef struct TsdgResidentIndexInfo
{
	TsdgIndexKey key;
	bool		with_knn;		/* its k-NN and search lists too: built or merged by the worker */
	/*
	 * the worker's copy of the first pending_rows pending rows, at
	 * pending_epoch; the last of them lies in pending_end_block, the
	 * pending_end_offset-th there (TsdgPendingArgs)
	 */
	int64		pending_rows;
	uint64		pending_epoch;
	BlockNumber pending_end_block;
	int			pending_end_offset;
	int64		bytes;
	TimestampTz loaded_at;
	TimestampTz last_used;
} TsdgResidentIndexInfo;

/*
 * The batch area: a part of the main shared memory (tsdg.batch_memory) that
 * one session's batch at a time uses instead of a DSM segment of its own, so
 * that a new session neither creates a segment (a posix_fallocate of every
 * page) nor makes the worker map a fresh one. A session takes it (owner, its
 * BackendId) only while no worker request on it runs: worker_busy is set when
 * the worker takes such a request (under the slot's spinlock, so a session
 * that gives the request up sees either a queued request, which the worker
 * will never take, or a busy area), and cleared before the worker answers, or
 * by TsdgIpcFailAll once the worker is gone. A session that gave up a running
 * request therefore leaves the area to the worker until the worker has let go.
 */
typedef struct TsdgBatchAreaState
{
	slock_t		mutex;
	int			owner;			/* BackendId of the session using it, 0: none */
	bool		worker_busy;
	Size		size;			/* bytes; 0 when tsdg.batch_memory is 0 */
} TsdgBatchAreaState;

typedef struct TsdgWorkerShared
{
	slock_t		mutex;			/* the fields up to the counters */
	TsdgServerState state;
	pid_t		supervisor_pid;
	pid_t		server_pid;
	int			server_starts;
	char		device[TSDG_DEVICE_NAME_LEN];
	char		last_error[TSDG_ERROR_MESSAGE_LEN];
	int64		memory_used;	/* bytes of the resident indexes */
	int64		device_free;	/* -1 when the backend cannot tell */
	int64		device_total;
	/* bit 1 << m for each TsdgMetric m the server's backend computes, set before it is READY */
	pg_atomic_uint32 metrics;
	int			resident_count;
	TsdgResidentIndexInfo resident[TSDG_MAX_RESIDENT_INDEXES];

	/*
	 * posted by a backend after queueing a request while the GPU server
	 * sleeps on it (server_sleeping): a server that is awake sees the queue
	 * counter, and the backend saves the system call that wakes it
	 */
	sem_t		wakeup;
	pg_atomic_uint32 server_sleeping;

	pg_atomic_uint64 next_request_id;
	pg_atomic_uint32 queued;	/* requests QUEUED now */
	pg_atomic_uint64 batches;	/* search batches served */
	pg_atomic_uint64 batched_queries;	/* queries in those batches */
	pg_atomic_uint64 builds;
	pg_atomic_uint64 loads;
	pg_atomic_uint64 fallbacks; /* requests a backend ran on the CPU instead */

	/* settings the supervisor copies from its configuration for the server */
	int			batch_wait_us;
	int64		memory_limit_bytes; /* 0: no limit but the device's */

	TsdgBatchAreaState batch_area;
	int			slot_count;
	TsdgRequestSlot slots[FLEXIBLE_ARRAY_MEMBER];
} TsdgWorkerShared;

extern TsdgWorkerShared *TsdgShared;
/* the batch area's memory (see TsdgBatchAreaState), NULL when there is none */
extern char *TsdgBatchAreaBase;
/* tsdg.batch_memory: the batch area's size (set in tsdgworker.c, with the worker's settings) */
extern int	tsdg_batch_memory_mb;

/* registration from _PG_init, and attaching in every process */
extern void TsdgIpcRequestShmem(void);
extern bool TsdgIpcIsAvailable(void);

extern TsdgServerState TsdgIpcServerState(void);
extern void TsdgIpcSetServerState(TsdgServerState state, const char *device, const char *error);

/* layout of bulk segments */
extern Size TsdgBulkAdd(Size *offset, Size bytes);
extern void *TsdgBulkArray(void *base, Size offset);

/* ---- backend side ---- */

/* this backend's slot, reset for a new request of the given kind */
extern TsdgRequestSlot *TsdgIpcBeginRequest(TsdgRequestKind kind);
/* queue the request written into the slot; returns its id */
extern uint64 TsdgIpcSubmit(TsdgRequestSlot *slot);
/* wakes the server if it sleeps (a turn of a build in parts is its to take) */
extern void TsdgIpcWakeServer(void);

typedef bool (*TsdgWaitPollFn) (void *arg, TsdgRequestSlot *slot);

/*
 * Wait until the worker answers request_id. timeout_ms < 0 waits without a
 * limit (while the worker lives). poll, if given, runs at every wake-up (at
 * least every 50 ms) and returns true to cancel the request. Returns true
 * with the slot ANSWERED, false when the request was abandoned (timeout,
 * worker gone, cancelled by poll); an ERROR thrown while waiting (a query
 * cancel) abandons it too.
 */
extern bool TsdgIpcWait(TsdgRequestSlot *slot, uint64 request_id, int timeout_ms,
						TsdgWaitPollFn poll, void *poll_arg);
/* give up a request: the worker stops a build at its next poll */
extern void TsdgIpcAbandon(TsdgRequestSlot *slot, uint64 request_id);
/* release an answered slot */
extern void TsdgIpcFinish(TsdgRequestSlot *slot);
/*
 * Take the batch area for this session's batch of size bytes: false when it
 * is smaller, used by another session, or still held by the worker for a
 * request given up. Released by TsdgIpcReleaseBatchArea, or at the end of
 * the transaction or the session when an error came first.
 */
extern bool TsdgIpcAcquireBatchArea(Size size);
extern void TsdgIpcReleaseBatchArea(void);

/* ---- server side ---- */

/* fail every request queued or running (the GPU server died) */
extern void TsdgIpcFailAll(const char *message);
/*
 * Take a QUEUED slot: marks it RUNNING and copies the request out (with the
 * inline query, when query is not NULL). Returns false when it is not queued.
 */
extern bool TsdgIpcTake(TsdgRequestSlot *slot, TsdgRequestSlot *copy, float *query);
/*
 * Answers a request that is still current, then wakes its backend; message
 * (NULL: none) says why a reply is not OK. Bulk answers are in the request's
 * DSM segment already. Returns false when the backend gave up.
 */
extern bool TsdgIpcAnswer(TsdgRequestSlot *slot, uint64 request_id, TsdgReply reply,
						  const char *message);

/* the node id of a pending row in a search's answer (its TID says which) */
#define TSDG_PENDING_ROW_ID		((uint32) 0xFFFFFFFE)

/* what a search's answer says besides its reply */
typedef struct TsdgSearchAnswer
{
	int			result_count;
	/*
	 * an inline search's results, result_count of them (a deleted node has
	 * an invalid TID); NULL for a batch, whose results are in its segment
	 */
	const float *dists;
	const uint32 *ids;
	const ItemPointerData *tids;
	int			max_results;	/* the request's k, which places ids and TIDs in the payload */
	bool		pending_searched;	/* the results include the pending rows */
	float		pending_bound;	/* how near those they leave out may be */
} TsdgSearchAnswer;

/* TsdgIpcAnswer for a search */
extern bool TsdgIpcAnswerSearch(TsdgRequestSlot *slot, uint64 request_id, TsdgReply reply,
								const TsdgSearchAnswer *answer, const char *message);
/* the worker is done with the batch area of the request it took (before it answers) */
extern void TsdgIpcLetGoOfBatchArea(void);
/* the backend's cancel flag of a running request (read by a build's poll) */
extern bool TsdgIpcCancelRequested(TsdgRequestSlot *slot, uint64 request_id);
extern void TsdgIpcReportProgress(TsdgRequestSlot *slot, uint64 request_id, int phase,
								  int64 done, int64 total);

#endif							/* TSDG_IPC_H */
