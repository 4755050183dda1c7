/*
 * The planner's cost of a tsdg index scan.
 *
 * The planner prices the alternative, a sequential scan and a top-N sort, by
 * pages and rows: it does not see that each row's distance costs work in
 * proportion to the dimensions, nor that a vector stored out of line (TOAST)
 * is read from pages that are not the heap's. A price for the index in the
 * same units, from its pages and the rows it visits, loses to that estimate
 * wherever vectors are wide, although the index then wins by the widest
 * margin. So both scans are first estimated here in one unit of work, a
 * vector component's share of a distance (the work that grows with the
 * dimensions, reading it out of line or from beyond the CPU's caches
 * included, plus a fixed part per row or node), and the index is then
 * priced at the planner's own estimate of the sequential plan times the
 * ratio of the two: the index is chosen where it does less work, whatever
 * the planner's page and row costs are.
 *
 * A graph search with ef candidates scores the navigating set, the walk down
 * from it and a few times ef nodes more; all of that happens before the first
 * row comes back. A graph with a navigating layer that the session keeps
 * (tsdgnavcache.c) is searched from the layer's walk instead: the walk scores
 * rows of the layer in memory, and the graph's search starts from the
 * entries it found, which come with their distances; the profile measures
 * both walks. How many times ef depends on the data: a search whose
 * candidates stay within a cluster of rows meets mostly nodes it has scored
 * already, and one whose ef passes the cluster's size spills into the
 * clusters around it and scores several times more. The index measures that
 * count on its own graph (tsdgprofile.c); an index without those measurements
 * is priced by a count that grows with ef and the logarithm of the rows. On a
 * small table the walks keep meeting nodes already scored, so the nodes
 * scored reach the row count only slowly. A scored node costs more than a row
 * of the sequential scan: its page is found and pinned, its row is read from
 * wherever the graph leads rather than in order (from memory, once the rows
 * a search scores outgrow the caches), and it is placed in the candidate
 * pool, which is kept sorted and so costs in proportion to its width. A
 * filter above the scan makes it return more rows than the LIMIT: the scan
 * widens its search round by round until enough rows pass, which
 * costs more than the rows it returns, so the cost at the LIMIT is priced
 * from the rows the filter makes it return, up to the rows a scan returns
 * under tsdg.iterative_scan = off, tsdg.ef_search, past which it does no more
 * work. A scan whose graph search outgrows work_mem x
 * tsdg.scan_mem_multiplier, or that returned tsdg.max_scan_tuples rows,
 * scores the rows it has not returned in one pass instead of widening
 * further. Without a LIMIT it is the cost of an ordered walk of the whole
 * graph, more than a sort of the table, so such a query does not use the
 * index; that holds under tsdg.iterative_scan = off too, where the scan would
 * return tsdg.ef_search rows of the table's.
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/amapi.h"
#include "access/heaptoast.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/spccache.h"

#include "tsdg.h"
#include "vector.h"

/*
 * The work of a row or node besides its distance, in components. A scanned
 * row is read and its quals tested; one that passes them also has its
 * distance called and its place found in the top-N sort. A vector stored
 * out of line costs a sequential scan many times its components' work
 * again, to find and gather its TOAST chunks; the index reads its own copy
 * in place.
 */
#define TSDG_SEQ_ROW_WORK		245.0
#define TSDG_SEQ_PASSED_WORK	370.0
#define TSDG_OUT_OF_LINE_WORK	10.0

/*
 * A vector stored in line is read from the heap's pages in order. While the
 * table fits in the CPU's caches, a scan after the first finds its rows
 * there; the share of a larger table that does not fit comes from memory,
 * where a component costs several times its work in a distance again. A
 * backend can count on a few MB of a last-level cache that the server's
 * other processes share. The index's rows are priced by its own visits,
 * which read them wherever the graph leads.
 */
#define TSDG_CACHED_HEAP_BYTES	(6.0 * 1024 * 1024)
#define TSDG_UNCACHED_DIM_WORK	4.0

/*
 * A node the search scores costs more than a row of the sequential scan:
 * its page is found and pinned and its row read from wherever the graph
 * leads rather than in order. It is then offered to the candidate pool,
 * kept sorted, where it moves a share of the pool's entries. A node the
 * search expands has each slot of its list checked against the visited
 * set. A row the scan returns is fetched from the heap and its quals tested;
 * one that passes them has its distance computed again for the plan's
 * output, its vector read from the heap, out of line for a wide one.
 */
