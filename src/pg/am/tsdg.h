/*
 * The tsdg index access method: on-disk format and the functions shared by
 * its files (tsdg.c handler/options/GUCs, tsdgbuild.c, tsdginsert.c,
 * tsdgscan.c, tsdgvacuum.c, tsdgutils.c page layout, tsdglayer.c,
 * tsdginfo.c).
 *
 * Pages of a tsdg index:
 *   block 0             the metapage (TsdgMetaPageData in the page contents)
 *   row pages           a row record per node: {heap TID, flags, vector[dims]},
 *                       in up to TSDG_MAX_ROW_EXTENTS runs of contiguous
 *                       blocks (extents). Node i is record
 *                       (i - first) % rows_per_page of block
 *                       start + (i - first) / rows_per_page of the last extent
 *                       whose first node is <= i: no indirection beyond a
 *                       few comparisons, and the same ids index the arrays a
 *                       GPU holds. Rows never move: a merge appends the new
 *                       ones to the last extent's room or to a new extent.
 *   list pages          the graph: node i's search list {neighbors[R],
 *                       lambdas[R] (uint8)} is record
 *                       i % lists_per_page of block list_start +
 *                       i / lists_per_page, followed by the layer pages
 *                       and the k-NN pages. A neighbor id takes 3 bytes (little-endian, 0xFFFFFF
 *                       for none) in a graph of fewer than 2^24 - 1 nodes,
 *                       else 4 (TsdgListIdBytes): list pages are all WAL,
 *                       rewritten by every merge, and at R = 32 the 3-byte
 *                       ids put 63 lists on a page instead of 51.
 *   layer pages         the navigating layer's lists, list records of
 *                       layer-local ids (see below).
 *   pending pages       rows inserted since the last merge, a list linked
 *                       through the special space, searched exactly.
 * Row, list and k-NN records are packed after the page header (no line
 * pointers, no special space, as contrib/bloom does), pd_lower ends the last.
 *
 * The rows are kept apart from the lists because a merge changes most lists
 * but no old row: it rewrites the lists (128 of a 128-dimension node's 904
 * bytes with its k-NN ids, at R = 32 and build_k = 64) and appends rows,
 * instead of copying every vector.
 * A row must fit one page as a row record and as a pending record (whose
 * page has 8 bytes of special space), so the largest dimension an index
 * supports is (BLCKSZ - 24 - 8 - 8) / 4: 2038 with 8 kB pages
 * (TsdgMaxDimensions()).
 *
 * Merges (tsdgmerge.c, docs/design.md). GGM needs every node's
 * k-NN list. The index keeps the ids of each node's build_k nearest
 * neighbors in k-NN pages (record i at knn_start + i / knn_per_page, packed
 * like list records) and not their distances: ids cost 4 build_k bytes a
 * node (256 at the default k = 64) while the distances are recomputed by a
 * merge (build_k distances per node, a small part of a merge's time).
 * Rebuilding them from the stored TSDG lists and their reverse edges instead
 * would cost no space, but the diversified lists keep only the far-apart
 * members of a k-NN list, so GGM would start from a poorer graph at every
 * merge.
 *
 * Graphs of at least TSDG_LAYER_MIN_NODES nodes have a navigating layer
 * (tsdg_capi.h): a graph of its own over every TSDG_LAYER_STRIDE-th node,
 * whose lists, of layer-local ids, are list records like the graph's
 * (list_size, lists_per_page and id bytes of the graph): layer list j is
 * record j % lists_per_page of block layer_start + j / lists_per_page. A
 * search walks it first and starts its walk on the graph from what it found,
 * instead of scoring the navigating set whole.
 *
 * The lists of a graph occupy one contiguous region: list pages, layer pages
 * (layer_start, right after the list pages), then k-NN pages. The layer
 * pages are written with the list pages by the build and by every merge (a
 * merge moves rows and changes the node count, so the layer is built again
 * from all rows), switch with them and retire with them. A merge writes the
 * new lists into another region (the spare one when it is large enough, else
 * new blocks at the end, with half again as many blocks as it needs, so that
 * growing graphs soon fit the spare region again; a spare region too small is
 * given to the free list), WAL-logged page by page, appends the new rows past the old ones (which no scan of the old
 * graph reads), then switches the metapage in one GenericXLog record; a crash
 * before that record leaves the old graph and its pending rows as they were.
 * A merge that drops deleted nodes renumbers the live ones: it writes all
 * rows into one new extent and retires the old extents. The old region, the
 * retired extents and the pending pages the merge consumed are then
 * "retired": scans that read the metapage before the switch may still read
 * them. Scans keep the metapage pinned until they end, so the next merge,
 * once it holds a cleanup lock on the metapage (no other pin left), knows no
 * such scan remains: the retired region becomes the spare region, the
 * retired pending pages go to the free list that new pending pages are taken
 * from, and the largest retired extent becomes the spare rows, where a new
 * extent goes when it fits (so that a churning table's merges take turns
 * between two extents), the others are given to the free list. The
 * spare-region and free-list fields use block 0 (the metapage) for "none".
 * While a graph grows, the file holds its rows, its region (with room to
 * grow), the spare one and the regions freed to the free list; at a steady
 * size the regions take turns and the file stops growing.
 *
 * The k-NN pages may lag behind the graph. A merge on the GPU worker, which
 * keeps the merged graph with its k-NN lists, writes only the list and layer
 * pages (85% of the k-NN lists change when 5% new rows come, so writing them
 * costs a merge as many bytes again as the lists, all of it WAL): the k-NN
 * pages keep the lists of the first node_count - knn_unstored nodes as an
 * earlier merge or the build wrote them, in the region that then held the
 * lists, which stays as knn_region until a merge writes them again. A merge that has to
 * read them (the worker restarted or dropped the graph) merges the nodes past
 * them as part of its batch: GGM of the larger batch into the stored k-NN
 * graph, and TSDG again for the old lists that point past them. So the lag
 * costs only such a merge, and tsdg.merge_knn_lag bounds it: a merge writes
 * the k-NN pages again (into a region with the lists, the region they leave
 * retired) when more than that fraction of the nodes would be past them, on
 * the CPU, and when it drops deleted nodes.
 *
 * Known gap: scans on a hot standby pin the standby's metapage, which the
 * primary's merges cannot see, so a standby scan that spans two merges may
 * read reused pages (nbtree's recycling by transaction horizon and recovery
 * conflicts would close it).
 */
