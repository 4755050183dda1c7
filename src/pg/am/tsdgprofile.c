/*
 * The search profile of a tsdg index: how many nodes a search scores at
 * each ef, measured on the index's own graph, for the planner.
 *
 * That count decides a search's cost, and it depends on the data more than
 * on ef and the row count: a search whose ef stays within a cluster of rows
 * scores little past that cluster, and one whose ef passes the cluster's
 * size spills into the clusters around it and scores many times more. No
 * formula of ef and the rows alone follows both, so the count is measured:
 * sample rows, spread over the index, are searched for their own vectors
 * (queries come from the rows' distribution) by the scan's own walk over
 * the pages, at ef TSDG_PROFILE_FIRST_EF doubled up to past tsdg.ef_search's
 * largest value. CREATE INDEX measures it, and ANALYZE, VACUUM and
 * tsdg_merge() measure it again, so that it follows the graph as merges and
 * deletions change it.
 * The planner reads it with the metapage, which it reads anyway.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"

/* enough rows for a mean within a few percent, each search a small share of a build */
#define TSDG_PROFILE_SAMPLES	16

/* a copy of the vector of node id, read from its row page */
static float *
TsdgReadNodeVector(Relation index, const TsdgLayout *layout, uint32 id)
{
	Buffer		buf = ReadBuffer(index, TsdgRowBlock(layout, id));
	float	   *vector = palloc(sizeof(float) * Max(layout->dims, 1));
	TsdgNodeHeader *hdr;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	hdr = (TsdgNodeHeader *) TsdgRowRecord(layout, BufferGetPage(buf), id);
	memcpy(vector, TsdgRecordVector(hdr), sizeof(float) * layout->dims);
	UnlockReleaseBuffer(buf);
	return vector;
}

/*
 * The nodes one search at ef scores, from the navigating set as a scan
 * starts: count ids with their distances to the walk's query, which every
 * ef's search of a sample scores alike, so they are scored once per sample
 * and offered to each search as a scan's own scoring would offer them.
 */
static int64
TsdgProfileSearch(TsdgPageWalk *walk, TsdgSearch *search, const uint32 *ids, const float *dists,
				  int count, int ef)
{
	tsdg_search_begin(search, ef);
	tsdg_search_offer_many(search, ids, dists, count);
	TsdgWalkExpand(walk, search);
	return tsdg_search_distance_count(search);
}

void
TsdgMeasureSearchProfile(Relation index)
{
	MemoryContext ctx = AllocSetContextCreate(CurrentMemoryContext, "tsdg search profile",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old_ctx = MemoryContextSwitchTo(ctx);
	TsdgMetaPageData meta;
	TsdgLayout	layout;
	TsdgMetric	metric = TsdgIndexMetric(index);
	TsdgSearch *search;
	TsdgError	error;
	int			samples;
	double		scored[TSDG_PROFILE_STEPS] = {0};
	Buffer		buf;
	GenericXLogState *state;
	Page		page;
	TsdgMetaPage stored;
	uint32	   *navigating_ids;
	float	   *navigating_dists;

	TsdgReadMeta(index, &meta);
	if (meta.node_count == 0)
	{
		MemoryContextSwitchTo(old_ctx);
		MemoryContextDelete(ctx);
		return;
	}
	TsdgLayoutFromMeta(&layout, &meta);
	search = tsdg_search_create(TSDG_LAMBDA_LIMIT_ALL, 0.0f, &error);
	if (search == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not start a tsdg search: %s", error.message)));
	samples = (int) Min((uint32) TSDG_PROFILE_SAMPLES, meta.node_count);
	navigating_ids = palloc(sizeof(uint32) * TsdgNavigatingSetMost(&meta));
	navigating_dists = palloc(sizeof(float) * TsdgNavigatingSetMost(&meta));
	PG_TRY();
	{
		for (int s = 0; s < samples; s++)
		{
			/* the middle of each of samples equal runs of node ids */
			uint32		id = (uint32) (((uint64) meta.node_count * (2 * s + 1)) / (2 * samples));
			float	   *query = TsdgReadNodeVector(index, &layout, id);
			TsdgPageWalk walk;
			int			navigating;

			TsdgWalkInit(&walk, index, &layout, metric, query, meta.node_count);
			navigating = TsdgScoreNavigatingSet(&walk, &meta, navigating_ids, navigating_dists);
			for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
			{
				scored[step] += (double) TsdgProfileSearch(&walk, search, navigating_ids,
														   navigating_dists, navigating,
														   TSDG_PROFILE_FIRST_EF << step);
				CHECK_FOR_INTERRUPTS();
			}
			pfree(query);
		}
	}
	PG_FINALLY();
	{
		tsdg_search_free(search);
	}
	PG_END_TRY();

	buf = ReadBuffer(index, TSDG_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	state = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	stored = TsdgPageGetMeta(page);
	stored->profile_nodes = meta.node_count;
	for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
		stored->profile_scored[step] = (float4) (scored[step] / samples);
	TsdgCoverMeta(page);
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);

	MemoryContextSwitchTo(old_ctx);
	MemoryContextDelete(ctx);
}
