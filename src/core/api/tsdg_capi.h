/*
 * The C interface of the core, the only one the PostgreSQL glue (src/pg) calls.
 * Plain C, no PostgreSQL types. Every function that can fail returns a
 * TsdgStatus and fills a TsdgError; no C++ exception crosses this boundary and
 * no function here calls back into PostgreSQL except through the callbacks
 * documented below, which must not ereport/longjmp.
 */
#ifndef TSDG_CAPI_H
#define TSDG_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TsdgStatus
{
	TSDG_OK = 0,
	TSDG_ERR_OUT_OF_MEMORY = 1,
	TSDG_ERR_CANCELLED = 2,
	TSDG_ERR_INVALID_ARGUMENT = 3,
	TSDG_ERR_DEVICE = 4,
	TSDG_ERR_INTERNAL = 5
} TsdgStatus;

typedef enum TsdgMetric
{
	TSDG_METRIC_L2 = 0,
	TSDG_METRIC_INNER_PRODUCT = 1,
	TSDG_METRIC_COSINE = 2,
	TSDG_METRIC_L1 = 3
} TsdgMetric;

#define TSDG_INVALID_ID UINT32_MAX
#define TSDG_ERROR_MESSAGE_LEN 256

typedef struct TsdgError
{
	char		message[TSDG_ERROR_MESSAGE_LEN];
} TsdgError;

/* ---- distance kernels (SIMD variant chosen once, at first use) ---- */

float		tsdg_l2_squared_distance(const float *a, const float *b, int dim);
float		tsdg_inner_product(const float *a, const float *b, int dim);
float		tsdg_l1_distance(const float *a, const float *b, int dim);
/*
 * 1 - cos(a, b); NaN when either vector is zero. Sums in float, the division
 * in double (the result of pgvector's cosine_distance, digit for digit).
 */
double		tsdg_cosine_distance(const float *a, const float *b, int dim);
/* squared L2 norm */
float		tsdg_norm_squared(const float *a, int dim);
/* the comparison distance of a metric: squared L2, -ip, 1-ip on normalized rows, or L1 */
float		tsdg_metric_distance(TsdgMetric metric, const float *a, const float *b, int dim);
/* name of the kernel variant in use, e.g. "avx512", "avx2", "generic" */
const char *tsdg_distance_kernel_name(void);

/* ---- backends ---- */

/* NULL backend means the CPU backend. */
typedef struct TsdgBackend TsdgBackend;
/* a graph made searchable by a backend (below) */
typedef struct TsdgResidentIndex TsdgResidentIndex;

/*
 * Load the GPU backend from a shared object (dlopen) and create it on a device.
 * Returns NULL with error filled when the object or a usable GPU is missing.
 */
TsdgBackend *tsdg_backend_load(const char *shared_object_path, int device, TsdgError *error);
void		tsdg_backend_free(TsdgBackend *backend);
const char *tsdg_backend_name(const TsdgBackend *backend);
/*
 * Whether the backend computes the metric's distances in every step; the
 * calls below that take a backend and a metric fail with
 * TSDG_ERR_INVALID_ARGUMENT where it does not (the GPU has no L1), and the
 * caller does that work on the CPU (NULL), which computes every metric.
 */
bool		tsdg_backend_computes(const TsdgBackend *backend, TsdgMetric metric);

/*
 * Page-locks host memory that the backend reads again and again (the batch
 * area, a resident graph's k-NN lists that the next merge uploads), so that
 * the GPU copies from it without staging; nothing on the CPU.
 */
TsdgStatus	tsdg_backend_pin_host_memory(TsdgBackend *backend, void *address, size_t bytes,
										 TsdgError *error);
/* Undoes tsdg_backend_pin_host_memory(address, ...) before the memory goes. */
TsdgStatus	tsdg_backend_unpin_host_memory(TsdgBackend *backend, void *address, TsdgError *error);

/*
 * Maps the pages of [address, address + bytes) writable on a thread of its
 * own, so that the caller's first writes there do not stop at every page
 * (a fresh shared memory segment of gigabytes). NULL where no thread could
 * be started: the pages are then mapped as they are written. A range
 * unmapped meanwhile ends the thread early; nothing is written.
 */
typedef struct TsdgPageMapping TsdgPageMapping;
TsdgPageMapping *tsdg_map_pages_ahead(void *address, size_t bytes);
/* Waits for the mapping's thread and frees it (NULL: nothing). */
void		tsdg_map_pages_wait(TsdgPageMapping *mapping);

/*
 * Called by the thread that started a long operation about every 50 ms while
 * the work runs on other threads. Returns true to request cancellation.
 * phase is a TsdgBuildPhase; done/total count work units of that phase.
 */