#ifndef TSDG_H
#define TSDG_H

#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/generic_xlog.h"
#include "nodes/execnodes.h"
#include "storage/bufmgr.h"
#include "utils/relcache.h"

#include "tsdg_capi.h"

#define TSDG_MAGIC_NUMBER		0x54534447	/* "TSDG" */

/*
 * Format 1: metapage, node pages, pending pages. Format 2 added the k-NN
 * pages and the merge fields. Format 3 keeps the rows apart from the lists
 * (see above). Format 4 lets the k-NN pages lag behind the graph (see
 * above). Format 5 stores 3-byte neighbor ids in graphs of fewer than
 * 2^24 - 1 nodes. Format 6 adds the navigating layer's pages to the
 * region (see above).
 */
#define TSDG_FORMAT_VERSION		6

/* "no block" in the merge fields of the metapage, as nbtree's P_NONE */
#define TSDG_NO_BLOCK			0

#define TSDG_METAPAGE_BLKNO		0
#define TSDG_MAX_ENTRY_POINTS	256
#define TSDG_MAX_ROW_EXTENTS	16
#define TSDG_MAX_FREE_EXTENTS	8
/*
 * rows of a merge kept exact (TsdgMetaPageData.unreached), as many as the
 * metapage has room for
 */
#define TSDG_MAX_UNREACHED		1560
/* the search profile's efs: TSDG_PROFILE_FIRST_EF doubled up to past tsdg.ef_search's largest */
#define TSDG_PROFILE_STEPS		7
#define TSDG_PROFILE_FIRST_EF	16
#define TSDG_PROFILE_LARGEST_EF	(TSDG_PROFILE_FIRST_EF << (TSDG_PROFILE_STEPS - 1))

/* opclass support function: returns the TsdgMetric of the opclass */
#define TSDG_METRIC_PROC		1

/*
 * reloption ranges; defaults come from tsdg_build_params_default(), except
 * build_k: the core's GNND default (32) was chosen on L2 data, and an index
 * serves every metric: inner product and cosine need longer k-NN lists than
 * L2 for the same recall (test/t/001_recall.pl checks each metric).
 */
#define TSDG_DEFAULT_BUILD_K	64
#define TSDG_MIN_DEGREE			4
#define TSDG_MAX_DEGREE			128
#define TSDG_MIN_BUILD_K		4
#define TSDG_MAX_BUILD_K		256
#define TSDG_MIN_SAMPLES		0
#define TSDG_MAX_SAMPLES		128
#define TSDG_MIN_ITERATIONS		1
#define TSDG_MAX_ITERATIONS		100
#define TSDG_MIN_ALPHA			1.0
#define TSDG_MAX_ALPHA			4.0
#define TSDG_MIN_LAMBDA0		0
#define TSDG_MAX_LAMBDA0		TSDG_LAMBDA0_MAX

