-- a search whose filter throws most rows away, so that the scan widens
\set q random(1, 1000)
\set m random(2, 50)
SELECT id FROM items WHERE id % :m = 0 ORDER BY v <-> (SELECT v FROM queries WHERE qid = :q) LIMIT 10;
