/*
 * Merging the pending rows of a tsdg index into its graph (DESIGN.md "Insert
 * and merge", issue 7): the pending rows get their own k-NN graph by GNND,
 * GGM (paper 000, section 5) merges it with the stored k-NN lists of the live
 * nodes, the merged lists are diversified again (TSDG), and the new graph is
 * written into a region of its own before one metapage record switches to it
 * (the format and the block bookkeeping are described in tsdg.h).
 *
 * The computation is incremental (tsdg_merge_graph_incremental): GGM joins
 * only the lists the pending rows can change, TSDG is redone only where a
 * list can change, the other nodes keep their stored lists. Without deleted
 * nodes the ids stay as they are and the stored k-NN lists go to the core as
 * they are (it computes their distances on its threads). With deleted nodes
 * the live nodes are renumbered, the k-NN lists that held a deleted node are
 * repaired here (with that node's own neighbors) and the search lists lose
 * their edges to deleted nodes; both count as changed, so TSDG builds their
 * search lists again.
 *
 * Triggers: SELECT tsdg_merge('index'), and VACUUM/autovacuum
 * (amvacuumcleanup) when the pending rows or the deleted nodes exceed
 * tsdg.merge_threshold + tsdg.merge_scale_factor * live nodes, the way
 * autovacuum's own threshold is written.
 *
 * Concurrency. A merge holds ShareUpdateExclusiveLock on the table, as VACUUM
 * does, so two merges of an index never overlap, and no VACUUM marks nodes
 * deleted or removes pending rows while a merge reads them. Searches and
 * inserts go on: the merge "detaches" the pending list by appending an empty
 * page to it and consuming the pages before that one; inserts keep appending
 * after it, and those rows stay pending. A search reads the metapage once:
 * before the switch it sees the old graph and the whole pending list (the
 * consumed pages still lead to the rest), after it the new graph and the
 * rows that stayed pending. Deleted nodes are left out of the new graph
 * (nodes are renumbered, heap TIDs kept) after their neighbors' lists were
 * repaired with the deleted node's own neighbors.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "tsdg.h"
#include "tsdgworker.h"

int			tsdg_merge_threshold = 1000;
double		tsdg_merge_scale_factor = 0.05;
double		tsdg_merge_knn_lag = 0.5;

/* One merge: what it consumed, the rows it merges, and the graph it made. */
typedef struct TsdgMerge
{
	Relation	index;
	TsdgMetaPageData meta;		/* as it was when the pending list was detached */
	TsdgLayout	layout;			/* of the old graph */

	/* the pending pages consumed: consumed_head .. consumed_tail */
	BlockNumber consumed_head;
	BlockNumber consumed_tail;
	BlockNumber remaining_head; /* the page appended at the detach */
	int64		consumed_rows;

	/* rows [0, n_old) are the live nodes, [n_old, n_old + n_new) the pending rows */
	int64		n_old;
	int64		n_new;
	/*
	 * the computation's old rows: the live nodes whose k-NN lists it has,
	 * all but those past the k-NN pages when it read them (tsdg.h); the
	 * rows after them are its batch
	 */
	int64		split;
	int			dims;
	int			k;
	float	   *rows;
	ItemPointerData *tids;
	uint32	   *old_knn_ids;	/* n_old * k, ids of the new numbering */
	float	   *old_knn_dists;	/* NULL without deletes: the core computes them */

	/* the stored search graph, new numbering */
	uint32	   *old_neighbors;	/* n_old * degree */
	uint8	   *old_lambdas;
	uint8	   *old_changed;	/* n_old: list repaired after deletes; NULL without deletes */
	uint8	   *changed;		/* per row: TSDG_CHANGED_KNN | GRAPH | LINK */

	/* the merged graph */
	uint32	   *knn_ids;
	uint32	   *neighbors;
	uint8	   *lambdas;
	TsdgMetaPageData new_meta;
	TsdgLayout	new_layout;		/* of the merged graph, its rows placed */
	TsdgGraphArrays arrays;		/* what its pages are written from */
	bool		region_placed;	/* new_meta's region fields are set */
	bool		rows_written;	/* while the worker merged */
	bool		knn_pages_written;	/* while the worker diversified */
	/* writing the list pages as the worker publishes their lists, once it does */
	TsdgListWriters *list_writers;
	BlockNumber list_pages_early;	/* written by the list writers (tsdglistwriters.c) */
	BlockNumber list_pages_at_answer;	/* of those, written before its answer */
	BlockNumber list_pages_relinked;	/* of those, written again after its linking */
	double		list_pages_early_seconds;
	int			list_writers_launched;	/* parallel workers that wrote list pages */
	bool		knn_pages_kept; /* the worker keeps the merged k-NN lists, the pages
								 * keep the stored ones */

	/*
	 * unread row blocks (retired extents, a retired k-NN region, the spare
	 * rows): where new extents may go, then what stays spare or is freed
	 */
	TsdgRowExtent unused_rows[TSDG_MAX_ROW_EXTENTS + 2];
	int			unused_row_count;

	/* pages given to the free list at the switch, linked first .. last */
	BlockNumber freed_first;
	BlockNumber freed_last;
	/* block runs added to the metapage's free extents at the switch, unwritten */
	TsdgRowExtent freed_extents[TSDG_MAX_FREE_EXTENTS];
	int			freed_extent_count;

	/* where the arrays above live when the worker will compute the graph */
	TsdgMergeSegment segment;
	/* what of the old graph is not read here: the worker copies it in from its copy */
	TsdgWorkerCopy left_to_worker;
	/* the search for the new rows the searches do not reach, while the pages are written */
	TsdgUnreachedJob *unreached_job;
	int64		lists_repaired; /* lists given an edge into such a row */
	BlockNumber list_pages_repaired;	/* list pages written again for them */
	bool		worker_summary_failed;	/* the summary computed here instead */
} TsdgMerge;

static bool TsdgKnnPagesMayLagFor(const TsdgMetaPageData *meta, int64 n);
static void TsdgWriteRows(TsdgMerge *m);
static void TsdgWriteNewRows(void *arg);
static void TsdgWriteKnnPages(void *arg);
static void TsdgWriteListPagesEarly(void *arg, int64 rows);
static void TsdgFinishListPages(TsdgMerge *m, bool merged);
static BlockNumber TsdgNewListPages(const TsdgMerge *m);
static BlockNumber TsdgWriteListPagesAgain(TsdgMerge *m, uint8 flag, BlockNumber pages,
										   int64 *lists_marked);
static void TsdgWriteRepairedListPages(TsdgMerge *m);