typedef enum TsdgBuildPhase
{
	TSDG_PHASE_KNN_GRAPH = 1,
	TSDG_PHASE_DIVERSIFY = 2,
	TSDG_PHASE_MERGE = 3,
	TSDG_PHASE_SEARCH = 4,
	TSDG_PHASE_LINK = 5			/* a merge writes its search lists out, links components */
} TsdgBuildPhase;

typedef bool (*TsdgPollFn) (void *arg, TsdgBuildPhase phase, int64_t done, int64_t total);

/*
 * An edge's occlusion factor is stored in a byte and is at most lambda0, so
 * lambda0 stops one short of the byte's largest value: a search limit of
 * TSDG_LAMBDA_LIMIT_ALL follows every edge.
 */
#define TSDG_LAMBDA0_MAX		254
#define TSDG_LAMBDA_LIMIT_ALL	255

typedef struct TsdgBuildParams
{
	int			degree;			/* R */
	int			build_k;		/* k of the k-NN graph */
	int			samples;		/* GNND p; 0: half of build_k (a quarter for a CPU build of fewer than 500,000 rows) */
	int			iterations;		/* GNND max iterations */
	float		alpha;			/* stage-1 pruning */
	int			lambda0;		/* stage-2 threshold */
	uint64_t	seed;
	int			threads;		/* CPU threads; <= 0: hardware concurrency */
} TsdgBuildParams;

void		tsdg_build_params_default(TsdgBuildParams *params);

/*
 * The bytes a build on the CPU holds for each row at its peak, the caller's
 * arrays of tsdg_build_graph included (the rows, the graph, the k-NN ids):
 * for a caller that decides whether a build fits its memory budget.
 */
size_t		tsdg_build_bytes_per_row(int dim, const TsdgBuildParams *params);
/*
 * The bytes tsdg_build_layer holds for the layer of a graph of n rows at its
 * peak, the caller's lists included (0 when the graph has no layer).
 */
size_t		tsdg_layer_bytes(int64_t n, int dim, const TsdgBuildParams *params);

/*
 * Large arrays in temporary files (a build or merge past its memory budget):
 * while a directory is set, every array of at least min_bytes the core
 * allocates, in any thread of this process, is a file there, unlinked at
 * once and mapped shared, so that the kernel writes its pages out and drops
 * them under memory pressure; NULL turns it off. tsdg_spill_allocate gives
 * the caller such an array of its own, of any size, while a directory is set
 * (NULL and an error when none is, or the file cannot be made or its blocks
 * reserved); tsdg_spill_free unmaps it.
 */
void		tsdg_set_spill_directory(const char *directory, size_t min_bytes);
TsdgStatus	tsdg_spill_allocate(size_t bytes, void **memory, TsdgError *error);
void		tsdg_spill_free(void *memory);

/*
 * Build the search graph of n rows (GNND, then both TSDG stages). For cosine the
 * rows must already be normalized. Writes neighbors[n * degree] (TSDG_INVALID_ID
 * padded) and lambdas[n * degree]. The k-NN graph (n * build_k) is written to
 * knn_ids and its distances to knn_dists, each when not NULL, for later merges;
 * it is final there once poll sees TSDG_PHASE_DIVERSIFY, so that the caller
 * may write it out while the search graph is diversified and checked.
 */
TsdgStatus	tsdg_build_graph(TsdgBackend *backend, const float *rows, int64_t n, int dim,
							 TsdgMetric metric, const TsdgBuildParams *params,
							 uint32_t *neighbors, uint8_t *lambdas,
							 uint32_t *knn_ids, float *knn_dists,
							 TsdgPollFn poll, void *poll_arg, TsdgError *error);

/*
 * tsdg_build_graph that also writes the navigating layer its check walked
 * from, as tsdg_build_layer writes it: layer_ids and layer_lambdas,
 * tsdg_layer_node_count(n) * params->degree each (not read where the graph
 * has no layer), for a caller that would build the layer next.
 */
TsdgStatus	tsdg_build_graph_with_layer(TsdgBackend *backend, const float *rows, int64_t n, int dim,
										TsdgMetric metric, const TsdgBuildParams *params,
										uint32_t *neighbors, uint8_t *lambdas,
										uint32_t *knn_ids, float *knn_dists,
										uint32_t *layer_ids, uint8_t *layer_lambdas,
										TsdgPollFn poll, void *poll_arg, TsdgError *error);

/*
 * The backend's device memory that tsdg_build_graph of n rows lacks, now, to
 * keep its rows and lists on the device from start to end; short of it the
 * build takes slower steps. 0 where it has enough, for the CPU, and on any
 * error. For a caller that can free device memory of its own first.
 */
size_t		tsdg_build_device_shortfall(TsdgBackend *backend, int64_t n, int dim,
										const TsdgBuildParams *params);