/* GUC defaults and ranges */
#define TSDG_DEFAULT_EF_SEARCH	100
#define TSDG_MIN_EF_SEARCH		1
#define TSDG_MAX_EF_SEARCH		1000
#define TSDG_DEFAULT_MAX_SCAN_TUPLES 20000
#define TSDG_MIN_SCAN_MEM_MULTIPLIER	1.0
#define TSDG_MAX_SCAN_MEM_MULTIPLIER	1000.0

/* pg_stat_progress_create_index phases (1 is PostgreSQL's "initializing") */
#define TSDG_PROGRESS_LOAD		2
#define TSDG_PROGRESS_KNN		3
#define TSDG_PROGRESS_DIVERSIFY	4
#define TSDG_PROGRESS_WRITE		5
#define TSDG_PROGRESS_LAYER		6

/*
 * What a scan does once its first round is used up (tsdg.iterative_scan,
 * pgvector's hnsw.iterative_scan): end there, or go on, returning the rows a
 * wider round finds as they come or leaving out those nearer than a row
 * already returned.
 */
typedef enum TsdgIterativeScan
{
	TSDG_ITERATIVE_SCAN_OFF,
	TSDG_ITERATIVE_SCAN_RELAXED,
	TSDG_ITERATIVE_SCAN_STRICT
} TsdgIterativeScan;

typedef enum TsdgDevice
{
	TSDG_DEVICE_AUTO,
	TSDG_DEVICE_CPU,
	TSDG_DEVICE_GPU
} TsdgDevice;

/* GUCs */
extern int	tsdg_ef_search;
extern int	tsdg_lambda_search;
extern int	tsdg_max_scan_tuples;
extern int	tsdg_iterative_scan;
extern double tsdg_scan_mem_multiplier;
extern int	tsdg_device;

typedef struct TsdgOptions
{
	int32		vl_len_;		/* varlena header (do not touch directly!) */
	int			degree;
	int			build_k;
	int			samples;
	int			iterations;
	double		alpha;
	int			lambda0;
} TsdgOptions;

/* a run of contiguous row pages; its first row starts its first block */
typedef struct TsdgRowExtent
{
	uint32		first;			/* the node id of its first row */
	BlockNumber start;
	uint32		blocks;			/* its pages, room for more rows included */
} TsdgRowExtent;