#define TSDG_VISIT_WORK			970.0
/*
 * A search revisits the rows it scored when it expands them and compares
 * candidates; where the vectors it scores outgrow a core's share of the
 * caches, those visits read them from memory, and the share that does not
 * fit costs its components about once more.
 */
#define TSDG_CACHED_SEARCH_BYTES	(2.0 * 1024 * 1024)
#define TSDG_UNCACHED_VISIT_DIM_WORK	1.1
/*
 * A node of the navigating set costs less where the session keeps a copy of
 * the set's rows (tsdgnavcache.c): its row is read in order from one array,
 * with no page to find and pin, and the visited set and the candidates make
 * room for the whole set at once; what is left besides its distance is its
 * place among the candidates.
 */
#define TSDG_KEPT_ENTRY_WORK	50.0
#define TSDG_VISIT_POOL_WORK	0.05
#define TSDG_LIST_SLOT_WORK		21.0
#define TSDG_RETURNED_ROW_WORK	1960.0
/* a comparison of two candidates when a wider round sorts them */
#define TSDG_SORT_COMPARE_WORK	22.0

/*
 * The bytes of a graph search, against work_mem x tsdg.scan_mem_multiplier:
 * a candidate in the pool, and its copy in the round's results; a scored
 * node in the visited set, a hash set kept at most half full, whose table
 * never has fewer than 1,024 slots; a candidate that left the pool, kept for
 * the wider rounds in an array that grows by doubling; a bit per node of
 * those the scan returned; and the first block of the scan's memory context,
 * counted whole from its first allocation. The fixed parts matter near the
 * smallest work_mem.
 */
#define TSDG_POOL_BYTES			20.0
#define TSDG_VISITED_BYTES		12.0
#define TSDG_VISITED_MIN_BYTES	(1024.0 * sizeof(uint32))
#define TSDG_SPILLED_BYTES		18.0

/*
 * nodes scored per candidate of ef (the fresh neighbors an expanded node's
 * list gives), and per doubling of the rows (the walk down from the
 * entry points)
 */
#define TSDG_VISITS_PER_EF		5.5
#define TSDG_VISITS_PER_LEVEL	15.0

/* the share of bytes read in a pass that a cache of cached bytes does not hold */
static double
TsdgUncachedShare(double bytes, double cached)
{
	return bytes > cached ? 1.0 - cached / bytes : 0.0;
}

/* what the estimate knows of the index and the query */
typedef struct TsdgScanShape
{
	double		dims;
	double		nodes;			/* live nodes of the graph */
	double		entries;		/* the navigating set */
	bool		entries_kept;	/* within tsdg.navigating_cache_mem */
	bool		layer_walked;	/* searches start from the layer's walk, which the profile measured */
	double		profile_layer_scored[TSDG_PROFILE_STEPS];
	double		degree;
	double		pending;
	double		selectivity;	/* the share of rows that pass the quals */
	double		heap_dims_work; /* a distance of a vector read from the heap */
	double		profile_nodes;	/* the search profile's (tsdgprofile.c); 0: none */
	double		profile_scored[TSDG_PROFILE_STEPS];
} TsdgScanShape;

/*
 * The visits that score as many distinct nodes as scored among nodes, each
 * visit a draw from the nodes: the inverse of nodes * (1 - exp(-visits /
 * nodes)), short of every node by half of one.
 */
static double
TsdgVisitsScoring(double scored, double nodes)
{
	return -nodes * log1p(-Min(scored / nodes, 1.0 - 0.5 / nodes));
}

/* the profile's step below ef's (or the last but one past the largest) and ef's place past it */
static int
TsdgProfileStep(double ef, double *past)
{
	int			step = 1;
	double		low_ef;

	while (step < TSDG_PROFILE_STEPS - 1 && ef > (double) (TSDG_PROFILE_FIRST_EF << step))
		step++;
	low_ef = (double) (TSDG_PROFILE_FIRST_EF << (step - 1));
	*past = (ef - low_ef) / low_ef;
	return step - 1;
}

/*
 * the entries a search with ef candidates starts from, already scored (the
 * layer's walk is as wide at the profile's largest ef as at any past it)
 */
static double
TsdgStartEntries(const TsdgScanShape *shape, double ef)
{
	if (shape->layer_walked)
		return (double) tsdg_layer_entry_count((int) Min(ef, (double) TSDG_PROFILE_LARGEST_EF));
	return shape->entries;
}