/*
 * tsdg_build_graph for a caller that writes the search lists out while the
 * build checks them: once poll sees TSDG_PHASE_LINK with done = n, every
 * search list is in neighbors and lambdas; the build's check then changes a
 * few of them in place, and marks each TSDG_CHANGED_LINK in changed[n]
 * before it changes it (the others are 0), so that the caller writes those
 * again after the call. layer_ids and layer_lambdas: NULL, or the layer the
 * check walked from, as tsdg_build_graph_with_layer writes it.
 */
TsdgStatus	tsdg_build_graph_marked(TsdgBackend *backend, const float *rows, int64_t n, int dim,
									TsdgMetric metric, const TsdgBuildParams *params,
									uint32_t *neighbors, uint8_t *lambdas,
									uint32_t *knn_ids, float *knn_dists, uint8_t *changed,
									uint32_t *layer_ids, uint8_t *layer_lambdas,
									TsdgPollFn poll, void *poll_arg, TsdgError *error);

/*
 * Exact k nearest rows of base (nb rows) for each of nq queries, ascending,
 * padded with TSDG_INVALID_ID / +inf.
 */
TsdgStatus	tsdg_exact_knn(TsdgBackend *backend, const float *base, int64_t nb,
						   const float *queries, int64_t nq, int dim, TsdgMetric metric, int k,
						   uint32_t *ids, float *dists, TsdgError *error);

/*
 * Merge new rows into an existing index (GGM, Wang et al., 2021, section 5). rows holds
 * n_old + n_new rows, old first. old_knn_* is the old k-NN graph (n_old * k);
 * old_knn_dists may be NULL: the distances are then computed on the threads.
 * Writes the merged k-NN graph (all rows * k; knn_ids and knn_dists each
 * when not NULL) and the re-diversified search graph (all rows * degree).
 * Unlike tsdg_merge_graph_incremental, every step runs on the backend over
 * the whole graph: the GPU's GGM and diversification.
 */
TsdgStatus	tsdg_merge_graph(TsdgBackend *backend, const float *rows, int64_t n_old,
							 int64_t n_new, int dim, TsdgMetric metric,
							 const TsdgBuildParams *params,
							 const uint32_t *old_knn_ids, const float *old_knn_dists,
							 uint32_t *knn_ids, float *knn_dists,
							 uint32_t *neighbors, uint8_t *lambdas,
							 TsdgPollFn poll, void *poll_arg, TsdgError *error);

/*
 * The incremental merge: what tsdg_merge_graph computes, at a cost that
 * follows the batch. GGM joins only the lists the new rows can change (the
 * old lists take part once a join offers them a new row), stage 1 of TSDG
 * runs again on the changed k-NN lists and stage 2 on the nodes whose pruned
 * list or reverse edges can change; the other nodes keep their lists
 * (ggm.h, diversify.h). That is the CPU's computation (backend NULL, or a
 * merge the device cannot hold). A GPU backend builds the new rows' graph by
 * GNND and then runs the same incremental GGM on the device, followed by both
 * TSDG stages over the whole graph there (Backend::merge_graph).
 * rows: n_old + n_new rows, old first. old_knn_ids: the old k-NN graph
 * (n_old * build_k, TSDG_INVALID_ID padded); old_knn_dists may be NULL: the
 * distances are then computed by the merge. old_neighbors and
 * old_lambdas: the old search graph (n_old * degree), as stored.
 * old_changed (n_old, may be NULL): TSDG_OLD_REBUILT where an old k-NN list
 * is not the one the stored search list was built from (a list repaired
 * after deletes), so that its search list is built again; TSDG_OLD_RECHECK
 * where the caller wants the row's search checked after the merge (it lost
 * an edge into it outside the merge, or was not reached before). Writes the
 * k-NN graph (knn_dists may be NULL) and the search graph of all rows, and
 * changed[n]: TSDG_CHANGED_KNN where a row's k-NN list differs from its old
 * one, TSDG_CHANGED_GRAPH where its search list or lambdas do; every new row
 * has both. TSDG_CHANGED_RECHECK marks the old rows that an old search list
 * held and the merged one does not (an edge into them gone: searches that
 * found them may not any more) and those of TSDG_OLD_RECHECK: what the
 * unreached-row checks take besides the new rows. The k-NN graph is final in knn_ids (and knn_dists) once poll
 * sees TSDG_PHASE_DIVERSIFY, so that the caller may write it out while the
 * search graph is diversified. A merge that then reports TSDG_PHASE_LINK
 * (the GPU's) writes its search lists out, then links the graph's
 * components: poll's done counts the rows whose lists are in neighbors and
 * lambdas, in row order. Every merge then runs the build's check over the
 * merged graph (each row searched for its own vector; the rows missed get
 * an edge), and the few lists that the linking or the check changes
 * afterwards have TSDG_CHANGED_LINK in changed, so that a caller who wrote
 * the lists out meanwhile writes those again. old_rows_index may be NULL, or a resident
 * index of the same backend whose first n_old rows are rows' first n_old:
 * the GPU then copies them on the device instead of uploading them.
 * old_rows_source may be NULL, or n_old rows that rows' first n_old are to
 * be a copy of (a caller's copy of the old graph): the merge then writes
 * them into rows itself, beside the new rows' GNND and the device's work,
 * and rows holds them when it returns, whatever it returns. layer_ids and
 * layer_lambdas: NULL, or the merged graph's navigating layer, the one its
 * check walked from, as tsdg_build_layer writes it (tsdg_layer_node_count(n)
 * * params->degree each).
 */