typedef struct TsdgMetaPageData
{
	uint32		magic;
	uint32		version;
	int32		dims;			/* 0 until the first row is seen */
	int32		metric;			/* TsdgMetric */
	int32		degree;			/* R: neighbor slots per node */
	int32		build_k;
	int32		samples;
	int32		iterations;
	float4		alpha;
	int32		lambda0;
	uint32		node_count;
	uint32		deleted_count;
	int64		pending_count;
	uint64		graph_version;	/* bumped by every change to the graph */
	uint16		row_size;		/* bytes per row record */
	uint16		rows_per_page;
	uint16		list_size;		/* bytes per list record */
	uint16		lists_per_page;
	int32		row_extent_count;
	TsdgRowExtent row_extents[TSDG_MAX_ROW_EXTENTS];
	BlockNumber list_start;
	BlockNumber knn_start;
	BlockNumber pending_head;	/* InvalidBlockNumber when no pending page */
	BlockNumber pending_tail;
	int32		entry_count;
	uint32		entry_points[TSDG_MAX_ENTRY_POINTS];
	/* statistics: d_nn1+ of the slack stop rule (largest distance to a nearest neighbor) */
	float4		nn1_bound;

	/* stored k-NN lists and merges (tsdgmerge.c) */
	int32		knn_k;			/* ids per k-NN record (build_k); 0 when none are stored */
	uint32		region_blocks;	/* blocks of the lists' region, room to grow included;
								 * 0: just its list and k-NN pages (a fresh build) */
	BlockNumber spare_start;	/* a free list region, or TSDG_NO_BLOCK */
	uint32		spare_blocks;
	BlockNumber retired_head;	/* pending pages the last merge consumed */
	BlockNumber retired_tail;
	int32		retired_extent_count;	/* row extents a merge that renumbered left */
	TsdgRowExtent retired_extents[TSDG_MAX_ROW_EXTENTS];
	TsdgRowExtent spare_rows;	/* free blocks for a new extent; 0 blocks when none */
	bool		retired_readable;	/* scans may still read the spare region and
									 * the retired pages and extents */
	BlockNumber free_head;		/* free pages for pending rows, linked by next */
	int64		last_merge;		/* TimestampTz of the last merge; 0 before one */
	uint64		merge_count;

	/* k-NN pages behind the graph (format 4) */
	uint32		knn_unstored;	/* the last nodes, whose k-NN lists are not in the k-NN pages */
	BlockNumber knn_region_start;	/* the region of the k-NN pages when the lists moved
									 * on without them, or TSDG_NO_BLOCK */
	uint32		knn_region_blocks;
	TsdgRowExtent retired_knn_region;	/* a k-NN region the last merge left (first
										 * unused); 0 blocks when none */
	/*
	 * Runs of free blocks, not initialized (first unused; 0 blocks: an empty
	 * slot): new pending pages are taken from their start once the free list
	 * is empty. A merge frees whole regions here without writing a page.
	 */
	TsdgRowExtent free_extents[TSDG_MAX_FREE_EXTENTS];

	/*
	 * Which copy of the pending rows the GPU worker may search for this index
	 * (tsdgoffload.c): it holds them by their place in the pending list, and
	 * VACUUM moves them within their pages. Odd while a VACUUM removes pending
	 * rows (no copy may be made or used), one more once it is done; back to
	 * the even value it had when the VACUUM removed none. 0 in an index made
	 * before the field: the bytes past the metadata were zero.
	 */
	uint64		pending_epoch;

	/*
	 * The rows that the search for their own vector does not reach at the
	 * merging session's tsdg.ef_search (tsdgmergecompute.c). Every search
	 * also scores them exactly (tsdgscan.c, the worker), so that a merged
	 * row is found however far out it lies. The last merge checked its last
	 * unreached_checked nodes (its batch), the old rows that lost an edge
	 * into them, those of the old navigating set and those listed here
	 * before; 0 in a build and in an index made before the fields: none.
	 */
	uint32		unreached_checked;
	int32		unreached_count;
	uint32		unreached[TSDG_MAX_UNREACHED];	/* ascending */

	/*
	 * The nodes a search scores at ef TSDG_PROFILE_FIRST_EF, twice that, and
	 * so on: each the mean over sample rows searched for their own vectors
	 * (tsdgprofile.c) when the graph had profile_nodes nodes. The planner
	 * prices a search by them (tsdgcost.c). 0 profile_nodes in an index made
	 * before the fields: none measured.
	 */
	uint32		profile_nodes;
	float4		profile_scored[TSDG_PROFILE_STEPS];

	/*
	 * The navigating layer (format 6): tsdg_layer_node_count(node_count)
	 * lists of degree ids from layer_start, in the lists' region; 0: none.
	 */
	uint32		layer_nodes;
	BlockNumber layer_start;

	/*
	 * For a graph with a layer, the distances the layer's walk computes
	 * before each search of the profile (its navigating set included), the
	 * mean over the same samples; profile_scored then counts the searches
	 * from the walk's entries, as the scans make them. 0 where the profile
	 * was measured from the navigating set, and in an index made before the
	 * field.
	 */
	float4		profile_layer_scored[TSDG_PROFILE_STEPS];
} TsdgMetaPageData;

StaticAssertDecl(sizeof(TsdgMetaPageData) <= BLCKSZ - MAXALIGN(SizeOfPageHeaderData) -
				 MAXALIGN(sizeof(uint32) * 2),
				 "the tsdg metadata must fit the metapage");

typedef TsdgMetaPageData *TsdgMetaPage;

#define TsdgPageGetMeta(page)	((TsdgMetaPage) PageGetContents(page))

/* special space of the metapage and of pending pages (row and list pages have none) */
typedef struct TsdgPageOpaqueData
{
	BlockNumber next;			/* next pending page, or InvalidBlockNumber */
	uint16		flags;
	uint16		page_id;		/* TSDG_PAGE_ID, to tell our pages in tools */
} TsdgPageOpaqueData;

typedef TsdgPageOpaqueData *TsdgPageOpaque;

#define TSDG_PAGE_META			(1 << 0)
#define TSDG_PAGE_PENDING		(1 << 1)
#define TSDG_PAGE_FREE			(1 << 2)
#define TSDG_PAGE_ID			0xFF91

#define TsdgPageGetOpaque(page)	((TsdgPageOpaque) PageGetSpecialPointer(page))

/* a row record: this header, then the vector */
typedef struct TsdgNodeHeader
{
	ItemPointerData heaptid;
	uint16		flags;
} TsdgNodeHeader;

#define TSDG_NODE_DELETED		(1 << 0)

/* a pending row: header then the vector */
typedef struct TsdgPendingHeader
{
	ItemPointerData heaptid;
	uint16		unused;
} TsdgPendingHeader;

