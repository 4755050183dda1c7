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
 * largest value. A scan of a graph with a navigating layer walks the layer
 * first and the graph from what that walk found, so the profile of such a
 * graph walks both and keeps the counts of each: the graph's searches, and
 * the layer's walks, which the planner prices as a search's fixed start in
 * place of the navigating set's scoring. It walks the layer even where the
 * layer is larger than the measuring session's tsdg.navigating_cache_mem:
 * the sessions that scan the index may keep it. CREATE INDEX measures it,
 * and ANALYZE, VACUUM and tsdg_merge() measure it again, so that it follows
 * the graph as merges and deletions change it.
 * The planner reads it with the metapage, which it reads anyway.
 *
 * CREATE INDEX still holds its graph in memory while it writes the pages,
 * so it computes the profile from its arrays instead, on threads of the
 * core beside the page writes (tsdg_profile_job_start), by the same walk:
 * the same samples, navigating set or layer, search and distance kernel, so
 * that the counts are those a walk of the pages would store.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "tsdg.h"

/* enough rows for a mean within a few percent, each search a small share of a build */
#define TSDG_PROFILE_SAMPLES	16

/*
 * The build's profile job, while its threads read the build's arrays. An
 * error of the build stops it before the arrays go (TsdgStopArrayProfile);
 * so does the exit of a backend that a FATAL error ends meanwhile, before
 * its shared memory segments are unmapped under the threads.
 */
static TsdgProfileJob *running_profile = NULL;
static uint32 running_profile_nodes = 0;
static int	running_profile_samples = 0;
static bool profile_exit_hook_set = false;

/* the sample rows: the middle of each of the runs of node ids, as many as samples; returns how many */
static int
TsdgProfileSampleIds(uint32 node_count, uint32 *ids)
{
	int			samples = (int) Min((uint32) TSDG_PROFILE_SAMPLES, node_count);

	for (int s = 0; s < samples; s++)
		ids[s] = (uint32) (((uint64) node_count * (2 * s + 1)) / (2 * samples));
	return samples;
}