void
TsdgMergeInit(void)
{
	DefineCustomIntVariable("tsdg.merge_threshold",
							"Pending rows (or deleted nodes) past which VACUUM merges a tsdg index.",
							"VACUUM merges when they exceed tsdg.merge_threshold + "
							"tsdg.merge_scale_factor * live nodes; -1 disables merges by VACUUM.",
							&tsdg_merge_threshold, 1000, -1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("tsdg.merge_scale_factor",
							 "Fraction of the live nodes added to tsdg.merge_threshold.",
							 NULL,
							 &tsdg_merge_scale_factor, 0.05, 0.0, 100.0,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("tsdg.merge_knn_lag",
							 "Fraction of a tsdg index's nodes whose k-NN lists a merge on the GPU worker may leave out of the index's pages.",
							 "The worker keeps the merged k-NN lists, so such a merge writes only the search lists; "
							 "a merge that has to read the k-NN lists from the pages (after the worker restarted) "
							 "merges the nodes past them again. 0: every merge writes them.",
							 &tsdg_merge_knn_lag, 0.5, 0.0, 1.0,
							 PGC_USERSET, 0, NULL, NULL, NULL);
}

/* the nodes whose k-NN lists the k-NN pages hold */
static uint32
TsdgStoredKnnNodes(const TsdgMetaPageData *meta)
{
	return meta->node_count - Min(meta->knn_unstored, meta->node_count);
}

/*
 * The blocks of the current graph's lists' region: its list pages, and its
 * k-NN pages unless they stayed in a region of their own, at least
 */
static BlockNumber
TsdgRegionBlocks(const TsdgMetaPageData *meta)
{
	BlockNumber blocks;

	if (meta->node_count == 0)
		return meta->region_blocks;
	blocks = TsdgPagesFor(meta->node_count, meta->lists_per_page);
	if (meta->knn_k > 0 && meta->knn_region_start == TSDG_NO_BLOCK)
		blocks += TsdgPagesFor(TsdgStoredKnnNodes(meta), TsdgKnnPerPage(meta->knn_k));
	return Max(blocks, meta->region_blocks);
}

/*
 * A page for pending rows, exclusively locked: the head of the free list
 * when there is one, else the first block of a free extent (zeroed), else a
 * new page. The caller holds the metapage locked exclusively, initializes
 * the page with a full image, and applies *source to the metapage
 * (TsdgTookPendingPage) in the record that does.
 */
Buffer
TsdgNewPendingBuffer(Relation index, const TsdgMetaPageData *meta, TsdgPendingPageSource *source)
{
	Buffer		buf;

	source->free_head_after = meta->free_head;
	source->free_extent = -1;
	if (meta->free_head != TSDG_NO_BLOCK)
	{
		buf = ReadBuffer(index, meta->free_head);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		source->free_head_after = TsdgPageGetOpaque(BufferGetPage(buf))->next;
		if (source->free_head_after == InvalidBlockNumber)
			source->free_head_after = TSDG_NO_BLOCK;
		return buf;
	}
	for (int e = 0; e < TSDG_MAX_FREE_EXTENTS; e++)
		if (meta->free_extents[e].blocks > 0)
		{
			source->free_extent = e;
			return ReadBufferExtended(index, MAIN_FORKNUM, meta->free_extents[e].start,
									  RBM_ZERO_AND_LOCK, NULL);
		}
	return TsdgNewBuffer(index, MAIN_FORKNUM);
}

void
TsdgTookPendingPage(TsdgMetaPageData *meta, const TsdgPendingPageSource *source)
{
	meta->free_head = source->free_head_after;
	if (source->free_extent >= 0)
	{
		meta->free_extents[source->free_extent].start++;
		meta->free_extents[source->free_extent].blocks--;
	}
}

/*
 * The previous merge's retired pages become reusable once no scan that read
 * the metapage before its switch can still run: scans pin the metapage for
 * their whole life, so holding a cleanup lock on it (no other pin) proves
 * it. The retired pending pages go to the free list, the spare region stays
 * spare, now writable. Without wait, gives up (returns false) when some
 * other pin stays for a second: a scan still runs.
 */
static bool
TsdgReclaimRetired(Relation index, bool wait)
{
	Buffer		metabuf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	TsdgMetaPage meta;
	Buffer		tailbuf = InvalidBuffer;
	GenericXLogState *state;

	LockBuffer(metabuf, BUFFER_LOCK_SHARE);
	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	if (!meta->retired_readable)
	{
		UnlockReleaseBuffer(metabuf);
		return true;
	}
	LockBuffer(metabuf, BUFFER_LOCK_UNLOCK);

	if (wait)
		LockBufferForCleanup(metabuf);
	else
	{
		/* inserts pin the metapage for moments: give them a second */
		int			tries = 0;

		while (!ConditionalLockBufferForCleanup(metabuf))
		{
			if (++tries >= 100)
			{
				ReleaseBuffer(metabuf);
				return false;
			}
			pg_usleep(10000L);
			CHECK_FOR_INTERRUPTS();
		}
	}

	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	if (meta->retired_head != TSDG_NO_BLOCK)
	{
		tailbuf = ReadBuffer(index, meta->retired_tail);
		LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
	}
	state = GenericXLogStart(index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	if (BufferIsValid(tailbuf))
	{
		Page		tail = GenericXLogRegisterBuffer(state, tailbuf, 0);

		TsdgPageGetOpaque(tail)->next =
			meta->free_head == TSDG_NO_BLOCK ? InvalidBlockNumber : meta->free_head;
		meta->free_head = meta->retired_head;
		meta->retired_head = TSDG_NO_BLOCK;
		meta->retired_tail = TSDG_NO_BLOCK;
	}
	meta->retired_readable = false;
	GenericXLogFinish(state);
	if (BufferIsValid(tailbuf))
		UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
	return true;
}

/*
 * Appends an empty page to the pending list: the pages before it are what
 * this merge consumes, new rows go to it and after it.
 */
static void
TsdgDetachPending(TsdgMerge *m)
{
	Buffer		metabuf = ReadBuffer(m->index, TSDG_METAPAGE_BLKNO);
	TsdgMetaPage meta;
	Buffer		tailbuf;
	Buffer		newbuf;
	TsdgPendingPageSource source;
	GenericXLogState *state;
	Page		newpage;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	meta = TsdgPageGetMeta(BufferGetPage(metabuf));
	m->consumed_head = meta->pending_head;
	m->consumed_tail = meta->pending_tail;
	m->consumed_rows = meta->pending_count;
	m->remaining_head = InvalidBlockNumber;
	if (!BlockNumberIsValid(meta->pending_head))
	{
		memcpy(&m->meta, meta, sizeof(TsdgMetaPageData));
		UnlockReleaseBuffer(metabuf);
		return;
	}

	tailbuf = ReadBuffer(m->index, meta->pending_tail);
	LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
	newbuf = TsdgNewPendingBuffer(m->index, meta, &source);

	state = GenericXLogStart(m->index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));
	newpage = GenericXLogRegisterBuffer(state, newbuf, GENERIC_XLOG_FULL_IMAGE);
	TsdgInitPendingPage(newpage);
	m->remaining_head = BufferGetBlockNumber(newbuf);
	TsdgPageGetOpaque(GenericXLogRegisterBuffer(state, tailbuf, 0))->next = m->remaining_head;
	meta->pending_tail = m->remaining_head;
	TsdgTookPendingPage(meta, &source);
	memcpy(&m->meta, meta, sizeof(TsdgMetaPageData));
	GenericXLogFinish(state);

	UnlockReleaseBuffer(newbuf);
	UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
}

/* the stored k-NN lists of the old graph (old ids) and the renumbering */
typedef struct TsdgOldGraph
{
	int64		nodes;
	int64		knn_nodes;		/* the first nodes, whose lists the k-NN pages hold */
	int			width;			/* knn_k */
	uint32	   *lists;			/* nodes * width, TSDG_INVALID_ID padded (all of it past knn_nodes) */
	uint32	   *new_id;			/* old id -> new id, TSDG_INVALID_ID when deleted */
} TsdgOldGraph;

/* the valid entries of a node's stored k-NN list; returns the count */
static int
TsdgSourceList(const TsdgOldGraph *g, uint32 node, uint32 *out)
{
	int			count = 0;
	const uint32 *list = g->lists + (int64) node * g->width;

	for (int j = 0; j < g->width; j++)
		if (list[j] != TSDG_INVALID_ID && list[j] < g->knn_nodes)
			out[count++] = list[j];
	return count;
}

/*
 * Each live node's k-NN list in the new numbering, with distances: its old
 * list without deleted nodes, repaired with the lists of the deleted nodes
 * it held (their neighbors are likely its own), the k nearest kept. A
 * repaired list is marked in m->old_changed.
 */
static void
TsdgOldKnnLists(TsdgMerge *m, const TsdgOldGraph *g, TsdgMetric metric)
{
	int			source_max = g->width;
	int			candidate_max = source_max * (1 + source_max);
	uint32	   *source = palloc(sizeof(uint32) * source_max);
	uint32	   *second = palloc(sizeof(uint32) * source_max);
	TsdgCandidate *candidates = palloc(sizeof(TsdgCandidate) * candidate_max);

	for (uint32 old = 0; old < g->nodes; old++)
	{
		uint32		self = g->new_id[old];
		int			count = 0;
		int			kept = 0;
		int			sources;
		uint32	   *ids;
		float	   *dists;

		if (self == TSDG_INVALID_ID)
			continue;
		sources = TsdgSourceList(g, old, source);
		for (int j = 0; j < sources; j++)
		{
			uint32		v = g->new_id[source[j]];

			if (v != TSDG_INVALID_ID)
				candidates[count++].id = v;
			else
			{
				int			seconds = TsdgSourceList(g, source[j], second);

				m->old_changed[self] = 1;
				for (int i = 0; i < seconds; i++)
				{
					uint32		w = g->new_id[second[i]];

					if (w != TSDG_INVALID_ID && w != self)
						candidates[count++].id = w;
				}
			}
		}
		for (int j = 0; j < count; j++)
			candidates[j].distance = tsdg_metric_distance(metric, m->rows + (int64) self * m->dims,
														  m->rows + (int64) candidates[j].id * m->dims,
														  m->dims);
		qsort(candidates, count, sizeof(TsdgCandidate), TsdgCompareCandidates);

		ids = m->old_knn_ids + (int64) self * m->k;
		dists = m->old_knn_dists + (int64) self * m->k;
		for (int j = 0; j < count && kept < m->k; j++)
			if (candidates[j].id != self && (kept == 0 || ids[kept - 1] != candidates[j].id))
			{
				ids[kept] = candidates[j].id;
				dists[kept++] = candidates[j].distance;
			}
		for (; kept < m->k; kept++)
		{
			ids[kept] = TSDG_INVALID_ID;
			dists[kept] = get_float4_infinity();
		}
		if ((old & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	pfree(source);
	pfree(second);
	pfree(candidates);
}

/*
 * The stored search lists (read in the new order, with old ids) in the new
 * numbering: edges to deleted nodes (or out of range) are dropped, and a list
 * that lost one is marked in m->old_changed, so that TSDG builds it again.
 */
static void
TsdgRenumberSearchLists(TsdgMerge *m, const TsdgOldGraph *g)
{
	int			degree = m->meta.degree;

	for (int64 s = 0; s < m->n_old; s++)
	{
		uint32	   *ids = m->old_neighbors + s * degree;
		uint8	   *lambdas = m->old_lambdas + s * degree;
		int			kept = 0;

		for (int j = 0; j < degree; j++)
		{
			uint32		v = ids[j];

			if (v == TSDG_INVALID_ID)
				continue;
			v = v < g->nodes ? g->new_id[v] : TSDG_INVALID_ID;
			if (v == TSDG_INVALID_ID)
			{
				m->old_changed[s] = 1;
				continue;
			}
			ids[kept] = v;
			lambdas[kept++] = lambdas[j];
		}
		for (; kept < degree; kept++)
		{
			ids[kept] = TSDG_INVALID_ID;
			lambdas[kept] = 0;
		}
	}
}

/*
 * Bytes a merge holds per row in this backend: the row, its TID, its old and
 * new search graph list, its two changed flags, its k-NN list as read from
 * the pages, as GGM starts from it and as GGM returns it.
 */
static Size
TsdgMergeBytesPerRow(const TsdgMetaPageData *meta)
{
	return sizeof(float) * meta->dims + sizeof(ItemPointerData) +
		2 * (sizeof(uint32) + sizeof(uint8)) * meta->degree + 2 * sizeof(uint8) +
		(sizeof(uint32) + 2 * (sizeof(uint32) + sizeof(float))) * meta->build_k;
}

/* the rows a merge would hold: live nodes and pending rows */
static int64
TsdgMergeRows(const TsdgMetaPageData *meta)
{
	return Max((int64) (meta->node_count - meta->deleted_count) + meta->pending_count,
			   (int64) meta->node_count);
}

/*
 * Bytes a merge holds in this backend: its rows' arrays, and the check of
 * its new rows besides the walks it keeps for the repair (those get what
 * maintenance_work_mem leaves, TsdgMergedEntryPoints).
 */
static double
TsdgMergeBytes(const TsdgMetaPageData *meta)
{
	return (double) TsdgMergeRows(meta) * TsdgMergeBytesPerRow(meta) +
		(double) meta->pending_count * TSDG_UNREACHED_JOB_ROW_BYTES;
}

static bool
TsdgMergeFits(const TsdgMetaPageData *meta)
{
	return TsdgMergeBytes(meta) <= (double) maintenance_work_mem * 1024.0;
}

static void
TsdgCheckMergeMemory(Relation index, const TsdgMetaPageData *meta)
{
	int64		rows = TsdgMergeRows(meta);

	if (!TsdgMergeFits(meta))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("merging tsdg index \"%s\" does not fit in maintenance_work_mem (%d kB)",
						RelationGetRelationName(index), maintenance_work_mem),
				 errdetail("The merge holds %lld rows, about %.0f bytes each.",
						   (long long) rows, TsdgMergeBytes(meta) / Max(rows, 1)),
				 errhint("Raise maintenance_work_mem to at least %.0f MB.",
						 TsdgMergeBytes(meta) / (1024.0 * 1024.0) + 1)));
}

/*
 * Reads the live nodes (vectors, TIDs, k-NN or TSDG lists) of the old graph
 * and the consumed pending rows into the merge's arrays, and builds the
 * live nodes' starting k-NN lists.
 */
/* the core's parameters of a merge: the index's build parameters */
static void
TsdgMergeParams(const TsdgMetaPageData *meta, TsdgBuildParams *params)
{
	tsdg_build_params_default(params);
	params->degree = meta->degree;
	params->build_k = meta->build_k;
	params->samples = meta->samples;
	params->iterations = meta->iterations;
	params->alpha = meta->alpha;
	params->lambda0 = meta->lambda0;
}

/*
 * Reads the rows of the nodes [0, nodes) of the old graph: the live ones get
 * new ids in order (into new_id, deleted ones TSDG_INVALID_ID), their TIDs and
 * vectors go to m->tids and m->rows, m->n_old counts them.
 */
static void
TsdgReadOldRows(TsdgMerge *m, uint32 nodes, uint32 *new_id, int64 capacity)
{
	m->n_old = 0;
	for (uint32 first = 0, end; first < nodes; first = end)
	{
		Buffer		buf = ReadBuffer(m->index, TsdgRowBlock(&m->layout, first));
		Page		page;

		end = TsdgRowPageEnd(&m->layout, first, nodes);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < end; id++)
		{
			TsdgNodeHeader *hdr = (TsdgNodeHeader *) TsdgRowRecord(&m->layout, page, id);

			if (hdr->flags & TSDG_NODE_DELETED)
			{
				new_id[id] = TSDG_INVALID_ID;
				continue;
			}
			if (m->n_old == capacity)
				elog(ERROR, "tsdg index \"%s\" has more live nodes than its metapage counts",
					 RelationGetRelationName(m->index));
			new_id[id] = (uint32) m->n_old;
			m->tids[m->n_old] = hdr->heaptid;
			memcpy(m->rows + m->n_old * m->dims, TsdgRecordVector(hdr), sizeof(float) * m->dims);
			m->n_old++;
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/* the search lists of the live nodes of the old graph, old ids until TsdgRenumberSearchLists */
static void
TsdgReadOldLists(TsdgMerge *m, const TsdgOldGraph *g)
{
	const TsdgMetaPageData *meta = &m->meta;

	for (uint32 first = 0; first < g->nodes; first += m->layout.lists_per_page)
	{
		uint32		end = Min(first + m->layout.lists_per_page, g->nodes);
		Buffer		buf = ReadBuffer(m->index, TsdgListBlock(&m->layout, first));
		Page		page;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		for (uint32 id = first; id < end; id++)
		{
			char	   *rec = TsdgListRecord(&m->layout, page, id);
			uint32		self = g->new_id[id];

			if (self == TSDG_INVALID_ID)
				continue;
			TsdgListRead(&m->layout, rec, m->old_neighbors + (int64) self * meta->degree,
						 m->old_lambdas + (int64) self * meta->degree);
		}
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/* the stored k-NN lists of the old graph, old ids, into g->lists */
static void
TsdgReadOldKnn(TsdgMerge *m, const TsdgOldGraph *g)
{
	int			per_page = TsdgKnnPerPage(g->width);

	for (int64 i = g->knn_nodes * g->width; i < g->nodes * g->width; i++)
		g->lists[i] = TSDG_INVALID_ID;
	for (int64 first = 0; first < g->knn_nodes; first += per_page)
	{
		int64		end = Min(first + per_page, g->knn_nodes);
		Buffer		buf = ReadBuffer(m->index, m->meta.knn_start + first / per_page);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		memcpy(g->lists + first * g->width, PageGetContents(BufferGetPage(buf)),
			   sizeof(uint32) * g->width * (end - first));
		UnlockReleaseBuffer(buf);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Without deletes, the lists read from the pages keep their ids; only ids
 * out of range (a damaged page) are dropped, from the k-NN lists as
 * TsdgSourceList drops them, and from the search lists as
 * TsdgRenumberSearchLists drops edges to deleted nodes.
 */
static void
TsdgCheckOldLists(TsdgMerge *m, const TsdgOldGraph *g)
{
	for (int64 i = 0; i < g->nodes * g->width; i++)
		if (g->lists[i] != TSDG_INVALID_ID && g->lists[i] >= g->knn_nodes)
			g->lists[i] = TSDG_INVALID_ID;
	TsdgRenumberSearchLists(m, g);
}

/*
 * Sets m->split once the stored lists are read: the live nodes with a
 * stored k-NN list, numbered first. The nodes past them join the batch, so
 * an old search list that points at one of them loses that edge and is
 * built again (marked in m->old_changed), as after a delete.
 */
static void
TsdgSplitAtStoredKnn(TsdgMerge *m, const TsdgOldGraph *g)
{
	int			degree = m->meta.degree;

	m->split = 0;
	for (int64 old = 0; old < g->knn_nodes; old++)
		m->split += g->new_id[old] != TSDG_INVALID_ID;
	if (m->split == m->n_old)
		return;
	for (int64 s = 0; s < m->split; s++)
	{
		uint32	   *ids = m->old_neighbors + s * degree;
		uint8	   *lambdas = m->old_lambdas + s * degree;
		int			kept = 0;

		for (int j = 0; j < degree && ids[j] != TSDG_INVALID_ID; j++)
		{
			if (ids[j] >= m->split)
			{
				m->old_changed[s] = 1;
				continue;
			}
			ids[kept] = ids[j];
			lambdas[kept++] = lambdas[j];
		}
		for (int j = kept; j < degree && ids[j] != TSDG_INVALID_ID; j++)
		{
			ids[j] = TSDG_INVALID_ID;
			lambdas[j] = 0;
		}
	}
}

static void
TsdgLoadRows(TsdgMerge *m, TsdgMetric metric)
{
	const TsdgMetaPageData *meta = &m->meta;
	TsdgOldGraph g;
	int64		capacity;
	TsdgPendingRows pending;
	TsdgBuildParams params;
	TsdgWorkerCopy copy = TSDG_COPY_NONE;

	MemSet(&g, 0, sizeof(g));
	g.nodes = meta->node_count;
	g.knn_nodes = TsdgStoredKnnNodes(meta);
	if (g.nodes > 0 && meta->knn_k != meta->build_k)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tsdg index \"%s\" keeps no k-NN lists to merge with",
						RelationGetRelationName(m->index)),
				 errhint("REINDEX the index.")));
	g.width = meta->build_k;
	g.new_id = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * Max(g.nodes, 1));

	capacity = (int64) (meta->node_count - meta->deleted_count) + m->consumed_rows;
	TsdgCheckMergeMemory(m->index, meta);
	m->tids = MemoryContextAllocHuge(CurrentMemoryContext,
									 sizeof(ItemPointerData) * Max(capacity, 1));
	m->n_old = 0;
	TsdgMergeParams(meta, &params);

	/*
	 * Without deletes, the worker may still hold this graph: the old rows,
	 * and when it built or merged it its lists too, are then left to it,
	 * unless a merge that has to write all rows again (its extents full)
	 * would need them here, or the rows past the stored k-NN lists are part
	 * of the batch.
	 */
	if (meta->deleted_count == 0 && g.nodes > 0 && meta->row_extent_count < TSDG_MAX_ROW_EXTENTS &&
		TsdgWorkerUsable())
		copy = TsdgWorkerCopyOf(m->index, meta);
	if (copy == TSDG_COPY_ROWS && g.knn_nodes < g.nodes)
		copy = TSDG_COPY_NONE;
	if (TsdgMergeSegmentCreate(&m->segment, g.nodes, m->consumed_rows, m->dims, &params,
							   meta->deleted_count > 0, copy != TSDG_COPY_GRAPH,
							   copy == TSDG_COPY_NONE,
							   !TsdgKnnPagesMayLagFor(meta, g.nodes + m->consumed_rows)))
	{
		/*
		 * read straight into the worker's segment (its stored k-NN ids too,
		 * without deletes); the old lists the worker holds are not read, nor
		 * its rows: they are read here only should the worker drop them, so
		 * the local array for them stays untouched memory until then
		 */
		m->left_to_worker = copy;
		m->rows = m->segment.rows_from == 0 ? m->segment.rows :
			MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * m->dims * Max(capacity, 1));
		m->old_neighbors = m->segment.old_neighbors;
		m->old_lambdas = m->segment.old_lambdas;
		m->old_changed = m->segment.old_changed;
		g.lists = meta->deleted_count == 0 ? m->segment.old_knn_ids :
			MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * Max(g.nodes, 1) * g.width);
	}
	else
	{
		g.lists = MemoryContextAllocHuge(CurrentMemoryContext,
										 sizeof(uint32) * Max(g.nodes, 1) * g.width);
		m->old_neighbors = MemoryContextAllocHuge(CurrentMemoryContext,
												  sizeof(uint32) * Max(capacity, 1) * meta->degree);
		m->old_lambdas = MemoryContextAllocHuge(CurrentMemoryContext,
												sizeof(uint8) * Max(capacity, 1) * meta->degree);
		m->old_changed = MemoryContextAllocExtended(CurrentMemoryContext, Max(capacity, 1),
													MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		m->rows = MemoryContextAllocHuge(CurrentMemoryContext,
										 sizeof(float) * m->dims * Max(capacity, 1));
	}

	if (m->left_to_worker != TSDG_COPY_NONE)
	{
		for (uint32 id = 0; id < g.nodes; id++)
			g.new_id[id] = id;
		m->n_old = g.nodes;
	}
	else
		TsdgReadOldRows(m, g.nodes, g.new_id, capacity);
	if (m->left_to_worker != TSDG_COPY_GRAPH)
	{
		TsdgReadOldLists(m, &g);
		TsdgReadOldKnn(m, &g);
	}

	/* the consumed pending rows, after the live nodes */
	if (m->segment.seg != NULL)
	{
		/* read apart, as their count may exceed the metapage's, then moved in */
		TsdgInitPendingRows(&pending, m->dims, m->consumed_rows);
		TsdgReadPendingRows(m->index, &m->layout, m->consumed_head, m->remaining_head, &pending);
		if (m->n_old + pending.count > m->segment.old_capacity + m->segment.new_capacity)
			elog(ERROR, "tsdg index \"%s\" has more pending rows than its metapage counts",
				 RelationGetRelationName(m->index));
		memcpy(m->rows + m->n_old * m->dims, pending.rows, sizeof(float) * m->dims * pending.count);
		m->tids = repalloc_huge(m->tids, sizeof(ItemPointerData) * Max(m->n_old + pending.count, 1));
		memcpy(m->tids + m->n_old, pending.tids, sizeof(ItemPointerData) * pending.count);
		m->n_new = pending.count;
	}
	else
	{
		pending.count = m->n_old;
		pending.capacity = Max(capacity, 1);
		pending.rows = m->rows;
		pending.tids = m->tids;
		TsdgReadPendingRows(m->index, &m->layout, m->consumed_head, m->remaining_head, &pending);
		m->rows = pending.rows;
		m->tids = pending.tids;
		m->n_new = pending.count - m->n_old;
	}
	m->consumed_rows = m->n_new;

	m->split = m->n_old;
	if (meta->deleted_count == 0)
	{
		/* the ids stay, so the stored lists are the starting lists */
		Assert(m->n_old == g.nodes);
		if (m->left_to_worker != TSDG_COPY_GRAPH)
		{
			TsdgCheckOldLists(m, &g);
			TsdgSplitAtStoredKnn(m, &g);
		}
		m->old_knn_ids = g.lists;
		m->old_knn_dists = NULL;
		return;
	}
	TsdgRenumberSearchLists(m, &g);
	if (m->segment.seg != NULL)
	{
		m->old_knn_ids = m->segment.old_knn_ids;
		m->old_knn_dists = m->segment.old_knn_dists;
	}
	else
	{
		m->old_knn_ids = MemoryContextAllocHuge(CurrentMemoryContext,
												sizeof(uint32) * Max(m->n_old, 1) * m->k);
		m->old_knn_dists = MemoryContextAllocHuge(CurrentMemoryContext,
												  sizeof(float) * Max(m->n_old, 1) * m->k);
	}
	TsdgOldKnnLists(m, &g, metric);
	TsdgSplitAtStoredKnn(m, &g);
}

static bool
TsdgMergePoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending);
}

static void
TsdgCheckCore(Relation index, TsdgStatus status, const TsdgError *error)
{
	if (status == TSDG_OK)
		return;
	if (status == TSDG_ERR_CANCELLED)
		CHECK_FOR_INTERRUPTS();
	ereport(ERROR,
			(errcode(status == TSDG_ERR_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY :
					 status == TSDG_ERR_CANCELLED ? ERRCODE_QUERY_CANCELED :
					 ERRCODE_INTERNAL_ERROR),
			 errmsg("merging tsdg index \"%s\" failed: %s",
					RelationGetRelationName(index), error->message)));
}

/*
 * Reads what TsdgLoadRows left to the worker's copy of the old graph (the
 * merge has no deletes, so the ids are the stored ones), the lists into
 * local memory when the segment was made without them.
 */
static void
TsdgReadLeftGraph(TsdgMerge *m)
{
	TsdgOldGraph g;

	if (m->old_knn_ids == NULL)
	{
		Size		lists = (Size) Max(m->n_old, 1) * m->meta.degree;

		m->old_knn_ids = MemoryContextAllocHuge(CurrentMemoryContext,
												sizeof(uint32) * Max(m->n_old, 1) * m->k);
		m->old_neighbors = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * lists);
		m->old_lambdas = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint8) * lists);
	}

	g.nodes = m->n_old;
	g.knn_nodes = TsdgStoredKnnNodes(&m->meta);
	g.width = m->k;
	g.lists = m->old_knn_ids;
	g.new_id = palloc_extended(sizeof(uint32) * Max(m->n_old, 1), MCXT_ALLOC_HUGE);
	TsdgReadOldRows(m, (uint32) m->n_old, g.new_id, m->n_old);
	if (m->left_to_worker == TSDG_COPY_GRAPH)
	{
		TsdgReadOldLists(m, &g);
		TsdgReadOldKnn(m, &g);
		TsdgCheckOldLists(m, &g);
		TsdgSplitAtStoredKnn(m, &g);
	}
	pfree(g.new_id);
	m->left_to_worker = TSDG_COPY_NONE;
}