#define TsdgRecordVector(rec)	((float *) ((char *) (rec) + sizeof(TsdgNodeHeader)))

/* Shape and place of the records of one index, from its metapage. */
typedef struct TsdgLayout
{
	int			dims;
	int			degree;
	Size		row_size;
	int			rows_per_page;
	int			list_id_bytes;	/* TsdgListIdBytes of the graph's node count */
	Size		list_size;
	int			lists_per_page;
	BlockNumber list_start;
	int			extent_count;
	TsdgRowExtent extents[TSDG_MAX_ROW_EXTENTS];
	Size		pending_size;
	int			pending_per_page;
} TsdgLayout;

/* tsdgutils.c */
extern int	TsdgMaxDimensions(void);
extern void TsdgCheckDimensions(Relation index, int dims);
extern int	TsdgListIdBytes(int64 nodes);
extern void TsdgInitLayout(TsdgLayout *layout, int dims, int degree, int64 nodes);
extern void TsdgLayoutFromMeta(TsdgLayout *layout, const TsdgMetaPageData *meta);
extern BlockNumber TsdgRowBlock(const TsdgLayout *layout, uint32 id);
extern char *TsdgRowRecord(const TsdgLayout *layout, Page page, uint32 id);
extern uint32 TsdgRowPageEnd(const TsdgLayout *layout, uint32 id, uint32 limit);
extern BlockNumber TsdgListBlock(const TsdgLayout *layout, uint32 id);
extern char *TsdgListRecord(const TsdgLayout *layout, Page page, uint32 id);
extern void TsdgListRead(const TsdgLayout *layout, const char *rec, uint32 *neighbors, uint8 *lambdas);
/* the first count lists from layout->list_start, read page by page */
extern void TsdgReadListRecords(Relation index, const TsdgLayout *layout, uint32 count,
								uint32 *neighbors, uint8 *lambdas);
extern BlockNumber TsdgPagesFor(int64 records, int per_page);
extern int	TsdgKnnPerPage(int k);
extern void TsdgFillRowPage(Page page, const TsdgLayout *layout, uint32 first, uint32 end,
							const ItemPointerData *tids, const float *rows);

/* The arrays a graph's pages are written from (CREATE INDEX, merges). */
typedef struct TsdgGraphArrays
{
	const TsdgLayout *layout;
	int64		n;				/* nodes [0, n) */
	const ItemPointerData *tids;	/* n */
	const float *rows;			/* n * dims */
	const uint32 *neighbors;	/* n * degree */
	const uint8 *lambdas;		/* n * degree */
	const uint32 *knn_ids;		/* n * knn_k; NULL: no k-NN pages */
	int			knn_k;
	/* the layer's lists, tsdg_layer_node_count(n) * degree; NULL until computed */
	const uint32 *layer_ids;
	const uint8 *layer_lambdas;
} TsdgGraphArrays;

/* the rows [first, end) of arrays written into an extent whose first row is extent_first */
typedef struct TsdgRowRun
{
	const TsdgGraphArrays *arrays;
	uint32		extent_first;
	uint32		first;
	uint32		end;
} TsdgRowRun;

/* fills page page_no of a run of pages in its locked buffer (TsdgWritePages) */
typedef void (*TsdgPageFiller) (void *arg, Page page, BlockNumber page_no);

/*
 * TsdgPageFillers: arg a TsdgRowRun; arg a TsdgGraphArrays (list pages,
 * layer pages, k-NN pages, then empty)
 */
extern void TsdgFillRowRunPage(void *arg, Page page, BlockNumber page_no);
extern void TsdgFillRegionPage(void *arg, Page page, BlockNumber page_no);
/* the pages of a graph's region: its list pages, those and its layer pages, all of them */
extern BlockNumber TsdgListPages(const TsdgGraphArrays *arrays);
extern BlockNumber TsdgListAndLayerPages(const TsdgGraphArrays *arrays);
extern BlockNumber TsdgRegionPages(const TsdgGraphArrays *arrays);
extern int	TsdgPageRecordCount(Page page, Size record_size);

/* rows read from pending pages, in list order; the arrays grow as needed */
typedef struct TsdgPendingRows
{
	int64		count;
	int64		capacity;
	float	   *rows;			/* count * dims */
	ItemPointerData *tids;		/* count */
} TsdgPendingRows;

/*
 * Turns a search's node ids (nq lists of wide_k, ascending) into nq lists of
 * k heap TIDs and distances, skipping deleted nodes (flags may be NULL) and
 * padding with invalid TIDs / +inf. Allocates nothing, so the GPU server
 * process may call it.
 */