/* the profile's means, as the metapage keeps them */
static void
TsdgStoreProfile(TsdgMetaPageData *meta, uint32 node_count, const double *scored,
				 const double *layer_scored, int samples)
{
	meta->profile_nodes = node_count;
	for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
	{
		meta->profile_scored[step] = (float4) (scored[step] / samples);
		meta->profile_layer_scored[step] = (float4) (layer_scored[step] / samples);
	}
}

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
 * The nodes one search at ef scores, from what a scan starts from: count ids
 * with their distances to the walk's query. Those of the navigating set
 * every ef's search of a sample scores alike, so they are scored once per
 * sample and offered to each search as a scan's own scoring would offer
 * them; those of a layer come from its walk at the search's ef.
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
	double		layer_scored[TSDG_PROFILE_STEPS] = {0};
	TsdgLayerSearch *layer = NULL;
	Buffer		buf;
	GenericXLogState *state;
	Page		page;
	TsdgMetaPage stored;
	uint32	   *navigating_ids;
	float	   *navigating_dists;
	uint32		sample_ids[TSDG_PROFILE_SAMPLES];

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
	samples = TsdgProfileSampleIds(meta.node_count, sample_ids);
	if (meta.layer_nodes > 0)
	{
		/* room for the entries of the widest search's walk */
		navigating_ids = palloc(sizeof(uint32) * tsdg_layer_entry_count(TSDG_PROFILE_LARGEST_EF));
		navigating_dists = palloc(sizeof(float) * tsdg_layer_entry_count(TSDG_PROFILE_LARGEST_EF));
	}
	else
	{
		navigating_ids = palloc(sizeof(uint32) * TsdgNavigatingSetMost(&meta));
		navigating_dists = palloc(sizeof(float) * TsdgNavigatingSetMost(&meta));
	}
	PG_TRY();
	{
		for (int s = 0; s < samples; s++)
		{
			float	   *query = TsdgReadNodeVector(index, &layout, sample_ids[s]);
			TsdgPageWalk walk;
			int			navigating = 0;

			TsdgWalkInit(&walk, index, &layout, metric, query, meta.node_count);
			if (meta.layer_nodes > 0 && layer == NULL)
				layer = TsdgLayerSearchOf(&walk, &meta);
			if (layer == NULL)
				navigating = TsdgScoreNavigatingSet(&walk, &meta, navigating_ids, navigating_dists);
			for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
			{
				int			ef = TSDG_PROFILE_FIRST_EF << step;

				if (layer != NULL)
				{
					int64		layer_walk;

					navigating = TsdgWalkLayer(&walk, layer, ef, navigating_ids, navigating_dists,
											   &layer_walk);
					layer_scored[step] += (double) layer_walk;
				}
				scored[step] += (double) TsdgProfileSearch(&walk, search, navigating_ids,
														   navigating_dists, navigating, ef);
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
	TsdgStoreProfile(stored, meta.node_count, scored, layer_scored, samples);
	TsdgCoverMeta(page);
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);

	MemoryContextSwitchTo(old_ctx);
	MemoryContextDelete(ctx);
}

static void
TsdgStopProfileAtExit(int code, Datum arg)
{
	TsdgStopArrayProfile();
}

bool
TsdgStartArrayProfile(const TsdgMetaPageData *meta, TsdgMetric metric, const float *rows,
					  const uint32 *neighbors, const uint8 *lambdas, const uint32 *layer_ids,
					  const uint8 *layer_lambdas)
{
	uint32		sample_ids[TSDG_PROFILE_SAMPLES];
	uint32	   *navigating_ids;
	int			navigating;
	int			samples;
	int64		layer_nodes = tsdg_layer_node_count(meta->node_count);
	TsdgError	error;

	if (meta->node_count == 0 || running_profile != NULL)
		return false;
	/* a graph whose layer is not in yet is measured once it is */
	if (layer_nodes > 0 && layer_ids == NULL)
		return false;
	if (!profile_exit_hook_set)
	{
		before_shmem_exit(TsdgStopProfileAtExit, (Datum) 0);
		profile_exit_hook_set = true;
	}
	samples = TsdgProfileSampleIds(meta->node_count, sample_ids);
	navigating_ids = palloc(sizeof(uint32) * TsdgNavigatingSetMost(meta));
	navigating = tsdg_navigating_set(meta->entry_points, meta->entry_count, meta->node_count,
									 navigating_ids);
	running_profile = tsdg_profile_job_start(rows, meta->node_count, meta->dims, metric, neighbors,
											 lambdas, meta->degree, TSDG_LAMBDA_LIMIT_ALL,
											 navigating_ids, navigating, layer_ids, layer_lambdas,
											 layer_nodes, sample_ids, samples,
											 TSDG_PROFILE_FIRST_EF, TSDG_PROFILE_STEPS, &error);
	pfree(navigating_ids);
	if (running_profile == NULL)
	{
		elog(DEBUG1, "tsdg search profile: no thread, measured on the pages: %s", error.message);
		return false;
	}
	running_profile_nodes = meta->node_count;
	running_profile_samples = samples;
	return true;
}

bool
TsdgFinishArrayProfile(TsdgMetaPageData *meta, double *seconds)
{
	TsdgProfileJob *job = running_profile;
	int64		scored[TSDG_PROFILE_STEPS];
	int64		layer_scored[TSDG_PROFILE_STEPS];
	double		means[TSDG_PROFILE_STEPS];
	double		layer_means[TSDG_PROFILE_STEPS];
	TsdgError	error;
	TsdgStatus	status;

	Assert(job != NULL);
	running_profile = NULL;
	status = tsdg_profile_job_finish(job, scored, layer_scored, seconds, &error);
	if (status != TSDG_OK)
	{
		elog(DEBUG1, "tsdg search profile: measured on the pages: %s", error.message);
		return false;
	}
	for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
	{
		means[step] = (double) scored[step];
		layer_means[step] = (double) layer_scored[step];
	}
	TsdgStoreProfile(meta, running_profile_nodes, means, layer_means, running_profile_samples);
	return true;
}

void
TsdgStopArrayProfile(void)
{
	TsdgProfileJob *job = running_profile;

	running_profile = NULL;
	tsdg_profile_job_cancel(job);
}