/*
 * The old rows the worker merged from its copy, read after all: it did not
 * compute the merged graph's summary from them.
 */
static void
TsdgReadLeftRows(TsdgMerge *m)
{
	uint32	   *new_id;

	if (m->left_to_worker == TSDG_COPY_NONE)
		return;
	new_id = palloc_extended(sizeof(uint32) * Max(m->n_old, 1), MCXT_ALLOC_HUGE);
	TsdgReadOldRows(m, (uint32) m->n_old, new_id, m->n_old);
	pfree(new_id);
}

/*
 * What the metapage will say of the merged graph, set before it is computed:
 * the worker keeps its copy under that key (TsdgIndexKey), and the switch
 * writes the same values. The timestamp tells this merge's graph from one a
 * failed merge of the same graph_version left on the worker.
 */
static void
TsdgStampMergedGraph(TsdgMerge *m)
{
	m->new_meta.graph_version = m->meta.graph_version + 1;
	m->new_meta.node_count = (uint32) (m->n_old + m->n_new);
	m->new_meta.deleted_count = 0;
	m->new_meta.last_merge = GetCurrentTimestamp();
	m->new_meta.unreached_checked = (uint32) m->n_new;
}

/*
 * The seam of the merge computation: (old rows, their k-NN lists, their
 * search lists, new rows) in, (merged k-NN lists, new search graph, which
 * lists changed) out; see tsdg_merge_graph_incremental. m->rows holds
 * n_old + n_new rows, old first (the old ones, and with TSDG_COPY_GRAPH the
 * old lists, not read yet when m->left_to_worker); old_knn_dists may be
 * NULL. The GPU worker computes it when it can take it (on the GPU: the same
 * incremental merge with GNND, the old lists' distances and GGM on the
 * device), as it builds for CREATE INDEX, and keeps the merged graph for the
 * searches after the switch and for the next merge; else, or when the worker
 * fails or dies meanwhile, this backend computes it on the CPU, after reading
 * what it left to the worker. Either way the pages are written by this
 * backend afterwards, so a merge is as crash-safe on the worker as on the
 * CPU.
 */
