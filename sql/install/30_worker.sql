-- The GPU worker: its status, and batch searches answered in one call.

-- The worker's state (not preloaded, stopped, starting, ready, busy, no gpu,
-- disabled), device, processes, GPU memory, the indexes resident on the GPU
-- with their graph versions, and its counters. fallbacks counts the requests
-- sessions ran on the CPU instead (worker busy, slow, gone, or out of memory).
CREATE FUNCTION tsdg_gpu_status(
	OUT state text,
	OUT device text,
	OUT supervisor_pid int,
	OUT worker_pid int,
	OUT worker_starts int,
	OUT memory_used bigint,
	OUT memory_free bigint,
	OUT memory_total bigint,
	OUT memory_limit bigint,
	OUT cached_indexes jsonb,
	OUT queue_depth int,
	OUT batches bigint,
	OUT mean_batch_size float8,
	OUT builds bigint,
	OUT index_loads bigint,
	OUT fallbacks bigint,
	OUT last_error text)
	AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL SAFE;

-- k nearest rows for each query of the array, searched as one batch (on the
-- GPU worker when it runs). query is the position of the query in the array,
-- from 1; tid is the heap row. Join back to the table on ctid:
--
--   SELECT b.query, i.id, b.distance
--   FROM tsdg_search_batch('items_embedding_idx', $1::vector[], 10) AS b
--   JOIN items AS i ON i.ctid = b.tid
--   ORDER BY b.query, b.distance;
--
-- The join drops rows deleted or updated since the index last saw them, as an
-- index scan would.
CREATE FUNCTION tsdg_search_batch(index regclass, queries vector[], k int)
	RETURNS TABLE(query int, tid tid, distance real)
	AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;

-- The same search, one row per query: its neighbors' heap rows and distances,
-- nearest first, as arrays of up to k elements (fewer where the index has
-- fewer rows; empty for a zero query under cosine distance). A row for every
-- element of the array, in its order; NULL queries are an error. Many fewer
-- rows than tsdg_search_batch returns, for callers that want the matrix of a
-- batch rather than a join:
--
--   SELECT b.query, b.tids, b.distances
--   FROM tsdg_search_batch_arrays('items_embedding_idx', $1::vector[], 10) AS b;
--
-- and the rows of one query with unnest(b.tids) joined on ctid.
CREATE FUNCTION tsdg_search_batch_arrays(index regclass, queries vector[], k int)
	RETURNS TABLE(query int, tids tid[], distances real[])
	AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