#define TSDG_CHANGED_KNN	1
#define TSDG_CHANGED_GRAPH	2
#define TSDG_CHANGED_LINK	4
#define TSDG_CHANGED_REPAIR	8
#define TSDG_CHANGED_RECHECK	16
#define TSDG_OLD_REBUILT	1
#define TSDG_OLD_RECHECK	2

TsdgStatus	tsdg_merge_graph_incremental(TsdgBackend *backend, const float *rows,
										 const TsdgResidentIndex *old_rows_index,
										 const float *old_rows_source,
										 int64_t n_old, int64_t n_new, int dim,
										 TsdgMetric metric, const TsdgBuildParams *params,
										 const uint32_t *old_knn_ids, const float *old_knn_dists,
										 const uint32_t *old_neighbors, const uint8_t *old_lambdas,
										 const uint8_t *old_changed,
										 uint32_t *knn_ids, float *knn_dists,
										 uint32_t *neighbors, uint8_t *lambdas, uint8_t *changed,
										 uint32_t *layer_ids, uint8_t *layer_lambdas,
										 TsdgPollFn poll, void *poll_arg, TsdgError *error);

/* ---- resident indexes: a graph made searchable by a backend ----
 *
 * The GPU backend copies the rows and the graph to the device, the CPU backend
 * searches them where they are; both keep pointers (the GPU picks its entry
 * points on the host), so the caller's arrays must outlive the index.
 * A batch of queries is answered at once (the GPU picks its small- or
 * large-batch kernel from the batch size).
 */

TsdgResidentIndex *tsdg_index_upload(TsdgBackend *backend, const float *rows, int64_t n,
									 int dim, TsdgMetric metric, const uint32_t *neighbors,
									 const uint8_t *lambdas, int degree, TsdgError *error);
/*
 * tsdg_index_upload of a graph whose first rows are those of same_rows, an
 * index of the same backend (the graph a merge extended): the GPU copies
 * them on the device instead of uploading them again.
 */
TsdgResidentIndex *tsdg_index_upload_after(TsdgBackend *backend,
										   const TsdgResidentIndex *same_rows,
										   const float *rows, int64_t n, int dim,
										   TsdgMetric metric, const uint32_t *neighbors,
										   const uint8_t *lambdas, int degree, TsdgError *error);
/* ids/dists: nq * k, ascending, padded with TSDG_INVALID_ID / +inf */
TsdgStatus	tsdg_index_search(TsdgResidentIndex *index, const float *queries, int64_t nq,
							  int k, int ef, int lambda_limit, uint32_t *ids, float *dists,
							  TsdgError *error);

/*
 * Per-node values a search can answer with instead of node ids (a heap TID
 * per row): value_size (1..16) bytes per node. Nodes whose flags share a bit
 * with skip_bits are left out of answers (flags may be NULL); missing is the
 * value written where a query has fewer results. The arrays are copied (to
 * the device, where the GPU maps the results itself).
 */
TsdgStatus	tsdg_index_set_payload(TsdgResidentIndex *index, const void *values, int value_size,
								   const uint8_t *flags, uint8_t skip_bits, const void *missing,
								   TsdgError *error);
/*
 * Searches for k candidates per query and answers with the values of the
 * first k_out that are not skipped: values nq * k_out * value_size bytes,
 * dists nq * k_out (+inf where missing).
 */
TsdgStatus	tsdg_index_search_payload(TsdgResidentIndex *index, const float *queries, int64_t nq,
									  int k, int k_out, int ef, int lambda_limit, void *values,
									  float *dists, TsdgError *error);
size_t		tsdg_index_memory_bytes(const TsdgResidentIndex *index);
void		tsdg_index_free(TsdgResidentIndex *index);

