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
 * dimensions, reading it out of line included, plus a fixed part per row or
 * node), and the index is then priced at the planner's own estimate of the
 * sequential plan times the ratio of the two: the index is chosen where it
 * does less work, whatever the planner's page and row costs are.
 *
 * A graph search with ef candidates scores a few times ef nodes, plus a
 * number that grows with the logarithm of the rows (the walk from the entry
 * points) and the navigating set, which grows with the rows; all of that
 * happens before the first row comes back. On a small table those walks
 * keep meeting nodes already scored, so the nodes scored fall short of that
 * sum and reach the row count only slowly. A scored node costs more than a
 * row of the sequential scan: its page is found and pinned, its row is read
 * from wherever the graph leads rather than in order, and it is placed in
 * the candidate pool, which is kept sorted and so costs in proportion to ef.
 * A filter above the scan makes it return more rows than the LIMIT,
 * widening the search: the total cost, of returning every row, makes the
 * planner charge that share. Without a LIMIT it is the cost of an ordered
 * walk of the whole graph, more than a sort of the table, so such a query
 * does not use the index.
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/amapi.h"
#include "access/heaptoast.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/spccache.h"

#include "tsdg.h"
#include "vector.h"

/*
 * The work of a row or node besides its distance, in components: a scanned
 * row's (a tuple deformed, a distance called, its place in the top-N sort)
 * is a few hundred; a scored node's (its page found and pinned, a row read
 * out of order, the visited set) nearly twice that, and its place in the
 * candidate pool a little more per candidate of ef. A vector stored out of
 * line costs a sequential scan many times its components' work again, to
 * find and gather its TOAST chunks; the index reads its own copy in place.
 */
#define TSDG_SEQ_ROW_WORK		420.0
#define TSDG_VISIT_WORK			710.0
#define TSDG_VISIT_POOL_WORK	0.7
#define TSDG_OUT_OF_LINE_WORK	13.0

/* nodes scored per candidate of ef, and per doubling of the rows to reach them */
#define TSDG_VISITS_PER_EF		4.0
#define TSDG_VISITS_PER_LEVEL	20.0
/*
 * scored nodes' work per row of an ordered walk of the whole graph: its
 * sorted pool grows as wide as the rows returned, each round that widens it
 * sorts the candidates that left it, and the rows the graph does not give
 * are scored once more at the end
 */
#define TSDG_WALK_VISITS_PER_ROW	16.0

/*
 * nodes a search with ef candidates scores in a graph of nodes nodes, the
 * navigating set (tsdg_navigating_set) included: of the nodes its walks
 * would score in a graph without end, as many distinct ones as that many
 * draws from nodes give
 */
static double
TsdgVisitedNodes(double ef, double nodes)
{
	double		entries = TSDG_MAX_ENTRY_POINTS + (double) tsdg_strided_entry_count((int64) nodes);
	double		visits = TSDG_VISITS_PER_EF * ef + TSDG_VISITS_PER_LEVEL * log2(Max(nodes, 2.0)) + entries;

	nodes = Max(nodes, 1.0);
	return nodes * -expm1(-visits / nodes);
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
	double		dims;
	double		nodes;
	double		pending;
	double		selectivity;
	double		seq_row_dims_work;
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
	dims = Max(meta->dims, 1);
	nodes = meta->node_count - meta->deleted_count;
	pending = meta->pending_count;
	pfree(meta);

	selectivity = clauselist_selectivity(root, rel->baserestrictinfo, rel->relid, JOIN_INNER, NULL);
	selectivity = Max(selectivity, 1.0 / Max(rel->tuples, 1.0));

	/*
	 * the sequential plan: every row's fixed work, the vectors and distances
	 * of those that pass
	 */
	seq_row_dims_work = VECTOR_SIZE((int) dims) > TOAST_TUPLE_THRESHOLD ?
		dims * (1.0 + TSDG_OUT_OF_LINE_WORK) : dims;
	seq_work = rel->tuples * TSDG_SEQ_ROW_WORK + rel->tuples * selectivity * seq_row_dims_work;
	scale = TsdgSeqPlanCost(root, rel, selectivity) / Max(seq_work, 1.0);

	/* the first round, and the pending rows every scan scores exactly */
	startup_work = TsdgVisitedNodes(tsdg_ef_search, nodes) *
		(TSDG_VISIT_WORK + dims + TSDG_VISIT_POOL_WORK * tsdg_ef_search) +
		pending * (TSDG_SEQ_ROW_WORK + dims);
	/* every row, by widened rounds */
	total_work = startup_work + TSDG_WALK_VISITS_PER_ROW * nodes * (TSDG_VISIT_WORK + dims);

	*indexStartupCost = startup_work * scale;
	*indexTotalCost = total_work * scale;
	*indexSelectivity = 1.0;
	*indexCorrelation = 0;
	*indexPages = info->pages;
}
