\set q random(1, 969)
SELECT count(*) FROM tsdg_search_batch('items_v_idx',
	ARRAY(SELECT v FROM queries WHERE qid BETWEEN :q AND :q + 31 ORDER BY qid), 10);