static void
TsdgMergeComputeGraph(TsdgMerge *m, TsdgMetric metric, const TsdgBuildParams *params)
{
	TsdgWorkerMerge outcome;
	TsdgError	error;
	TsdgStatus	status;
	int64		n = m->n_old + m->n_new;

	outcome = TsdgWorkerMergeGraph(m->index, &m->segment, &m->meta, m->left_to_worker,
								   &m->new_meta, m->tids, m->rows, m->split, n - m->split, m->dims,
								   metric, params, m->old_knn_ids, m->old_knn_dists,
								   m->old_neighbors, m->old_lambdas, m->old_changed, m->knn_ids,
								   m->neighbors, m->lambdas, m->changed);
	TsdgFinishListPages(m, outcome == TSDG_WORKER_MERGED);
	if (outcome != TSDG_WORKER_MERGED && m->left_to_worker != TSDG_COPY_NONE)
	{
		/* the worker dropped its copy, or gave up: what was left to it is read after all */
		TsdgReadLeftGraph(m);
		if (outcome == TSDG_WORKER_NEEDS_OLD_GRAPH)
			outcome = TsdgWorkerMergeGraph(m->index, &m->segment, &m->meta, TSDG_COPY_NONE,
										   &m->new_meta, m->tids, m->rows, m->split, n - m->split,
										   m->dims, metric, params, m->old_knn_ids,
										   m->old_knn_dists, m->old_neighbors, m->old_lambdas,
										   m->old_changed, m->knn_ids, m->neighbors, m->lambdas,
										   m->changed);
		TsdgFinishListPages(m, outcome == TSDG_WORKER_MERGED);
	}
	if (outcome == TSDG_WORKER_MERGED)
		return;
	/* the worker's lists, if written, are not those of this merge */
	m->knn_pages_written = false;
	m->list_pages_early = 0;
	if (m->knn_pages_kept && m->region_placed)
	{
		/*
		 * Placed for the list pages only: placed again, for the k-NN pages
		 * too. Blocks appended for it stay unused until REINDEX, as after a
		 * cancelled merge.
		 */
		m->region_placed = false;
	}
	m->knn_pages_kept = false;
	status = tsdg_merge_graph_incremental(NULL, m->rows, NULL, NULL, m->split, n - m->split, m->dims, metric,
										  params, m->old_knn_ids, m->old_knn_dists,
										  m->old_neighbors, m->old_lambdas, m->old_changed,
										  m->knn_ids, NULL, m->neighbors, m->lambdas, m->changed,
										  TsdgMergePoll, NULL, &error);
	TsdgCheckCore(m->index, status, &error);
}

