/*
 * The navigating layer of a graph the GPU server built or merged (runs in
 * the GPU server process): written by the build or merge beside its check,
 * which walks from it, into the room made for it here; computed on the
 * worker's backend from the graph's rows after the answer where there was
 * no room. Given to the graph's resident copy and to the session's segment,
 * whose pages the session writes from it.
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "tsdggpuserver.h"

/* after the answer only the server's own stop ends the computation */
static bool
LayerPoll(void *arg, TsdgBuildPhase phase, int64_t done, int64_t total)
{
	return TsdgServerShutdownRequested;
}

void
TsdgMakeRoomForLayer(int64 n, const TsdgBuildParams *params, ServerLayer *layer)
{
	int64		nodes = tsdg_layer_node_count(n);

	memset(layer, 0, sizeof(ServerLayer));
	if (nodes > 0)
	{
		layer->ids = malloc(sizeof(uint32) * params->degree * nodes);
		layer->lambdas = malloc(sizeof(uint8) * params->degree * nodes);
		if (layer->ids == NULL || layer->lambdas == NULL)
			TsdgFreeLayer(layer);
	}
	layer->degree = params->degree;
}

void
TsdgLayerWritten(ServerLayer *layer, int64 n)
{
	if (layer->ids != NULL)
		layer->nodes = tsdg_layer_node_count(n);
}

bool
TsdgComputeLayer(const float *rows, int64 n, int dims, TsdgMetric metric,
				 const TsdgBuildParams *params, Oid database, Oid relfilenode, ServerLayer *layer)
{
	TimestampTz start = GetCurrentTimestamp();
	int64		nodes = tsdg_layer_node_count(n);
	TsdgError	error;

	if (layer->nodes > 0)
		return true;
	TsdgFreeLayer(layer);
	TsdgMakeRoomForLayer(n, params, layer);
	if (nodes == 0)
		return true;
	if (layer->ids == NULL)
		strlcpy(error.message, "out of host memory for its lists", sizeof(error.message));
	else if (tsdg_build_layer(TsdgDeviceBackend, rows, n, dims, metric, params, layer->ids,
							  layer->lambdas, LayerPoll, NULL, &error) == TSDG_OK)
	{
		layer->nodes = nodes;
		ereport(LOG,
				(errmsg("pg_tsdg GPU worker: navigating layer of %lld nodes of index %u/%u in %.3f s",
						(long long) nodes, database, relfilenode, TsdgSecondsSince(start))));
		return true;
	}
	ereport(LOG,
			(errmsg("pg_tsdg GPU worker: no navigating layer for index %u/%u, the session computes it: %s",
					database, relfilenode, error.message)));
	TsdgFreeLayer(layer);
	return false;
}

void
TsdgLayerIntoSegment(const ServerLayer *layer, void *base, const TsdgBulkHeader *header,
					 TsdgBuildSummary *summary)
{
	Size		lists = (Size) layer->nodes * layer->degree;

	summary->layer_nodes = 0;
	if (layer->nodes == 0 || header->layer_ids == 0 || header->layer_lambdas == 0)
		return;
	memcpy(TsdgBulkArray(base, header->layer_ids), layer->ids, sizeof(uint32) * lists);
	memcpy(TsdgBulkArray(base, header->layer_lambdas), layer->lambdas, sizeof(uint8) * lists);
	summary->layer_nodes = layer->nodes;
}

void
TsdgFreeLayer(ServerLayer *layer)
{
	free(layer->ids);
	free(layer->lambdas);
	memset(layer, 0, sizeof(ServerLayer));
}