extern void TsdgNodeResultsToTids(const uint32 *ids, const float *dists, int nq, int wide_k,
								  int k, uint32 node_count, const ItemPointerData *node_tids,
								  const uint8 *node_flags, ItemPointerData *out_tids,
								  float *out_dists);
/* a node and its distance, ordered by (distance, id) by TsdgCompareCandidates (qsort) */
typedef struct TsdgCandidate
{
	float		distance;
	uint32		id;
} TsdgCandidate;

extern int	TsdgCompareCandidates(const void *a, const void *b);

/* qsort's order of node ids (uint32) */
extern int	TsdgCompareNodeIds(const void *a, const void *b);

/*
 * Merges exact hits into one query's k results, both ascending by distance:
 * keys (key_size bytes each: node ids or heap TIDs) and dists, +inf after the
 * last result, and hits of hit_keys / hit_dists, +inf after the last. A hit
 * whose key is among the results is left out: the search found that row.
 * missing_key pads the keys after the last; scratch: k keys and distances.
 * Allocates nothing (the GPU server calls it).
 */
extern void TsdgMergeExactHits(int k, void *keys, float *dists, Size key_size,
							   const void *missing_key, const void *hit_keys,
							   const float *hit_dists, int hits, void *scratch_keys,
							   float *scratch_dists);
typedef void (*TsdgPendingVisitor) (void *arg, const ItemPointerData *tid, const float *vector);
extern void TsdgVisitPendingRows(Relation index, const TsdgLayout *layout, BlockNumber head,
								 BlockNumber stop, TsdgPendingVisitor visit, void *arg);
/*
 * Copies up to max pending rows, from the one after the first skip rows of
 * block blkno on along the list, into rows and tids; *end_block and
 * *end_offset then say where the last one copied lies (its block, and its
 * place there plus one). Returns how many were copied.
 */
extern int64 TsdgCopyPendingRowsFrom(Relation index, const TsdgLayout *layout, BlockNumber blkno,
									 int skip, int64 max, float *rows, ItemPointerData *tids,
									 BlockNumber *end_block, int *end_offset);
extern void TsdgInitPendingRows(TsdgPendingRows *pending, int dims, int64 capacity);
extern void TsdgReadPendingRows(Relation index, const TsdgLayout *layout, BlockNumber head,
								BlockNumber stop, TsdgPendingRows *pending);
extern void TsdgInitRecordPage(Page page);
extern BlockNumber TsdgAppendBlocks(Relation index, BlockNumber count);
extern void TsdgWritePages(Relation index, BlockNumber start, BlockNumber first, BlockNumber end,
						   TsdgPageFiller fill, void *arg);
extern void TsdgInitPendingPage(Page page);
extern void TsdgInitMetaPage(Page page, const TsdgMetaPageData *meta);
extern void TsdgCoverMeta(Page page);
extern void TsdgReadMeta(Relation index, TsdgMetaPageData *meta);
extern Buffer TsdgNewBuffer(Relation index, ForkNumber fork);
extern TsdgMetric TsdgIndexMetric(Relation index);
/* the metric as tsdg_index_info() names it: l2, inner_product, cosine, l1 */
extern const char *TsdgMetricName(int32 metric);
extern int	TsdgIndexTypmodDims(Relation index);
extern bool TsdgCopyVector(Datum value, TsdgMetric metric, int dims, float *out, int *vec_dims);
extern void TsdgWrongDimensions(Relation index, int dims, int index_dims) pg_attribute_noreturn();
extern float *TsdgPrepareVector(Datum value, TsdgMetric metric, int *dims);
extern TsdgOptions *TsdgGetOptions(Relation index);
extern void TsdgParamsFromOptions(Relation index, TsdgBuildParams *params);

/* tsdgbuild.c */
extern IndexBuildResult *tsdgbuild(Relation heap, Relation index, IndexInfo *indexInfo);
extern void tsdgbuildempty(Relation index);

/* tsdgprofile.c */
extern void TsdgMeasureSearchProfile(Relation index);

/*
 * The profile of a build's graph, computed from its arrays (the rows,
 * lists and entry points of meta, and the layer's lists where the graph has
 * a layer, which must stay as they are until it is finished or stopped) on
 * threads of the core while the session writes its pages: false when it
 * could not start, or when the graph's layer is not in yet (NULL). TsdgFinishArrayProfile waits for it
 * and puts it into meta, with the seconds its threads took; false when it
 * failed, and the pages are then measured. TsdgStopArrayProfile stops it
 * and waits, on an error of the build.
 */