/*
 * Whether a merge on the worker may leave the k-NN pages as they are: it
 * renumbers nothing (no deleted nodes), the pages hold some lists (their
 * width was checked when they were read), and the nodes past them stay
 * within tsdg.merge_knn_lag of a merged graph of n nodes (true for n, true
 * for fewer).
 */
static bool
TsdgKnnPagesMayLagFor(const TsdgMetaPageData *meta, int64 n)
{
	uint32		stored = TsdgStoredKnnNodes(meta);

	return meta->deleted_count == 0 && stored > 0 &&
		(double) (n - stored) <= tsdg_merge_knn_lag * (double) n;
}

/* the merged k-NN lists and search graph */
static void
TsdgComputeMerged(TsdgMerge *m, TsdgMetric metric)
{
	int64		n = m->n_old + m->n_new;
	TsdgBuildParams params;

	TsdgMergeParams(&m->meta, &params);
	if (m->segment.seg != NULL)
	{
		/*
		 * The segment has no k-NN lists when they could lag with all the
		 * pending rows the merge might take; it took no more. The local
		 * array is for a merge on the CPU should the worker fail.
		 */
		m->knn_ids = m->segment.knn_ids != NULL ? m->segment.knn_ids :
			MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * Max(n, 1) * m->k);
		m->changed = m->segment.changed;
		m->neighbors = m->segment.neighbors;
		m->lambdas = m->segment.lambdas;
		m->knn_pages_kept = TsdgKnnPagesMayLagFor(&m->meta, n);
		Assert(m->knn_pages_kept || m->segment.knn_ids != NULL);
		m->segment.while_merging = TsdgWriteNewRows;
		m->segment.knn_ready = m->knn_pages_kept ? NULL : TsdgWriteKnnPages;
		m->segment.lists_ready = TsdgWriteListPagesEarly;
		m->segment.hook_arg = m;
	}
	else
	{
		m->knn_ids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint32) * Max(n, 1) * m->k);
		m->changed = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(uint8) * Max(n, 1));
		m->neighbors = MemoryContextAllocHuge(CurrentMemoryContext,
											  sizeof(uint32) * Max(n, 1) * params.degree);
		m->lambdas = MemoryContextAllocHuge(CurrentMemoryContext,
											sizeof(uint8) * Max(n, 1) * params.degree);
	}
	TsdgInitLayout(&m->new_layout, m->dims, m->meta.degree, n);
	m->arrays = (TsdgGraphArrays) {&m->new_layout, n, m->tids, m->rows, m->neighbors, m->lambdas,
	m->knn_ids, m->k};
	if (n > 0)
		TsdgMergeComputeGraph(m, metric, &params);
}

/*
 * Entry points and d_nn1+ of the merged graph into m->new_meta, and the
 * search for the new rows the searches do not reach started beside the page
 * writes (TsdgFinishUnreachedCheck).
 */
static void
TsdgMergedEntryPoints(TsdgMerge *m, TsdgMetric metric)
{
	TsdgMetaPageData *nm = &m->new_meta;
	int64		n = m->n_old + m->n_new;
	int			degree = m->meta.degree;
	TsdgError	error;
	TsdgStatus	status;
	uint32		entries[TSDG_MAX_ENTRY_POINTS];
	double		record_bytes;

	nm->entry_count = 0;
	nm->nn1_bound = 0;
	if (n == 0)
		return;
	status = tsdg_select_entry_points(m->rows, n, m->dims, metric, m->neighbors, degree,
									  TSDG_MAX_ENTRY_POINTS, entries, &error);
	TsdgCheckCore(m->index, status, &error);
	for (int i = 0; i < TSDG_MAX_ENTRY_POINTS; i++)
		if (entries[i] != TSDG_INVALID_ID)
			nm->entry_points[nm->entry_count++] = entries[i];
	status = tsdg_graph_nn1_bound(m->rows, n, m->dims, metric, m->neighbors, degree,
								  &nm->nn1_bound, &error);
	TsdgCheckCore(m->index, status, &error);

	/*
	 * the walk of this backend's scans and of the CPU worker's, at
	 * tsdg.ef_search; the walks it keeps for the repair get what
	 * maintenance_work_mem leaves
	 */
	record_bytes = Max(0.0, (double) maintenance_work_mem * 1024.0 - TsdgMergeBytes(&m->meta));
	m->unreached_job = tsdg_unreached_job_start(m->rows, n, m->dims, metric, m->neighbors,
												m->lambdas, degree, nm->entry_points,
												nm->entry_count, m->n_old, tsdg_ef_search,
												tsdg_lambda_search, (int64) record_bytes, &error);
	if (m->unreached_job == NULL)
		TsdgCheckCore(m->index, TSDG_ERR_OUT_OF_MEMORY, &error);
}

/*
 * The new rows the merged graph's searches do not reach, into m->new_meta,
 * once the search TsdgMergedEntryPoints started has them (none when the
 * worker's summary brought them). A merge computed here first repairs its
 * graph for them (tsdg_unreached_job_finish_repairing), as the worker does
 * its own: most then are reached, and fewer rows cost every search an
 * exact distance. A graph the worker computed stays as the worker holds it
 * when its summary failed: the check here then only lists the rows.
 */
static void
TsdgFinishUnreachedCheck(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;
	TsdgUnreachedJob *job = m->unreached_job;
	int64		unreached;
	TsdgError	error;
	TsdgStatus	status;

	if (job == NULL)
		return;
	m->unreached_job = NULL;
	if (m->segment.seg == NULL)
	{
		/* the lists it marks are counted with the worker's where their pages are written again */
		int64		lists_marked;

		status = tsdg_unreached_job_finish_repairing(job, m->neighbors, m->lambdas, m->meta.degree,
													 m->changed, nm->unreached, TSDG_MAX_UNREACHED,
													 &unreached, &lists_marked, &error);
		TsdgCheckCore(m->index, status, &error);
	}
	else
	{
		status = tsdg_unreached_job_finish(job, nm->unreached, TSDG_MAX_UNREACHED, &unreached, &error);
		TsdgCheckCore(m->index, status, &error);
	}
	nm->unreached_count = (int32) Min(unreached, TSDG_MAX_UNREACHED);
	if (unreached > TSDG_MAX_UNREACHED)
		ereport(LOG,
				(errmsg("tsdg index \"%s\": %lld of the %lld rows merged are not reached by a search for their own vector at tsdg.ef_search %d; the first %d are searched exactly",
						RelationGetRelationName(m->index), (long long) unreached,
						(long long) m->n_new, tsdg_ef_search, TSDG_MAX_UNREACHED)));
}

/* the list pages of the new graph */
static BlockNumber
TsdgNewListPages(const TsdgMerge *m)
{
	return TsdgPagesFor(m->arrays.n, m->new_layout.lists_per_page);
}

/*
 * Places the list and k-NN pages of the new graph: in the spare region when
 * it is large enough, else in new blocks at the end of the index, with room
 * to grow. Fills the region fields of m->new_meta and new_layout.
 */
static void
TsdgPlaceRegion(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;
	BlockNumber list_pages = TsdgNewListPages(m);
	BlockNumber used = m->knn_pages_kept ? list_pages : TsdgRegionPages(&m->arrays);
	BlockNumber start;

	if (m->region_placed)
		return;
	m->region_placed = true;
	nm->region_blocks = 0;
	nm->list_start = TSDG_METAPAGE_BLKNO + 1;
	nm->knn_start = InvalidBlockNumber;
	if (used == 0)
		return;

	if (m->meta.spare_start != TSDG_NO_BLOCK && m->meta.spare_blocks >= used)
	{
		nm->region_blocks = m->meta.spare_blocks;
		start = m->meta.spare_start;
	}
	else
	{
		/*
		 * The new blocks are only allocated under the extension lock, and
		 * written after it, so that inserts that need a page do not wait
		 * for the writing.
		 */
		nm->region_blocks = used + used / 2;
		start = TsdgAppendBlocks(m->index, nm->region_blocks);

		/*
		 * The room to grow stays as the extension left it (zero pages, which
		 * every later use of the region overwrites), except its last page:
		 * that one is logged, so that a replay extends the file past the
		 * whole region as the extension did here.
		 */
		if (nm->region_blocks > used)
			TsdgWritePages(m->index, start, nm->region_blocks - 1, nm->region_blocks,
						   TsdgFillRegionPage, &m->arrays);
	}
	nm->list_start = start;
	nm->knn_start = m->knn_pages_kept ? m->meta.knn_start : start + list_pages;
	m->new_layout.list_start = start;
}

/*
 * TsdgMergeSegment's knn_ready: the worker's merged k-NN lists written to
 * their pages while it diversifies.
 */
static void
TsdgWriteKnnPages(void *arg)
{
	TsdgMerge  *m = (TsdgMerge *) arg;

	TsdgPlaceRegion(m);
	TsdgWritePages(m->index, m->new_meta.list_start, TsdgNewListPages(m),
				   TsdgRegionPages(&m->arrays), TsdgFillRegionPage, &m->arrays);
	m->knn_pages_written = true;
}

/*
 * TsdgMergeSegment's lists_ready: the list pages whose lists the worker has
 * written out (the first rows of them), written while it writes the others
 * and links the graph's components (list pages are a third of a merge's time
 * into 2M rows, WAL-bound), by parallel workers and by this session
 * (tsdglistwriters.c). The few lists the linking changes are written again
 * after the answer (TsdgWriteListPagesAgain).
 */
static void
TsdgWriteListPagesEarly(void *arg, int64 rows)
{
	TsdgMerge  *m = (TsdgMerge *) arg;

	if (rows == 0)
		return;
	if (m->list_writers == NULL)
	{
		/* blocks appended for the region before any writer runs */
		TsdgPlaceRegion(m);
		m->list_writers = TsdgStartListWriters(m->index, m->segment.seg, &m->arrays,
											   m->segment.summary, m->new_meta.list_start);
		m->list_writers_launched = TsdgListWritersLaunched(m->list_writers);
	}
	/* after the answer the session writes its share at once, in TsdgFinishListPages */
	if (!m->segment.answered)
		TsdgListWritersOffer(m->list_writers);
}

