-- an index search for a query of the rows' own clusters
\set q random(1, 1000)
SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE qid = :q) LIMIT 10;