/*
 * The visits of a search with ef candidates, from its profile: each
 * measured count of nodes scored as the visits that give it on the
 * profile's graph, on the line through the two measured efs around ef, or
 * the last two past the largest; at least the entries it starts from.
 */
static double
TsdgProfileVisits(const TsdgScanShape *shape, double ef)
{
	double		past;
	int			step = TsdgProfileStep(ef, &past);
	double		low = TsdgVisitsScoring(shape->profile_scored[step], shape->profile_nodes);
	double		high = TsdgVisitsScoring(shape->profile_scored[step + 1], shape->profile_nodes);

	return Max(low + (high - low) * past, TsdgStartEntries(shape, ef));
}

/*
 * The distances the layer's walk before a search with ef candidates
 * computes, from the profile, on the line through the two measured efs
 * around ef; the walk's width stops growing past the widest the profile
 * measured, and so does its count.
 */
static double
TsdgLayerWalkScored(const TsdgScanShape *shape, double ef)
{
	double		past;
	int			step = TsdgProfileStep(ef, &past);
	double		low = shape->profile_layer_scored[step];
	double		high = shape->profile_layer_scored[step + 1];

	return Max(low + (high - low) * Min(past, 1.0), 0.0);
}

/*
 * nodes a search with ef candidates scores: of the nodes its walks would
 * score in a graph without end, as many distinct ones as that many draws
 * from the graph's nodes give
 */
static double
TsdgVisitedNodes(const TsdgScanShape *shape, double ef)
{
	double		nodes = Max(shape->nodes, 1.0);
	double		visits;

	if (shape->profile_nodes > 0)
		visits = TsdgProfileVisits(shape, ef);
	else
		visits = TSDG_VISITS_PER_EF * ef + TSDG_VISITS_PER_LEVEL * log2(Max(nodes, 2.0)) +
			shape->entries;
	return nodes * -expm1(-visits / nodes);
}

/* the bytes a search with ef candidates holds once its rounds are done */
static double
TsdgSearchBytes(const TsdgScanShape *shape, double ef)
{
	double		scored = TsdgVisitedNodes(shape, ef);

	return ALLOCSET_DEFAULT_INITSIZE + shape->nodes / 8.0 + ef * TSDG_POOL_BYTES +
		Max(scored * TSDG_VISITED_BYTES, TSDG_VISITED_MIN_BYTES) +
		Max(scored - ef, 0.0) * TSDG_SPILLED_BYTES;
}

/*
 * The work of a graph search with ef candidates: its scored nodes, their
 * vectors read from memory in the share that does not fit the caches, each
 * placed in a pool as wide as ef or as the nodes scored (those of the
 * navigating set cheaper where the session keeps its rows, as are the
 * entries of the layer's walk, which also brings their distances), and its
 * expanded nodes, about as many as the pool holds. Where it starts from the
 * layer, the walk of the layer comes first: rows the session keeps, each
 * placed in the walk's own pool.
 */
static double
TsdgSearchWork(const TsdgScanShape *shape, double ef)
{
	double		scored = TsdgVisitedNodes(shape, ef);
	double		expanded = Min(ef, shape->nodes);
	double		kept = shape->entries_kept || shape->layer_walked ?
		Min(TsdgStartEntries(shape, ef), scored) : 0.0;
	double		uncached = TsdgUncachedShare(scored * shape->dims * sizeof(float),
											 TSDG_CACHED_SEARCH_BYTES);
	double		work;

	work = scored * (TSDG_VISIT_WORK + shape->dims * (1.0 + TSDG_UNCACHED_VISIT_DIM_WORK * uncached) +
					 TSDG_VISIT_POOL_WORK * Min(ef, scored)) -
		kept * (TSDG_VISIT_WORK - TSDG_KEPT_ENTRY_WORK) +
		expanded * shape->degree * TSDG_LIST_SLOT_WORK;
	if (shape->layer_walked)
	{
		double		width = TsdgStartEntries(shape, ef);

		work += TsdgLayerWalkScored(shape, ef) *
			(TSDG_KEPT_ENTRY_WORK + shape->dims + TSDG_VISIT_POOL_WORK * width) -
			kept * shape->dims;
	}
	return work;
}