/*
 * After the worker's answer: the list pages all written when it merged
 * (every list is published then), else the writers stopped and what they
 * wrote is not this merge's.
 */
static void
TsdgFinishListPages(TsdgMerge *m, bool merged)
{
	BlockNumber written;

	if (m->list_writers == NULL)
		return;
	written = TsdgFinishListWriters(m->list_writers, merged, &m->list_pages_at_answer,
									&m->list_pages_early_seconds);
	m->list_writers = NULL;
	m->list_pages_early = merged ? written : 0;
}

/*
 * The first `pages` list pages of the new graph that hold a list marked
 * `flag` in m->changed, written again (after the worker's component linking
 * changed lists already written, or the repair for the unreached rows).
 * Returns how many; *lists_marked, when given, gets the marked lists.
 */
static BlockNumber
TsdgWriteListPagesAgain(TsdgMerge *m, uint8 flag, BlockNumber pages, int64 *lists_marked)
{
	int64		n = m->n_old + m->n_new;
	int			per_page = m->new_layout.lists_per_page;
	BlockNumber run_start = InvalidBlockNumber;
	BlockNumber written = 0;

	if (lists_marked != NULL)
		*lists_marked = 0;
	for (BlockNumber page_no = 0; page_no <= pages; page_no++)
	{
		bool		marked = false;

		for (int64 id = (int64) page_no * per_page;
			 page_no < pages && id < Min((int64) (page_no + 1) * per_page, n) &&
			 (lists_marked != NULL || !marked); id++)
		{
			if ((m->changed[id] & flag) == 0)
				continue;
			marked = true;
			if (lists_marked != NULL)
				(*lists_marked)++;
		}
		if (marked && run_start == InvalidBlockNumber)
			run_start = page_no;
		else if (!marked && run_start != InvalidBlockNumber)
		{
			TsdgWritePages(m->index, m->new_meta.list_start, run_start, page_no, TsdgFillRegionPage,
						   &m->arrays);
			written += page_no - run_start;
			run_start = InvalidBlockNumber;
		}
	}
	return written;
}

/*
 * The list pages holding a list that the repair for the unreached rows
 * changed (here or on the worker, TSDG_CHANGED_REPAIR), written again: all
 * list pages were written by then.
 */
static void
TsdgWriteRepairedListPages(TsdgMerge *m)
{
	m->list_pages_repaired = TsdgWriteListPagesAgain(m, TSDG_CHANGED_REPAIR, TsdgNewListPages(m),
													 &m->lists_repaired);
}

/*
 * Writes the list pages of the new graph that were not written while the
 * worker wrote its lists out, and those of them the linking changed again,
 * and its k-NN pages unless they were written while the worker diversified
 * or stay as they are. The spare region's pages past the graph keep what
 * they hold.
 */
static void
TsdgWriteRegion(TsdgMerge *m)
{
	const TsdgMetaPageData *nm = &m->new_meta;
	BlockNumber list_pages = TsdgNewListPages(m);

	TsdgPlaceRegion(m);
	if (nm->region_blocks == 0)
		return;
	m->list_pages_relinked = TsdgWriteListPagesAgain(m, TSDG_CHANGED_LINK, m->list_pages_early, NULL);
	TsdgWritePages(m->index, nm->list_start, m->list_pages_early, list_pages, TsdgFillRegionPage,
				   &m->arrays);
	if (!m->knn_pages_written && !m->knn_pages_kept)
		TsdgWritePages(m->index, nm->list_start, list_pages, TsdgRegionPages(&m->arrays),
					   TsdgFillRegionPage, &m->arrays);
}

/*
 * Appends the rows [first, end) to the room of an extent whose rows before
 * first are written: a partly filled page gets them after its records in a
 * GenericXLog record (scans read its first records meanwhile, and none reads
 * past the old node count), the next pages are written whole.
 */