/* ---- the navigating layer ----
 *
 * Graphs of at least TSDG_LAYER_MIN_NODES nodes have a layer: every
 * TSDG_LAYER_STRIDE-th node (node i * TSDG_LAYER_STRIDE is layer node i),
 * linked by a graph of its own, whose ids are layer nodes. A search walks
 * the layer first, at tsdg_layer_entry_count(ef), and starts its walk on
 * the index's graph from what it found, instead of from the navigating set
 * scored whole. The checks of unreached rows walk as the searches do; the
 * build's check of every row's route keeps the navigating set.
 */
#define TSDG_LAYER_STRIDE 16
#define TSDG_LAYER_MIN_NODES 16384

/* The layer nodes of a graph of n nodes: 0 when it has none. */
int64_t		tsdg_layer_node_count(int64_t n);
/* The entries a search of ef takes from the layer. */
int			tsdg_layer_entry_count(int ef);

/*
 * The layer's lists for rows (the index's n rows): ids local to the layer and
 * lambdas, tsdg_layer_node_count(n) * params->degree each, diversified as the
 * index's graph is. Nothing is written when the graph has no layer.
 */
TsdgStatus	tsdg_build_layer(TsdgBackend *backend, const float *rows, int64_t n, int dim,
							 TsdgMetric metric, const TsdgBuildParams *params, uint32_t *ids,
							 uint8_t *lambdas, TsdgPollFn poll, void *poll_arg, TsdgError *error);

/*
 * The layer of a resident index's graph (layer_nodes ==
 * tsdg_layer_node_count of its nodes, degree the layer's), copied: its
 * searches then start from the layer. layer_nodes 0 drops the layer.
 */
TsdgStatus	tsdg_index_set_layer(TsdgResidentIndex *index, const uint32_t *ids,
								 const uint8_t *lambdas, int64_t layer_nodes, int degree,
								 TsdgError *error);

/*
 * A layer searched on its own, on the calling thread, for a caller that walks
 * the index's graph itself (the scans): layer_rows are the rows of the layer
 * nodes in layer order. Everything is copied.
 */
typedef struct TsdgLayerSearch TsdgLayerSearch;

TsdgLayerSearch *tsdg_layer_search_create(const float *layer_rows, int64_t layer_nodes, int dim,
										  TsdgMetric metric, const uint32_t *ids,
										  const uint8_t *lambdas, int degree, TsdgError *error);
/*
 * The entries of one query into the index's graph: tsdg_layer_entry_count(ef)
 * node ids and distances, ascending, padded with TSDG_INVALID_ID / +inf;
 * *distance_count: the distances the layer's walk computed, its navigating
 * set included.
 */
TsdgStatus	tsdg_layer_search_entries(TsdgLayerSearch *layer, const float *query, int ef,
									  uint32_t *ids, float *dists, int64_t *distance_count,
									  TsdgError *error);
size_t		tsdg_layer_search_memory_bytes(const TsdgLayerSearch *layer);
void		tsdg_layer_search_free(TsdgLayerSearch *layer);

/* ---- exact sets: rows a backend keeps and searches exactly ----
 *
 * For the rows inserted into an index since its last merge: appended as they
 * come, searched by brute force for whole batches of queries, emptied when a
 * merge takes them. The GPU backend keeps the rows (and for L2 their squared
 * norms) in device memory, the CPU backend a host copy. The backend must
 * outlive the set; one call at a time on a set.
 */
typedef struct TsdgExactSet TsdgExactSet;

/* the largest k of tsdg_exact_set_search (the GPU's top-k selection limit) */
#define TSDG_EXACT_SET_MAX_K 2048

/* An empty set of rows of dim values; for cosine the caller normalizes rows and queries. */
TsdgExactSet *tsdg_exact_set_create(TsdgBackend *backend, int dim, TsdgMetric metric,
									TsdgError *error);
/* appends n rows (copied); ids of the set are their positions, in append order */
TsdgStatus	tsdg_exact_set_append(TsdgExactSet *set, const float *rows, int64_t n,
								  TsdgError *error);
/* drops every row; keeps the memory for the next appends */
void		tsdg_exact_set_clear(TsdgExactSet *set);
int64_t		tsdg_exact_set_size(const TsdgExactSet *set);
size_t		tsdg_exact_set_memory_bytes(const TsdgExactSet *set);
/*
 * The k (1..TSDG_EXACT_SET_MAX_K) nearest rows of the set for each of nq
 * queries: ids/dists nq * k, ascending, padded with TSDG_INVALID_ID / +inf
 * (all of a row on an empty set); the same comparison distances as
 * tsdg_exact_knn and tsdg_index_search.
 */
TsdgStatus	tsdg_exact_set_search(TsdgExactSet *set, const float *queries, int64_t nq, int k,
								  uint32_t *ids, float *dists, TsdgError *error);
void		tsdg_exact_set_free(TsdgExactSet *set);