/*
 * The work of an index scan asked for the given number of rows. Its first
 * round searches at tsdg.ef_search, and it scores the pending rows exactly.
 * Under tsdg.iterative_scan = off it ends there, with at most tsdg.ef_search
 * rows. Otherwise a scan asked for more rows than a round gave widens the
 * search, doubling ef: its rounds together score the nodes of one search at
 * the last ef, and each wider round first sorts every candidate that has
 * left the pool so far, to refill the pool with the best of them. Once a
 * round used up has returned tsdg.max_scan_tuples graph rows, or left the
 * search holding more than work_mem x tsdg.scan_mem_multiplier, the scan
 * scores every row left in one ordered pass over the index's rows and
 * sorts them.
 */
static double
TsdgScanWork(const TsdgScanShape *shape, double rows, int iterative)
{
	double		max_bytes = (double) work_mem * 1024.0 * tsdg_scan_mem_multiplier;
	double		ef = tsdg_ef_search;
	double		spilled = 0.0;
	double		walked;
	double		work;

	if (iterative == TSDG_ITERATIVE_SCAN_OFF)
		rows = Min(rows, ef);
	walked = Min(rows, shape->nodes);
	while (ef < walked && ef < shape->nodes)
	{
		double		scored = TsdgVisitedNodes(shape, ef);

		if (ef >= tsdg_max_scan_tuples || TsdgSearchBytes(shape, ef) > max_bytes)
		{
			walked = ef;
			break;
		}
		spilled += Max(scored - ef, 0.0) * log2(Max(scored, 2.0));
		ef *= 2.0;
	}
	work = TsdgSearchWork(shape, ef) + spilled * TSDG_SORT_COMPARE_WORK +
		shape->pending * (TSDG_SEQ_ROW_WORK + TSDG_SEQ_PASSED_WORK + shape->dims) +
		rows * (TSDG_RETURNED_ROW_WORK + shape->selectivity * shape->heap_dims_work);
	if (rows > walked)
	{
		double		rest = Max(shape->nodes - walked, 1.0);

		work += rest * (TSDG_SEQ_ROW_WORK + TSDG_SEQ_PASSED_WORK + shape->dims +
						log2(Max(rest, 2.0)) * TSDG_SORT_COMPARE_WORK);
	}
	return work;
}

/*
 * The planner's estimate of the sequential plan the index competes with: the
 * heap's pages and rows, the quals on them, and a bounded sort of the rows
 * that pass by their distance (cost_seqscan and cost_sort's top-N case).
 */
static double
TsdgSeqPlanCost(PlannerInfo *root, RelOptInfo *rel, double selectivity)
{
	double		seq_page_cost;
	QualCost	quals;
	double		passed = Max(rel->tuples * selectivity, 1.0);
	double		bound = root->limit_tuples > 0 ? Min(root->limit_tuples, passed) : passed;
	double		cost;

	get_tablespace_page_costs(rel->reltablespace, NULL, &seq_page_cost);
	cost_qual_eval(&quals, rel->baserestrictinfo, root);
	cost = rel->pages * seq_page_cost + quals.startup +
		rel->tuples * (cpu_tuple_cost + quals.per_tuple);
	/* the distance of each row that passes, and its comparisons in the sort */
	cost += passed * cpu_operator_cost * (1.0 + 2.0 * log2(Max(2.0 * bound, 2.0)));
	return cost;
}

/*
 * What cost_index adds to an index path for its heap reads: a random page
 * read for each heap page that all the table's rows, which the index
 * returns, lie on (the index is not correlated with the heap), shared over
 * the loops. The work above prices a returned row's heap read already
 * (TSDG_RETURNED_ROW_WORK), so this is taken back out of the index's own
 * total; otherwise the LIMIT's share of it, a few page reads whatever the
 * table's size, outweighs the whole search on a table of a few pages.
 */
static double
TsdgHeapReadCost(PlannerInfo *root, RelOptInfo *rel, IndexOptInfo *info, double loop_count)
{
	double		loops = Max(loop_count, 1.0);
	double		random_page_cost;

	get_tablespace_page_costs(rel->reltablespace, &random_page_cost, NULL);
	return index_pages_fetched(rel->tuples * loops, rel->pages, (double) info->pages, root) *
		random_page_cost / loops;
}