static void
TsdgAppendToExtent(TsdgMerge *m, const TsdgRowExtent *extent, uint32 first, uint32 end)
{
	const TsdgLayout *layout = &m->new_layout;
	int			per_page = layout->rows_per_page;
	uint32		offset = first - extent->first;
	TsdgRowRun	run = {&m->arrays, extent->first, first, end};

	if (first >= end)
		return;
	if (offset % per_page != 0)
	{
		Buffer		buf = ReadBuffer(m->index, extent->start + offset / per_page);
		GenericXLogState *state;
		Page		page;
		uint32		page_end = Min(end, first + (per_page - offset % per_page));

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		state = GenericXLogStart(m->index);
		page = GenericXLogRegisterBuffer(state, buf, 0);
		/* past the rows of the graph: a merge that crashed may have left some */
		((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) +
			layout->row_size * (offset % per_page);
		TsdgFillRowPage(page, layout, first, page_end, m->tids, m->rows);
		GenericXLogFinish(state);
		UnlockReleaseBuffer(buf);
		first = page_end;
		offset = first - extent->first;
	}
	if (first < end)
		TsdgWritePages(m->index, extent->start, offset / per_page,
					   TsdgPagesFor(end - extent->first, per_page), TsdgFillRowRunPage, &run);
}

/*
 * A new extent for the rows [first, n) and room for half the graph again:
 * in unused row blocks large enough for the rows, else at the end of the
 * index. Only the pages with rows and, at the end, the extent's last page
 * (so that a replay extends the file as far) are written.
 */
static void
TsdgNewExtent(TsdgMerge *m, uint32 first)
{
	TsdgMetaPageData *nm = &m->new_meta;
	int64		n = m->n_old + m->n_new;
	int			per_page = m->new_layout.rows_per_page;
	BlockNumber with_rows = TsdgPagesFor(n - first, per_page);
	TsdgRowExtent *extent = &nm->row_extents[nm->row_extent_count++];
	TsdgRowRun	run = {&m->arrays, first, first, (uint32) n};
	int			best = -1;

	for (int i = 0; i < m->unused_row_count; i++)
		if (m->unused_rows[i].blocks >= with_rows &&
			(best < 0 || m->unused_rows[i].blocks < m->unused_rows[best].blocks))
			best = i;
	extent->first = first;
	if (best >= 0)
	{
		extent->start = m->unused_rows[best].start;
		extent->blocks = m->unused_rows[best].blocks;
		m->unused_rows[best] = m->unused_rows[--m->unused_row_count];
		TsdgWritePages(m->index, extent->start, 0, with_rows, TsdgFillRowRunPage, &run);
		return;
	}
	extent->blocks = TsdgPagesFor(Max(n - first, n / 2), per_page);
	extent->start = TsdgAppendBlocks(m->index, extent->blocks);
	TsdgWritePages(m->index, extent->start, 0, with_rows, TsdgFillRowRunPage, &run);
	if (extent->blocks > with_rows)
		TsdgWritePages(m->index, extent->start, extent->blocks - 1, extent->blocks,
					   TsdgFillRowRunPage, &run);
}

/*
 * Places the rows of the merged graph. Old rows never move while the ids
 * stay: the new rows fill the last extent's room, then a new extent. A merge
 * that renumbered (deleted nodes dropped), or whose rows would need more
 * extents than the metapage holds, writes all rows into one new extent and
 * retires the old ones. Of the row blocks no scan reads (the extents the
 * previous merge retired and the spare rows) that no new extent took, the
 * largest stays spare and the others go to the free list. Fills the row
 * fields of m->new_meta and new_layout.
 */
static void
TsdgWriteRows(TsdgMerge *m)
{
	TsdgMetaPageData *nm = &m->new_meta;
	int64		n = m->n_old + m->n_new;
	int			per_page = m->new_layout.rows_per_page;
	bool		renumbered = m->n_old != (int64) m->meta.node_count;
	int			largest = -1;

	nm->row_extent_count = m->meta.row_extent_count;
	memcpy(nm->row_extents, m->meta.row_extents, sizeof(nm->row_extents));
	nm->retired_extent_count = 0;
	m->unused_row_count = 0;
	for (int e = 0; e < m->meta.retired_extent_count; e++)
		if (m->meta.retired_extents[e].blocks > 0)
			m->unused_rows[m->unused_row_count++] = m->meta.retired_extents[e];
	if (m->meta.retired_knn_region.blocks > 0)
		m->unused_rows[m->unused_row_count++] = m->meta.retired_knn_region;
	if (m->meta.spare_rows.blocks > 0)
		m->unused_rows[m->unused_row_count++] = m->meta.spare_rows;
	/* an extent without blocks (an index built empty) holds nothing to keep */
	while (nm->row_extent_count > 0 && nm->row_extents[nm->row_extent_count - 1].blocks == 0)
		nm->row_extent_count--;

	if (!renumbered && nm->row_extent_count > 0)
	{
		TsdgRowExtent *last = &nm->row_extents[nm->row_extent_count - 1];
		int64		room = (int64) last->blocks * per_page - (m->n_old - last->first);
		uint32		placed = (uint32) Min(n, m->n_old + Max(room, 0));

		if (placed >= n || nm->row_extent_count < TSDG_MAX_ROW_EXTENTS)
		{
			TsdgAppendToExtent(m, last, (uint32) m->n_old, placed);
			if (placed < n)
				TsdgNewExtent(m, placed);
			goto placed;
		}
	}

	/* all rows into one new extent */
	for (int e = 0; e < m->meta.row_extent_count; e++)
		if (m->meta.row_extents[e].blocks > 0)
			nm->retired_extents[nm->retired_extent_count++] = m->meta.row_extents[e];
	nm->row_extent_count = 0;
	if (n > 0)
		TsdgNewExtent(m, 0);

placed:
	m->new_layout.extent_count = nm->row_extent_count;
	memcpy(m->new_layout.extents, nm->row_extents, sizeof(nm->row_extents));
	for (int i = 0; i < m->unused_row_count; i++)
		if (largest < 0 || m->unused_rows[i].blocks > m->unused_rows[largest].blocks)
			largest = i;
	memset(&nm->spare_rows, 0, sizeof(nm->spare_rows));
	if (largest >= 0)
	{
		nm->spare_rows = m->unused_rows[largest];
		m->unused_rows[largest] = m->unused_rows[--m->unused_row_count];
	}
}

/*
 * TsdgMergeSegment's while_merging: the rows need no graph, so they are
 * written while the worker merges. A merge that left the old rows to the
 * worker (not read yet) only appends the new ones, which are here.
 */
static void
TsdgWriteNewRows(void *arg)
{
	TsdgMerge  *m = (TsdgMerge *) arg;

	TsdgWriteRows(m);
	m->rows_written = true;
}

static int
TsdgCompareExtentsBySize(const void *a, const void *b)
{
	const TsdgRowExtent *x = a;
	const TsdgRowExtent *y = b;

	return (x->blocks < y->blocks) - (x->blocks > y->blocks);
}

/* the empty free-extent slots of the metapage now; inserts only empty more */
static int
TsdgEmptyFreeExtentSlots(Relation index)
{
	TsdgMetaPageData meta;
	int			empty = 0;

	TsdgReadMeta(index, &meta);
	for (int e = 0; e < TSDG_MAX_FREE_EXTENTS; e++)
		empty += meta.free_extents[e].blocks == 0;
	return empty;
}

/*
 * Blocks no scan reads any more, freed for pending pages: the spare region
 * when the new lists did not fit in it, and the unused row blocks
 * TsdgWriteRows left over (the cleanup before this merge proved that no
 * scan of their graph remains). The largest runs become free extents at the
 * switch, as many as the metapage has empty slots for, without a page
 * written; the pages of the others are initialized as free pages linked in
 * order here, and the switch links the last one to the free list.
 */
static void
TsdgPrepareFreedPages(TsdgMerge *m, bool free_spare)
{
	TsdgRowExtent ranges[TSDG_MAX_ROW_EXTENTS + 3];
	int			count = 0;
	int			extents;

	if (free_spare)
	{
		ranges[count].start = m->meta.spare_start;
		ranges[count++].blocks = m->meta.spare_blocks;
	}
	for (int i = 0; i < m->unused_row_count; i++)
		ranges[count++] = m->unused_rows[i];

	qsort(ranges, count, sizeof(TsdgRowExtent), TsdgCompareExtentsBySize);
	extents = count > 0 ? Min(count, TsdgEmptyFreeExtentSlots(m->index)) : 0;
	memcpy(m->freed_extents, ranges, sizeof(TsdgRowExtent) * extents);
	m->freed_extent_count = extents;
	count -= extents;
	memmove(ranges, ranges + extents, sizeof(TsdgRowExtent) * count);

	m->freed_first = count > 0 ? ranges[0].start : InvalidBlockNumber;
	m->freed_last = count > 0 ? ranges[count - 1].start + ranges[count - 1].blocks - 1 :
		InvalidBlockNumber;
	for (int r = 0; r < count; r++)
	{
		for (BlockNumber i = 0; i < ranges[r].blocks; i++)
		{
			BlockNumber next = i + 1 < ranges[r].blocks ? ranges[r].start + i + 1 :
				r + 1 < count ? ranges[r + 1].start : InvalidBlockNumber;
			Buffer		buf = ReadBufferExtended(m->index, MAIN_FORKNUM, ranges[r].start + i,
												 RBM_ZERO_AND_LOCK, NULL);
			GenericXLogState *state = GenericXLogStart(m->index);
			Page		page = GenericXLogRegisterBuffer(state, buf, GENERIC_XLOG_FULL_IMAGE);

			TsdgInitPendingPage(page);
			TsdgPageGetOpaque(page)->flags = TSDG_PAGE_FREE;
			TsdgPageGetOpaque(page)->next = next;
			GenericXLogFinish(state);
			UnlockReleaseBuffer(buf);
			if ((i & 63) == 0)
				CHECK_FOR_INTERRUPTS();
		}
	}
}

/*
 * The switch: one GenericXLog record over the metapage moves every reader
 * to the new graph and the rows that stayed pending, retires the old region
 * (or keeps it for its k-NN pages), the consumed pages, the row extents a
 * renumbering left and a k-NN region the new k-NN pages replace, gives the
 * freed pages to the free list, and bumps graph_version.
 */
static void
TsdgSwitchGraph(TsdgMerge *m)
{
	Buffer		metabuf = ReadBuffer(m->index, TSDG_METAPAGE_BLKNO);
	Buffer		lastbuf = InvalidBuffer;
	GenericXLogState *state;
	TsdgMetaPage meta;
	const TsdgMetaPageData *nm = &m->new_meta;
	BlockNumber old_region = TsdgRegionBlocks(&m->meta);
	XLogRecPtr	lsn;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	if (BlockNumberIsValid(m->freed_last))
	{
		lastbuf = ReadBuffer(m->index, m->freed_last);
		LockBuffer(lastbuf, BUFFER_LOCK_EXCLUSIVE);
	}
	state = GenericXLogStart(m->index);
	meta = TsdgPageGetMeta(GenericXLogRegisterBuffer(state, metabuf, 0));

	Assert(meta->graph_version + 1 == nm->graph_version);
	meta->graph_version = nm->graph_version;
	meta->node_count = nm->node_count;
	meta->deleted_count = nm->deleted_count;
	meta->last_merge = nm->last_merge;
	meta->row_size = (uint16) m->new_layout.row_size;
	meta->rows_per_page = (uint16) m->new_layout.rows_per_page;
	meta->list_size = (uint16) m->new_layout.list_size;
	meta->lists_per_page = (uint16) m->new_layout.lists_per_page;
	meta->row_extent_count = nm->row_extent_count;
	memcpy(meta->row_extents, nm->row_extents, sizeof(meta->row_extents));
	meta->retired_extent_count = nm->retired_extent_count;
	memcpy(meta->retired_extents, nm->retired_extents, sizeof(meta->retired_extents));
	meta->spare_rows = nm->spare_rows;
	meta->list_start = nm->list_start;
	meta->knn_start = nm->knn_start;
	meta->region_blocks = nm->region_blocks;
	meta->knn_k = m->k;
	memset(&meta->retired_knn_region, 0, sizeof(meta->retired_knn_region));
	if (m->knn_pages_kept)
	{
		meta->knn_unstored = nm->node_count - TsdgStoredKnnNodes(&m->meta);
		if (m->meta.knn_region_start == TSDG_NO_BLOCK)
		{
			/* the old region keeps its k-NN pages; no spare region until the next merge */
			meta->knn_region_start = m->meta.list_start;
			meta->knn_region_blocks = old_region;
			old_region = 0;
		}
	}
	else
	{
		meta->knn_unstored = 0;
		if (m->meta.knn_region_start != TSDG_NO_BLOCK)
		{
			meta->retired_knn_region.start = m->meta.knn_region_start;
			meta->retired_knn_region.blocks = m->meta.knn_region_blocks;
		}
		meta->knn_region_start = TSDG_NO_BLOCK;
		meta->knn_region_blocks = 0;
	}
	meta->entry_count = nm->entry_count;
	memcpy(meta->entry_points, nm->entry_points, sizeof(meta->entry_points));
	meta->nn1_bound = nm->nn1_bound;
	meta->unreached_checked = nm->unreached_checked;
	meta->unreached_count = nm->unreached_count;
	memcpy(meta->unreached, nm->unreached, sizeof(uint32) * nm->unreached_count);

	if (BlockNumberIsValid(m->remaining_head))
	{
		meta->pending_head = m->remaining_head;
		meta->pending_count -= m->consumed_rows;
		meta->retired_head = m->consumed_head;
		meta->retired_tail = m->consumed_tail;
	}
	if (BufferIsValid(lastbuf))
	{
		TsdgPageGetOpaque(GenericXLogRegisterBuffer(state, lastbuf, 0))->next =
			meta->free_head == TSDG_NO_BLOCK ? InvalidBlockNumber : meta->free_head;
		meta->free_head = m->freed_first;
	}
	/* slots only empty meanwhile (inserts use them up): all of them fit */
	for (int i = 0, e = 0; i < m->freed_extent_count; i++, e++)
	{
		while (e < TSDG_MAX_FREE_EXTENTS && meta->free_extents[e].blocks > 0)
			e++;
		if (e == TSDG_MAX_FREE_EXTENTS)
			elog(ERROR, "tsdg index \"%s\" has no free extent slot left for a merge",
				 RelationGetRelationName(m->index));
		meta->free_extents[e] = m->freed_extents[i];
	}

	/* the old region becomes the spare one, once no scan reads it */
	meta->spare_start = old_region > 0 ? m->meta.list_start : TSDG_NO_BLOCK;
	meta->spare_blocks = old_region;
	meta->retired_readable = true;
	meta->merge_count++;
	lsn = GenericXLogFinish(state);
	if (BufferIsValid(lastbuf))
		UnlockReleaseBuffer(lastbuf);
	UnlockReleaseBuffer(metabuf);

	/*
	 * A merge assigns no transaction id, so its commit would not flush the
	 * WAL: flush it here, so that a merge that returned survives a crash.
	 */
	if (RelationNeedsWAL(m->index))
		XLogFlush(lsn);
}

/*
 * DEBUG1: where a merge's time went (reading the pages; GNND, GGM and TSDG;
 * entry points and d_nn1+, or the wait for the worker's; writing and
 * switching), how many old lists changed and how many of the list pages of
 * old nodes hold a changed record.
 */
static void
TsdgReportMerge(const TsdgMerge *m, const instr_time *phase_start, instr_time entry_time)
{
	double		seconds[4];
	char		notes[448];
	int64		knn_changed = 0;
	int64		graph_changed = 0;
	int64		pages_changed = 0;
	int			per_page = m->layout.lists_per_page;

	if (!message_level_is_interesting(DEBUG1))
		return;
	for (int i = 0; i < 3; i++)
	{
		instr_time	t = phase_start[i + 1];

		INSTR_TIME_SUBTRACT(t, phase_start[i]);
		seconds[i] = INSTR_TIME_GET_DOUBLE(t);
	}
	/* the third phase holds the entry points and the writing */
	seconds[3] = seconds[2] - INSTR_TIME_GET_DOUBLE(entry_time);
	seconds[2] = INSTR_TIME_GET_DOUBLE(entry_time);
	for (int64 first = 0; first < m->n_old; first += per_page)
	{
		bool		page_changed = false;

		for (int64 id = first; id < Min(first + per_page, m->n_old); id++)
		{
			knn_changed += (m->changed[id] & TSDG_CHANGED_KNN) != 0;
			graph_changed += (m->changed[id] & TSDG_CHANGED_GRAPH) != 0;
			page_changed |= (m->changed[id] & TSDG_CHANGED_GRAPH) != 0;
		}
		pages_changed += page_changed;
	}
	if (m->knn_pages_kept)
		snprintf(notes, sizeof(notes),
				 "; k-NN pages kept as they were (the lists of %u of %u nodes)",
				 TsdgStoredKnnNodes(&m->meta), m->new_meta.node_count);
	else
		snprintf(notes, sizeof(notes), "%s",
				 m->knn_pages_written ? "; k-NN pages written while the worker diversified" : "");
	if (m->list_pages_early > 0)
		snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
				 "; %u of %u list pages written in %.2f s from the worker's first published lists (%u before its answer), by %d parallel workers and the session, %u of them again after its component linking",
				 m->list_pages_early, TsdgNewListPages(m), m->list_pages_early_seconds,
				 m->list_pages_at_answer, m->list_writers_launched, m->list_pages_relinked);
	if (m->lists_repaired > 0)
		snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
				 "; " INT64_FORMAT " lists given an edge into a new row their searches did not reach, %u list pages written again",
				 m->lists_repaired, m->list_pages_repaired);
	if (m->split < m->n_old)
		snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
				 "; " INT64_FORMAT " nodes past the stored k-NN lists merged again",
				 m->n_old - m->split);
	ereport(DEBUG1,
			(errmsg("tsdg merge of \"%s\": " INT64_FORMAT " old and " INT64_FORMAT " new rows, "
					INT64_FORMAT " deleted nodes dropped; "
					"read %.2f s, graph %.2f s, entry points %.2f s%s, write and switch %.2f s",
					RelationGetRelationName(m->index), m->n_old, m->n_new,
					(int64) m->meta.node_count - m->n_old,
					seconds[0], seconds[1], seconds[2],
					m->worker_summary_failed ? " (the worker's summary failed: computed here)" :
					m->segment.summary_pid != 0 ? " (waiting for the worker's)" : "", seconds[3]),
			 errdetail("Old lists changed: " INT64_FORMAT " k-NN, " INT64_FORMAT " search; "
					   "list pages of old nodes with a changed search list: " INT64_FORMAT " of " INT64_FORMAT "; "
					   "row extents: %d%s%s.",
					   knn_changed, graph_changed, pages_changed,
					   (int64) TsdgPagesFor(m->n_old, per_page), m->new_meta.row_extent_count,
					   m->new_meta.retired_extent_count > 0 ? ", every row written again" : "",
					   notes)));
}

