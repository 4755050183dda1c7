-- pgvector's HNSW index in the same database and backends
\set q random(1, 1000)
SELECT id FROM items_hnsw ORDER BY v <-> (SELECT v FROM queries WHERE qid = :q) LIMIT 10;