/* ---- incremental graph search, driven by the caller ----
 *
 * The caller owns the storage (pages), the search owns the algorithm: a
 * bounded best-first search with a visited set and the optional slack stop rule.
 *
 *   tsdg_search_begin(s, query, ef);
 *   for each entry point e: tsdg_search_offer(s, e, distance(query, e));
 *   while ((node = tsdg_search_next(s)) != TSDG_INVALID_ID)
 *   {
 *       read node's neighbor list (ids, lambdas, count) from storage;
 *       m = tsdg_search_unvisited(s, ids, lambdas, count, fresh);
 *       for i < m: tsdg_search_offer(s, fresh[i], distance(query, fresh[i]));
 *   }
 *   n = tsdg_search_results(s, out_ids, out_dists, max);
 *
 * tsdg_search_widen(s, ef) raises ef and keeps the visited set and every
 * candidate seen, so the loop above can be run again for more results.
 */
typedef struct TsdgSearch TsdgSearch;

TsdgSearch *tsdg_search_create(int lambda_limit, float slack, TsdgError *error);
void		tsdg_search_free(TsdgSearch *search);
void		tsdg_search_begin(TsdgSearch *search, int ef);
void		tsdg_search_widen(TsdgSearch *search, int ef);
void		tsdg_search_offer(TsdgSearch *search, uint32_t id, float distance);
/* tsdg_search_offer of each, in order, with room for all made at once */
void		tsdg_search_offer_many(TsdgSearch *search, const uint32_t *ids,
								   const float *distances, int64_t count);
uint32_t	tsdg_search_next(TsdgSearch *search);
int			tsdg_search_unvisited(TsdgSearch *search, const uint32_t *ids,
								  const uint8_t *lambdas, int count, uint32_t *fresh);
int			tsdg_search_results(const TsdgSearch *search, uint32_t *ids, float *dists,
								int max_results);
/* distance computations offered since begin */
int64_t		tsdg_search_distance_count(const TsdgSearch *search);
/*
 * The bytes the search holds (its visited set and every candidate kept for a
 * wider round), which grow as it goes: a caller bounds its memory with this.
 */
size_t		tsdg_search_memory_bytes(const TsdgSearch *search);

/* ---- additions: entry points, stop-rule context, search errors ---- */

/*
 * A navigating set of count entry points for the index metapage: the node
 * nearest the data mean, then the nodes nearest k-means centers of a sample,
 * well spread, so searches start close even on well separated clusters.
 * neighbors (n * degree, may be NULL) refines each choice by a greedy descent
 * on the graph. Pads entry_ids with TSDG_INVALID_ID when n < count.
 */
TsdgStatus	tsdg_select_entry_points(const float *rows, int64_t n, int dim, TsdgMetric metric,
									 const uint32_t *neighbors, int degree, int count,
									 uint32_t *entry_ids, TsdgError *error);

/*
 * The navigating set every search of a graph of n nodes starts from: the
 * count entry points (the metapage's), then the strided nodes (every s-th
 * node, s narrowing slowly as n grows, at most TSDG_MAX_STRIDED_ENTRIES)
 * not among them. The strided nodes need no storage: each reader derives
 * them from n, so the CPU scans, the merge's checks and the worker's
 * searches start from the same set. out must hold count +
 * TSDG_MAX_STRIDED_ENTRIES ids; returns how many it wrote.
 */
#define TSDG_MAX_STRIDED_ENTRIES 131072

int			tsdg_navigating_set(const uint32_t *entry_ids, int count, int64_t n, uint32_t *out);

/* How many strided nodes the navigating set of a graph of n nodes has. */
int64_t		tsdg_strided_entry_count(int64_t n);

/*
 * d_nn1+ of a graph for the slack stop rule: the largest distance (metric's
 * comparison distance) from a node to its nearest neighbor, the head of its
 * list. For the metapage; 0 for an empty graph.
 */
TsdgStatus	tsdg_graph_nn1_bound(const float *rows, int64_t n, int dim, TsdgMetric metric,
								 const uint32_t *neighbors, int degree, float *bound,
								 TsdgError *error);

/*
 * The rows [first, n), and those marked TSDG_CHANGED_RECHECK in recheck[n]
 * (may be NULL: none; a merge's changed flags), that a search for their own
 * vector does not reach: the
 * walk of the index pages' scans (tsdg_search_* with ef, lambda_limit and no
 * stop rule, every entry point offered first; where layer_ids and
 * layer_lambdas give the graph's navigating layer, degree ids each, the
 * entries its walk finds for the row's vector instead), stopped once it
 * offers the row. A merge keeps these few exact. Found on threads of its own, so that
 * the caller writes its pages meanwhile: returns at once (NULL and error
 * when it cannot start). The arrays must stay as they are until
 * tsdg_unreached_job_finish, which waits, writes the first max_rows of the
 * rows, ascending, to rows_out and how many there are, all of them, to
 * *count (rows_out may be NULL with max_rows 0: to drop them), and frees
 * the job. The job holds about TSDG_UNREACHED_JOB_ROW_BYTES per row of
 * [first, n), and at most record_bytes besides for the walks it keeps for
 * tsdg_unreached_job_finish_repairing (past them, a repair walks rows
 * again instead).
 */