/*
 * Merges the pending rows and drops the deleted nodes of index. The caller
 * holds ShareUpdateExclusiveLock on its table. Returns the pending rows
 * merged, or -1 when wait is false and a scan from before the previous merge
 * still runs.
 */
static int64
TsdgMergeIndex(Relation index, bool wait)
{
	TsdgMerge	m;
	TsdgMetric	metric = TsdgIndexMetric(index);
	TsdgMetaPageData before;
	MemoryContext merge_ctx;
	MemoryContext old_ctx;
	volatile int64 merged;
	instr_time	phase_start[4];
	instr_time	entry_time;

	TsdgReadMeta(index, &before);
	if (before.pending_count == 0 && before.deleted_count == 0)
		return 0;
	if (!TsdgReclaimRetired(index, wait))
		return -1;

	merge_ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg merge", ALLOCSET_DEFAULT_SIZES);
	old_ctx = MemoryContextSwitchTo(merge_ctx);

	MemSet(&m, 0, sizeof(m));
	m.index = index;
	TsdgDetachPending(&m);
	TsdgLayoutFromMeta(&m.layout, &m.meta);
	m.dims = m.meta.dims;
	m.k = m.meta.build_k;

	/* the worker's segment, when there is one, is mapped until the merge ends */
	PG_TRY();
	{
		instr_time	entry_start;
		instr_time	waited_check;

		INSTR_TIME_SET_CURRENT(phase_start[0]);
		TsdgLoadRows(&m, metric);
		TsdgStampMergedGraph(&m);
		INSTR_TIME_SET_CURRENT(phase_start[1]);
		TsdgComputeMerged(&m, metric);
		INSTR_TIME_SET_CURRENT(phase_start[2]);
		INSTR_TIME_SET_ZERO(entry_time);
		/* a worker that merged computes them while the pages are written */
		if (m.segment.summary_pid == 0)
			TsdgMergedEntryPoints(&m, metric);
		INSTR_TIME_SET_CURRENT(entry_start);
		INSTR_TIME_ACCUM_DIFF(entry_time, entry_start, phase_start[2]);
		TsdgWriteRegion(&m);
		if (!m.rows_written)
			TsdgWriteRows(&m);
		TsdgPrepareFreedPages(&m, m.meta.spare_start != TSDG_NO_BLOCK && m.meta.spare_blocks > 0 &&
							  m.new_meta.list_start != m.meta.spare_start);
		if (m.segment.summary_pid != 0)
		{
			instr_time	waited;

			INSTR_TIME_SET_CURRENT(entry_start);
			if (!TsdgWorkerMergeSummary(&m.segment, &m.new_meta))
			{
				m.worker_summary_failed = true;
				TsdgReadLeftRows(&m);
				TsdgMergedEntryPoints(&m, metric);
			}
			INSTR_TIME_SET_CURRENT(waited);
			INSTR_TIME_ACCUM_DIFF(entry_time, waited, entry_start);
		}
		INSTR_TIME_SET_CURRENT(entry_start);
		TsdgFinishUnreachedCheck(&m);
		TsdgWriteRepairedListPages(&m);
		INSTR_TIME_SET_CURRENT(waited_check);
		INSTR_TIME_ACCUM_DIFF(entry_time, waited_check, entry_start);
		TsdgSwitchGraph(&m);
		INSTR_TIME_SET_CURRENT(phase_start[3]);
		TsdgReportMerge(&m, phase_start, entry_time);
		merged = m.n_new;
	}
	PG_FINALLY();
	{
		int64		dropped;
		TsdgError	error;

		/* its threads read the merged graph, which goes with the segment and the context */
		if (m.unreached_job != NULL)
			(void) tsdg_unreached_job_finish(m.unreached_job, NULL, 0, &dropped, &error);
		TsdgMergeSegmentRelease(&m.segment);
	}
	PG_END_TRY();

	MemoryContextSwitchTo(old_ctx);
	MemoryContextDelete(merge_ctx);
	return merged;
}

static bool
TsdgMergeDue(const TsdgMetaPageData *meta)
{
	double		live = (double) (meta->node_count - meta->deleted_count);
	double		threshold = tsdg_merge_threshold + tsdg_merge_scale_factor * live;

	if (tsdg_merge_threshold < 0)
		return false;
	return (double) meta->pending_count > threshold || (double) meta->deleted_count > threshold;
}

/*
 * amvacuumcleanup's merge, when the pending rows or the deleted nodes are
 * past the threshold. VACUUM already holds the table's
 * ShareUpdateExclusiveLock; it does not wait for old scans, it leaves the
 * merge to a later VACUUM.
 */
void
TsdgVacuumMerge(IndexVacuumInfo *info)
{
	TsdgMetaPageData meta;

	if (info->analyze_only)
		return;
	TsdgReadMeta(info->index, &meta);
	if (!TsdgMergeDue(&meta))
		return;
	if (!TsdgMergeFits(&meta))
	{
		/* a VACUUM that cannot merge still does the rest of its work */
		ereport(WARNING,
				(errmsg("tsdg index \"%s\" not merged: the merge needs about %.0f MB of maintenance_work_mem",
						RelationGetRelationName(info->index),
						TsdgMergeBytes(&meta) / (1024.0 * 1024.0) + 1),
				 errhint("Raise maintenance_work_mem (autovacuum_work_mem for autovacuum), or run tsdg_merge() with more.")));
		return;
	}
	if (TsdgMergeIndex(info->index, false) < 0)
		ereport(DEBUG1,
				(errmsg("tsdg index \"%s\" not merged: a scan from before its last merge still runs",
						RelationGetRelationName(info->index))));
}

PG_FUNCTION_INFO_V1(tsdg_merge);
Datum
tsdg_merge(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Oid			heapid;
	Relation	heap;
	Relation	index;
	int64		merged;

	heapid = IndexGetRelation(relid, true);
	if (!OidIsValid(heapid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index", get_rel_name(relid) ? get_rel_name(relid) : "?")));
	/* the table first, as VACUUM locks it; this lock keeps VACUUM and other merges out */
	heap = table_open(heapid, ShareUpdateExclusiveLock);
	index = index_open(relid, RowExclusiveLock);
	if (index->rd_rel->relam != get_index_am_oid("tsdg", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a tsdg index", RelationGetRelationName(index))));
	if (!pg_class_ownercheck(heapid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, RelationGetRelationName(heap));

	merged = TsdgMergeIndex(index, true);

	index_close(index, RowExclusiveLock);
	table_close(heap, ShareUpdateExclusiveLock);
	PG_RETURN_INT64(merged);
}