extern bool TsdgStartArrayProfile(const TsdgMetaPageData *meta, TsdgMetric metric,
								  const float *rows, const uint32 *neighbors, const uint8 *lambdas,
								  const uint32 *layer_ids, const uint8 *layer_lambdas);
extern bool TsdgFinishArrayProfile(TsdgMetaPageData *meta, double *seconds);
extern void TsdgStopArrayProfile(void);

/* tsdgcost.c */
struct PlannerInfo;
struct IndexPath;
extern void tsdgcostestimate(struct PlannerInfo *root, struct IndexPath *path, double loop_count,
							 Cost *indexStartupCost, Cost *indexTotalCost,
							 Selectivity *indexSelectivity, double *indexCorrelation,
							 double *indexPages);

/* tsdgspill.c: a build's large arrays in temporary files (tsdg_capi.h) */
typedef struct TsdgSpill TsdgSpill;
extern TsdgSpill *TsdgSpillStart(void);
extern void *TsdgSpillAlloc(TsdgSpill *spill, Size bytes);
extern void TsdgSpillFree(TsdgSpill *spill, void *memory);
extern void TsdgSpillEnd(TsdgSpill *spill);

/* tsdgduplicates.c: groups of identical rows, linked in the graph */
typedef struct TsdgDuplicateGroups
{
	int64		rows;			/* rows in groups */
	int64		groups;
	uint32	   *ids;			/* the rows of each group in id order, group after group */
	int64	   *ends;			/* where each group ends in ids */
} TsdgDuplicateGroups;
extern void TsdgStartFindingDuplicates(const float *rows, int64 n, int dims);
extern TsdgDuplicateGroups *TsdgFinishFindingDuplicates(double *seconds);
extern void TsdgStopFindingDuplicates(void);
extern void TsdgLinkDuplicates(const TsdgDuplicateGroups *groups, uint32 *neighbors,
							   uint8 *lambdas, int degree);

/* tsdginsert.c */
extern bool tsdginsert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
					   Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
					   IndexInfo *indexInfo);
/* where TsdgNewPendingBuffer took its page from, for TsdgTookPendingPage */
typedef struct TsdgPendingPageSource
{
	BlockNumber free_head_after;	/* the free list without the page */
	int			free_extent;	/* the free extent it was the first block of, or -1 */
} TsdgPendingPageSource;

extern Buffer TsdgNewPendingBuffer(Relation index, const TsdgMetaPageData *meta,
								   TsdgPendingPageSource *source);
extern void TsdgTookPendingPage(TsdgMetaPageData *meta, const TsdgPendingPageSource *source);

/* tsdgindeximage.c: the whole graph of an index as arrays (CPU batch search, shipping) */
typedef struct TsdgIndexImage
{
	int64		n;
	int			dims;
	int			degree;
	float	   *rows;			/* n * dims */
	uint32	   *neighbors;		/* n * degree */
	uint8	   *lambdas;		/* n * degree */
	ItemPointerData *tids;		/* n */
	uint8	   *flags;			/* n: TsdgNodeHeader flags */
	uint32	   *layer_ids;		/* meta->layer_nodes * degree */
	uint8	   *layer_lambdas;
} TsdgIndexImage;

/*
 * Reads every row and list record, and the layer's lists (meta->layer_nodes
 * of them), into the image's arrays, which the caller sized.
 */
extern void TsdgReadIndexImage(Relation index, const TsdgMetaPageData *meta,
							   TsdgIndexImage *image);

/*
 * tsdglayer.c: the navigating layer's lists of meta's graph, meta->layer_nodes
 * * meta->degree ids (layer-local) and lambdas
 */
extern void TsdgReadLayer(Relation index, const TsdgMetaPageData *meta, uint32 *ids,
						  uint8 *lambdas);

/* tsdgscan.c */
extern IndexScanDesc tsdgbeginscan(Relation index, int nkeys, int norderbys);
extern void tsdgrescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys);
extern bool tsdggettuple(IndexScanDesc scan, ScanDirection dir);
extern void tsdgendscan(IndexScanDesc scan);

/* tsdgscanwalk.c: a scan's graph walk over the pages */
#define TSDG_WALK_BATCH		64	/* rows pinned at once */

typedef struct TsdgPageWalk
{
	Relation	index;
	const TsdgLayout *layout;
	TsdgMetric	metric;
	const float *query;
	uint32		node_count;
	uint32	   *list_ids;		/* degree entries each */
	uint8	   *list_lambdas;
	uint32	   *fresh;
	BlockNumber blocks[TSDG_WALK_BATCH];
	Buffer		pins[TSDG_WALK_BATCH];
	const float *vectors[TSDG_WALK_BATCH];
	float		dists[TSDG_WALK_BATCH];
} TsdgPageWalk;