typedef struct TsdgUnreachedJob TsdgUnreachedJob;

#define TSDG_UNREACHED_JOB_ROW_BYTES 96

TsdgUnreachedJob *tsdg_unreached_job_start(const float *rows, int64_t n, int dim,
										   TsdgMetric metric, const uint32_t *neighbors,
										   const uint8_t *lambdas, int degree,
										   const uint32_t *entry_ids, int entry_count,
										   const uint32_t *layer_ids, const uint8_t *layer_lambdas,
										   int64_t first, const uint8_t *recheck, int ef,
										   int lambda_limit, int64_t record_bytes,
										   TsdgError *error);
TsdgStatus	tsdg_unreached_job_finish(TsdgUnreachedJob *job, uint32_t *rows_out,
									  int64_t max_rows, int64_t *count, TsdgError *error);

/*
 * A repair at an ef wider than this also repairs the rows a walk at this ef
 * misses, so that narrower searches find the new rows too.
 */
#define TSDG_REPAIR_NARROW_EF	10

/*
 * tsdg_unreached_job_finish after a repair of the graph for the rows not
 * reached: each gets an edge from the node its walk found nearest it (that
 * node's list in its (lambda, distance) order, the last entry dropped when
 * full, and the row that entry pointed to checked too), and the walks the
 * new edges can change are walked again, for up
 * to two rounds (UnreachedCheck in search.h); at an ef wider than
 * TSDG_REPAIR_NARROW_EF, first for the rows a walk at that ef misses (the
 * job looked for both). neighbors and lambdas are the
 * arrays the job was started with, now writable; the lists it changes get
 * TSDG_CHANGED_GRAPH | TSDG_CHANGED_REPAIR in changed[n], and their count
 * goes to *lists_changed. The rows still not reached are written as by
 * tsdg_unreached_job_finish.
 */
TsdgStatus	tsdg_unreached_job_finish_repairing(TsdgUnreachedJob *job, uint32_t *neighbors,
												uint8_t *lambdas, int degree, uint8_t *changed,
												uint32_t *rows_out, int64_t max_rows,
												int64_t *count, int64_t *lists_changed,
												TsdgError *error);

/*
 * The search profile of a graph held in memory, as a scan of its pages
 * measures it: each of the sample_count rows of samples is searched for its
 * own vector at ef first_ef, twice that, and so on (steps values), by the
 * walk of the pages' scans (tsdg_search_* with lambda_limit and no stop
 * rule, the navigating set's navigating_count ids offered first, in their
 * order, each list read up to its first TSDG_INVALID_ID). A graph with a
 * navigating layer (layer_nodes == tsdg_layer_node_count(n), its lists
 * layer_ids and layer_lambdas of degree each; 0: none) is searched as the
 * scans search it: the layer's walk at the search's ef first, its entries
 * offered instead of the navigating set. Found on threads of its own, so
 * that the caller writes its pages meanwhile: returns at once (NULL and
 * error when it cannot start). The arrays must stay as they are until the
 * job is finished or cancelled; navigating, the layer and samples are
 * copied. tsdg_profile_job_finish waits, writes to scored[step] the nodes
 * the searches at that ef scored and to layer_scored[step] the distances
 * their layer's walks computed (0 without a layer), over all samples, and
 * to *seconds the time the job took, and frees the job (a node id past n:
 * the job fails with TSDG_ERR_INVALID_ARGUMENT). tsdg_profile_job_cancel
 * stops the job within a node's list, waits for its threads and frees it
 * (NULL: nothing).
 */
typedef struct TsdgProfileJob TsdgProfileJob;

TsdgProfileJob *tsdg_profile_job_start(const float *rows, int64_t n, int dim, TsdgMetric metric,
									   const uint32_t *neighbors, const uint8_t *lambdas,
									   int degree, int lambda_limit, const uint32_t *navigating,
									   int navigating_count, const uint32_t *layer_ids,
									   const uint8_t *layer_lambdas, int64_t layer_nodes,
									   const uint32_t *samples, int sample_count, int first_ef,
									   int steps, TsdgError *error);
TsdgStatus	tsdg_profile_job_finish(TsdgProfileJob *job, int64_t *scored, int64_t *layer_scored,
									double *seconds, TsdgError *error);
void		tsdg_profile_job_cancel(TsdgProfileJob *job);