void
tsdgcostestimate(PlannerInfo *root, IndexPath *path, double loop_count,
				 Cost *indexStartupCost, Cost *indexTotalCost,
				 Selectivity *indexSelectivity, double *indexCorrelation,
				 double *indexPages)
{
	IndexOptInfo *info = path->indexinfo;
	RelOptInfo *rel = info->rel;
	Relation	index;
	TsdgMetaPageData *meta;
	TsdgScanShape shape;
	double		selectivity;
	double		passed;
	double		seq_work;
	double		scale;
	double		startup_work;
	double		total_work;

	/* the index only answers ORDER BY distance: never a plain WHERE */
	if (path->indexorderbys == NIL)
	{
		*indexStartupCost = DBL_MAX;
		*indexTotalCost = DBL_MAX;
		*indexSelectivity = 0;
		*indexCorrelation = 0;
		*indexPages = 0;
		return;
	}

	index = index_open(info->indexoid, NoLock);
	meta = palloc(sizeof(TsdgMetaPageData));
	TsdgReadMeta(index, meta);
	index_close(index, NoLock);
	shape.dims = Max(meta->dims, 1);
	shape.nodes = meta->node_count - meta->deleted_count;
	shape.entries = meta->entry_count + (double) tsdg_strided_entry_count((int64) meta->node_count);
	shape.entries_kept = TsdgNavigatingSetFits((int64) shape.entries, (int) shape.dims);
	shape.degree = meta->degree;
	shape.pending = meta->pending_count;
	shape.profile_nodes = meta->profile_nodes;
	for (int step = 0; step < TSDG_PROFILE_STEPS; step++)
	{
		shape.profile_scored[step] = meta->profile_scored[step];
		shape.profile_layer_scored[step] = meta->profile_layer_scored[step];
	}

	/*
	 * A scan walks the layer where the session keeps it, else it scores the
	 * navigating set; a profile that walked no layer prices searches from
	 * the navigating set too.
	 */
	shape.layer_walked = meta->layer_nodes > 0 && meta->profile_nodes > 0 &&
		meta->profile_layer_scored[0] > 0 &&
		TsdgLayerFits(meta->layer_nodes, (int) shape.dims, meta->degree);
	pfree(meta);

	selectivity = clauselist_selectivity(root, rel->baserestrictinfo, rel->relid, JOIN_INNER, NULL);
	selectivity = Max(selectivity, 1.0 / Max(rel->tuples, 1.0));
	passed = Max(rel->tuples * selectivity, 1.0);
	shape.selectivity = selectivity;
	if (VECTOR_SIZE((int) shape.dims) > TOAST_TUPLE_THRESHOLD)
		shape.heap_dims_work = shape.dims * (1.0 + TSDG_OUT_OF_LINE_WORK);
	else
		shape.heap_dims_work = shape.dims *
			(1.0 + TSDG_UNCACHED_DIM_WORK *
			 TsdgUncachedShare((double) rel->pages * BLCKSZ, TSDG_CACHED_HEAP_BYTES));

	/*
	 * the sequential plan: every row read and tested, the vectors, distances
	 * and sort places of those that pass
	 */
	seq_work = rel->tuples * TSDG_SEQ_ROW_WORK +
		passed * (TSDG_SEQ_PASSED_WORK + shape.heap_dims_work);
	scale = TsdgSeqPlanCost(root, rel, selectivity) / Max(seq_work, 1.0);

	/* the first round, and every row by widened rounds and the exact finish */
	startup_work = TsdgScanWork(&shape, 0.0, tsdg_iterative_scan);
	total_work = TsdgScanWork(&shape, Max(shape.nodes, 1.0), TSDG_ITERATIVE_SCAN_RELAXED);

	/*
	 * The planner prices a LIMIT as the share of the total cost that the
	 * rows it needs are of the rows the scan returns, a line from the start.
	 * A filtered scan's work grows faster than its rows (each wider round
	 * searches a wider pool), so where the query is a LIMIT over this table
	 * alone the total is set on the line through the work of the rows that
	 * LIMIT needs from the scan, the LIMIT divided by the share of rows
	 * that pass the filter.
	 */
	if (root->limit_tuples > 0 && bms_membership(root->all_baserels) == BMS_SINGLETON)
	{
		double		needed = Min(root->limit_tuples / selectivity, Max(shape.nodes, 1.0));

		total_work = startup_work +
			(TsdgScanWork(&shape, needed, tsdg_iterative_scan) - startup_work) * Max(rel->rows, 1.0) /
			Min(root->limit_tuples, Max(rel->rows, 1.0));
	}

	*indexStartupCost = startup_work * scale;
	*indexTotalCost = Max(total_work * scale - TsdgHeapReadCost(root, rel, info, loop_count),
						  *indexStartupCost);
	*indexSelectivity = 1.0;
	*indexCorrelation = 0;
	*indexPages = info->pages;
}