extern void TsdgWalkInit(TsdgPageWalk *walk, Relation index, const TsdgLayout *layout,
						 TsdgMetric metric, const float *query, uint32 node_count);
extern void TsdgCheckScanNode(Relation index, uint32 id, uint32 node_count);
/* scores the rows of ids into dists */
extern void TsdgWalkScore(TsdgPageWalk *walk, const uint32 *ids, int count, float *dists);
/* scores the rows of ids and offers them to the search */
extern void TsdgWalkOffer(TsdgPageWalk *walk, TsdgSearch *search, const uint32 *ids, int count);
/* expands candidates until the search has nothing better left to visit */
extern void TsdgWalkExpand(TsdgPageWalk *walk, TsdgSearch *search);

/* tsdgnavcache.c: the navigating layer or set's rows, kept by the backend between scans */
#define TSDG_DEFAULT_NAVIGATING_CACHE_MEM	65536	/* kB */
extern int	tsdg_navigating_cache_mem;
/* whether a navigating set of count rows of dims is kept (tsdg.navigating_cache_mem) */
extern bool TsdgNavigatingSetFits(int64 count, int dims);
/* whether a layer of layer_nodes of dims and degree is kept (tsdg.navigating_cache_mem) */
extern bool TsdgLayerFits(int64 layer_nodes, int dims, int degree);
/*
 * offers a search of ef its entries: those its walk of meta's layer finds
 * (kept by the backend; *layer_scored: the distances that walk computed),
 * or the navigating set scored whole (*layer_scored 0)
 */
extern void TsdgOfferNavigatingSet(TsdgPageWalk *walk, TsdgSearch *search,
								   const TsdgMetaPageData *meta, int ef, int64 *layer_scored);
/*
 * meta's layer made searchable: the backend's copy, or, where the layer is
 * larger than tsdg.navigating_cache_mem, one freed with the caller's memory;
 * NULL when the graph has no layer
 */
extern TsdgLayerSearch *TsdgLayerSearchOf(TsdgPageWalk *walk, const TsdgMetaPageData *meta);
/*
 * the entries layer's walk for the walk's query finds for a search of ef,
 * checked as nodes of the walk's graph, into ids and dists (room for
 * tsdg_layer_entry_count(ef)); returns how many, and the distances the walk
 * computed in *scored
 */
extern int	TsdgWalkLayer(TsdgPageWalk *walk, TsdgLayerSearch *layer, int ef, uint32 *ids,
						  float *dists, int64 *scored);
/* the most nodes the navigating set of meta's graph holds */
extern int64 TsdgNavigatingSetMost(const TsdgMetaPageData *meta);
/*
 * the navigating set's ids and their rows' distances to the walk's query,
 * in the order TsdgOfferNavigatingSet offers them, into ids and dists (room
 * for TsdgNavigatingSetMost); returns how many
 */
extern int	TsdgScoreNavigatingSet(TsdgPageWalk *walk, const TsdgMetaPageData *meta,
								   uint32 *ids, float *dists);

/* tsdgvacuum.c */
extern IndexBulkDeleteResult *tsdgbulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
											 IndexBulkDeleteCallback callback, void *callback_state);
extern IndexBulkDeleteResult *tsdgvacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats);

/* tsdglistwriters.c: a GPU merge's list pages, written as the worker publishes their lists */
typedef struct TsdgListWriters TsdgListWriters;
struct TsdgBuildSummary;
struct dsm_segment;
/* arrays: the merged graph's, in the merge segment; the region is placed at list_start */
extern TsdgListWriters *TsdgStartListWriters(Relation index, struct dsm_segment *merge,
											 const TsdgGraphArrays *arrays,
											 const struct TsdgBuildSummary *summary,
											 BlockNumber list_start);
/* the session writes the pages whose lists are ready, without waiting */
extern void TsdgListWritersOffer(TsdgListWriters *w);
extern int	TsdgListWritersLaunched(const TsdgListWriters *w);
/*
 * complete (every list published): writes the rest with the workers and
 * returns the list pages, all of them; else stops the workers. before: the
 * pages written until this call; seconds: since the start.
 */
extern BlockNumber TsdgFinishListWriters(TsdgListWriters *w, bool complete, BlockNumber *before,
										 double *seconds);

/* tsdgmerge.c */
extern int	tsdg_merge_threshold;
extern double tsdg_merge_scale_factor;
extern double tsdg_merge_knn_lag;
extern void TsdgMergeInit(void);
extern void TsdgVacuumMerge(IndexVacuumInfo *info);

#endif							/* TSDG_H */