/*
 * The groups of identical rows among n rows (byte for byte), found on
 * threads of their own so that the caller does other work meanwhile:
 * tsdg_identical_rows_job_start returns at once (NULL and error when it
 * cannot start); rows must stay as they are until the job is taken or
 * cancelled. tsdg_identical_rows_job_done tells whether it has finished.
 * tsdg_identical_rows_job_wait waits and gives the number of groups and of
 * their rows, and *seconds the time the job took; after an error the job is
 * freed. tsdg_identical_rows_job_take then copies the groups' rows, group
 * after group and ascending within a group, to ids (group_rows of them) and
 * each group's end in ids to ends (groups of them), and frees the job.
 * tsdg_identical_rows_job_cancel stops it, waits for its threads and frees
 * it (NULL: nothing).
 */
typedef struct TsdgIdenticalRowsJob TsdgIdenticalRowsJob;

TsdgIdenticalRowsJob *tsdg_identical_rows_job_start(const float *rows, int64_t n, int dim,
													 TsdgError *error);
bool		tsdg_identical_rows_job_done(const TsdgIdenticalRowsJob *job);
TsdgStatus	tsdg_identical_rows_job_wait(TsdgIdenticalRowsJob *job, int64_t *groups,
										 int64_t *group_rows, double *seconds, TsdgError *error);
void		tsdg_identical_rows_job_take(TsdgIdenticalRowsJob *job, uint32_t *ids, int64_t *ends);
void		tsdg_identical_rows_job_cancel(TsdgIdenticalRowsJob *job);

/*
 * What the metapage needs of a resident index's graph: the count entry points
 * its searches start from (those of tsdg_select_entry_points for its rows and
 * graph), padded with TSDG_INVALID_ID, and d_nn1+ (tsdg_graph_nn1_bound). An
 * index the worker just merged gives them to the metapage instead of having
 * them computed again.
 */
TsdgStatus	tsdg_index_summary(TsdgResidentIndex *index, int count, uint32_t *entry_ids,
							   float *nn1_bound, TsdgError *error);

TsdgStatus	tsdg_index_unreached_rows(TsdgResidentIndex *index, int64_t first, int ef,
									  int lambda_limit, uint32_t *rows_out, int64_t max_rows,
									  int64_t *count, TsdgError *error);

/*
 * tsdg_index_unreached_rows after a repair of index's graph for the rows
 * of [first, n) it misses, and for those marked TSDG_CHANGED_RECHECK in
 * changed[] (a merge's flags). On a GPU, the rows the large-batch kernel
 * misses (of the marked ones, the CPU's walk), *found of them, each get an
 * edge from the nearest other node the CPU's walk from the index's entry
 * points finds; the index copies the changed lists up, then looks
 * [first, n) up with both kernels and the marked rows, and those whose
 * edge a repair edge displaced, with the CPU's walk. On the CPU
 * the repair is tsdg_unreached_job_finish_repairing's (*found: the rows
 * its walk missed before it). rows, neighbors and lambdas are the
 * host arrays the index was made from (neighbors and lambdas now
 * writable), metric its metric. rows_out, max_rows and *count as
 * tsdg_index_unreached_rows's; changed[n] and *lists_changed as
 * tsdg_unreached_job_finish_repairing's. Each list is marked in changed[]
 * before it is written, so that a process sharing changed[] and the lists
 * finds every changed list marked, also when this call fails or its
 * process dies halfway (*lists_changed is set only on success).
 */
TsdgStatus	tsdg_index_unreached_rows_repaired(TsdgResidentIndex *index, const float *rows,
											   uint32_t *neighbors, uint8_t *lambdas, int degree,
											   TsdgMetric metric, int64_t first, int ef,
											   int lambda_limit, uint32_t *rows_out,
											   int64_t max_rows, int64_t *count, int64_t *found,
											   uint8_t *changed, int64_t *lists_changed,
											   TsdgError *error);

/*
 * The context of the slack stop rule (Groh et al., 2023): the distances offered are
 * this metric's comparison distances (squared L2 is compared by its root), the
 * rule guards the k best, and nn1_bound is d_nn1+ (the largest distance from a
 * node to its nearest neighbor, in the offered unit; INFINITY when unknown).
 * Defaults until called: distances taken as they are, k = 10, no bound.
 */
void		tsdg_search_set_slack_context(TsdgSearch *search, TsdgMetric metric, int k,
										  float nn1_bound);

/*
 * TSDG_OK, or the failure (out of memory) that made the search stop early: the
 * functions above return no status, so tsdg_search_next returns
 * TSDG_INVALID_ID once one has failed, and this says why.
 */
TsdgStatus	tsdg_search_status(const TsdgSearch *search, TsdgError *error);

#ifdef __cplusplus
}
#endif

#endif							/* TSDG_CAPI_H */
