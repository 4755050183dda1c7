/*
 * The GPU server's arrays of a merge in parts (runs in the GPU server
 * process): the checks of its segment, which holds one part of each array
 * that travels, and the host arrays of the worker's own that the parts are
 * copied into and out of (tsdgservermerge.c serves the merge, tsdgparts.c
 * says where each part lies).
 */
#include "postgres.h"

#include "tsdggpuserver.h"

bool
TsdgMergePartSizesFit(const TsdgMergeArgs *args, const BulkMapping *map)
{
	const TsdgBulkHeader *header = (const TsdgBulkHeader *) map->address;
	int64		n_old = args->n_old;
	int64		n;
	int64		rows;
	int			build_k = args->params.build_k;
	int			degree = args->params.degree;

	if (n_old < 0 || args->n_new < 0 || n_old >= (int64) TSDG_PENDING_ROW_ID ||
		args->n_new >= (int64) TSDG_PENDING_ROW_ID || header->capacity < 1 ||
		header->rows_from != (args->rows_resident ? n_old : 0) ||
		(args->graph_resident && !args->rows_resident))
		return false;
	n = n_old + args->n_new;
	/* no part holds more rows than the merge has */
	rows = Min(header->capacity, n);
	return TsdgGraphSizesValid(n, args->dims, degree, build_k) && build_k > 0 &&
		TsdgBulkHasArray(map, header->parts, 1, sizeof(TsdgPartTurns), false) &&
		TsdgBulkHasArray(map, header->rows, rows * args->dims, sizeof(float), false) &&
		TsdgBulkHasArray(map, header->tids, rows, sizeof(ItemPointerData), false) &&
		TsdgBulkHasArray(map, header->knn_ids, rows * build_k, sizeof(uint32), args->graph_resident) &&
		TsdgBulkHasArray(map, header->neighbors, rows * degree, sizeof(uint32), args->graph_resident) &&
		TsdgBulkHasArray(map, header->lambdas, rows * degree, sizeof(uint8), args->graph_resident) &&
		TsdgBulkHasArray(map, header->dists, rows * build_k, sizeof(float), true) &&
		TsdgBulkHasArray(map, header->flags, rows, sizeof(uint8), true) &&
		TsdgBulkHasArray(map, header->merged_knn_ids, rows * build_k, sizeof(uint32), true) &&
		TsdgBulkHasArray(map, header->merged_neighbors, rows * degree, sizeof(uint32), false) &&
		TsdgBulkHasArray(map, header->merged_lambdas, rows * degree, sizeof(uint8), false) &&
		TsdgBulkHasArray(map, header->changed, rows, sizeof(uint8), false) &&
		TsdgBulkHasArray(map, header->summary, 1, sizeof(TsdgBuildSummary), true) &&
		TsdgBulkHasArray(map, header->layer_ids, tsdg_layer_node_count(n) * degree, sizeof(uint32),
						 true) &&
		TsdgBulkHasArray(map, header->layer_lambdas, tsdg_layer_node_count(n) * degree,
						 sizeof(uint8), true);
}

bool
TsdgTakeMergePartArrays(const TsdgMergeArgs *args, const TsdgBulkHeader *header,
						TsdgMergePartArrays *own)
{
	Size		n_old = (Size) args->n_old;
	Size		n = (Size) (args->n_old + args->n_new);
	int			build_k = args->params.build_k;
	int			degree = args->params.degree;
	bool		ok;

	memset(own, 0, sizeof(TsdgMergePartArrays));
	/* the rows and merged k-NN lists go to the resident copy, which reuses such arrays */
	own->rows = TsdgTakeHostArray(sizeof(float) * args->dims * n);
	own->knn_ids = TsdgTakeHostArray(sizeof(uint32) * build_k * n);
	own->tids = malloc(sizeof(ItemPointerData) * n);
	own->neighbors = malloc(sizeof(uint32) * degree * n);
	own->lambdas = malloc(sizeof(uint8) * degree * n);
	own->changed = malloc(sizeof(uint8) * n);
	ok = own->rows != NULL && own->knn_ids != NULL && own->tids != NULL &&
		own->neighbors != NULL && own->lambdas != NULL && own->changed != NULL;
	if (!args->graph_resident)
	{
		own->old_knn_ids = malloc(sizeof(uint32) * build_k * Max(n_old, 1));
		own->old_neighbors = malloc(sizeof(uint32) * degree * Max(n_old, 1));
		own->old_lambdas = malloc(sizeof(uint8) * degree * Max(n_old, 1));
		ok = ok && own->old_knn_ids != NULL && own->old_neighbors != NULL &&
			own->old_lambdas != NULL;
	}
	if (header->dists != 0)
	{
		own->old_knn_dists = malloc(sizeof(float) * build_k * Max(n_old, 1));
		ok = ok && own->old_knn_dists != NULL;
	}
	if (header->flags != 0)
	{
		own->old_changed = malloc(sizeof(uint8) * Max(n_old, 1));
		ok = ok && own->old_changed != NULL;
	}
	return ok;
}

void
TsdgFreeMergePartArrays(TsdgMergePartArrays *own)
{
	TsdgGiveBackHostArray(own->rows);
	TsdgGiveBackHostArray(own->knn_ids);
	free(own->tids);
	free(own->old_knn_ids);
	free(own->old_knn_dists);
	free(own->old_neighbors);
	free(own->old_lambdas);
	free(own->old_changed);
	free(own->neighbors);
	free(own->lambdas);
	free(own->changed);
	memset(own, 0, sizeof(TsdgMergePartArrays));
}
