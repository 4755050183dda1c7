# The pending rows searched by the GPU worker (tsdg.worker_pending_rows): once
# an index has that many, the sessions send the worker the rows its copy
# lacks and it searches them with the graph. Its answers equal those of the
# session's own scan of the pending rows (tsdg.worker_pending_rows = -1) for
# index scans and batches, and filtered scans that go past the worker's round
# return every pending row they should; rows inserted later reach the copy
# and are found first; rows VACUUM removes from the pending pages are never
# returned from the copy; a merge leaves the new graph's copy empty; past
# tsdg.gpu_memory_limit the copy takes no more rows.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = worker_node('worker_pending');
wait_for_worker($node);

my $random32 = random_vector_sql(32, 'i');

sub insert_rows
{
	my ($first, $last) = @_;
	$node->safe_psql('postgres', "INSERT INTO items SELECT i, $random32 FROM generate_series($first, $last) i");
}

$node->safe_psql('postgres', qq{
	SELECT setseed(0.25);
	CREATE TABLE items (id int, v vector(32));
	INSERT INTO items SELECT i, $random32 FROM generate_series(1, 6000) i;
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
	INSERT INTO items SELECT i, $random32 FROM generate_series(6001, 8500) i;
	CREATE TABLE queries AS SELECT i AS q, $random32 AS v FROM generate_series(1, 200) i;
});

# the pending rows the worker's copy holds for items_idx (0 when none)
sub worker_pending
{
	return $node->safe_psql('postgres', q{
		SELECT coalesce(max((c->>'pending_rows')::bigint), 0)
		FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c WHERE c->>'index' = 'items_idx'});
}

# A digest of the $limit (10) nearest ids of every query at tsdg.ef_search
# $ef (100), $setting that of tsdg.worker_pending_rows. Past the 32 pending
# rows of the worker's round the scan reads the others itself. The ids as
# sets: the worker computes a pending row's distance otherwise than the
# session, which may swap near ties.
sub scans
{
	my ($setting, $limit, $ef) = @_;
	$limit //= 10;
	$ef //= 100;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET tsdg.worker_pending_rows = $setting; SET tsdg.ef_search = $ef;
		SELECT md5(string_agg(r.ids, ';' ORDER BY q.q)) FROM queries q,
		  LATERAL (SELECT string_agg(id::text, ',' ORDER BY id) AS ids
		           FROM (SELECT id FROM items ORDER BY v <-> q.v LIMIT $limit) n) r});
}

sub same_scans
{
	my ($what) = @_;
	is(scans(1000), scans(-1), "index scans are the same with the worker's pending rows $what");
}

# Through a filter that keeps one row in 20, the scan goes past the worker's
# round: "missed of expected", the pending rows among the exact 10 nearest
# filtered rows of 40 queries that the index scan did not return. Graph rows
# may differ between the settings (the worker's round holds fewer of them
# when pending rows are among it, so later rounds start elsewhere); pending
# rows are scanned exactly and must all be there.
sub filtered_pending_misses
{
	my ($setting) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_indexscan = off;
		CREATE TEMP TABLE exact AS SELECT q.q, n.id FROM (SELECT * FROM queries WHERE q <= 40) q,
		  LATERAL (SELECT id FROM items WHERE id % 20 = 3 ORDER BY v <-> q.v LIMIT 10) n WHERE n.id > 6000;
		RESET enable_indexscan;
		SET enable_seqscan = off; SET tsdg.worker_pending_rows = $setting;
		SELECT count(*) FILTER (WHERE NOT EXISTS (
		         SELECT 1 FROM (SELECT id FROM items WHERE id % 20 = 3
		                        ORDER BY v <-> (SELECT v FROM queries WHERE q = e.q) LIMIT 10) i
		         WHERE i.id = e.id)) || ' of ' || count(*) FROM exact e});
}

# the rows of tsdg_search_batch per query, not their distances: the CUDA
# worker computes a pending row's distance otherwise than the session
sub batch
{
	my ($setting) = @_;
	return $node->safe_psql('postgres', qq{
		SET tsdg.worker_pending_rows = $setting;
		SELECT md5(string_agg(b.query || ':' || b.tid, ',' ORDER BY b.query, b.tid))
		FROM tsdg_search_batch('items_idx', (SELECT array_agg(v ORDER BY q) FROM queries), 10) b});
}

# rows of items with id in [$first, $last] not found first by their own vector
sub self_misses
{
	my ($first, $last) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off;
		SELECT count(*) FILTER (WHERE first IS DISTINCT FROM p.id) FROM items p,
		  LATERAL (SELECT t.id AS first FROM items t ORDER BY t.v <-> p.v LIMIT 1) f
		WHERE p.id BETWEEN $first AND $last});
}

# 1. Below the threshold the session scans the pending rows itself.
$node->safe_psql('postgres', q{
	SET tsdg.worker_pending_rows = 5000; SET enable_seqscan = off;
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE q = 1) LIMIT 1});
is(worker_pending(), 0, 'the worker takes no pending rows under the threshold');

# 2. Above it the worker gets all 2500 and answers as the session's scan does.
my $with_worker = scans(1000);
is(worker_pending(), 2500, 'the worker holds the 2500 pending rows');
is($with_worker, scans(-1), "index scans are the same with the worker's pending rows");
# about 44 of the 150 nearest rows are pending, all within a round of 400
is(scans(1000, 150, 400), scans(-1, 150, 400), "index scans of 150 rows are the same with the worker's pending rows");
for my $setting (1000, -1)
{
	like(filtered_pending_misses($setting), qr/^0 of [1-9]/,
		"filtered scans (tsdg.worker_pending_rows = $setting) miss no pending row");
}
is(batch(1000), batch(-1), "batches are the same with the worker's pending rows");
is(self_misses(6001, 8500), 0, 'every pending row is found first through the worker');

# 3. Rows inserted later reach the copy on the next search.
insert_rows(8501, 8530);
is(self_misses(8501, 8530), 0, 'rows inserted later are found first');
is(worker_pending(), 2530, 'the worker holds the 30 rows inserted later');
# one row at a time, each looked up right after: the sessions send each from
# where the worker's copy ends, in the tail page
my ($ret, $out, $err) = $node->psql('postgres', qq{
	SET enable_seqscan = off;
	DO \$\$
	DECLARE first int;
	BEGIN
	  FOR i IN 8531..8560 LOOP
	    INSERT INTO items SELECT i, $random32;
	    SELECT t.id INTO first FROM items t ORDER BY t.v <-> (SELECT v FROM items WHERE id = i) LIMIT 1;
	    IF first IS DISTINCT FROM i THEN
	      RAISE EXCEPTION 'row % inserted one at a time came back as %', i, first;
	    END IF;
	  END LOOP;
	END \$\$});
is($ret, 0, "rows inserted one at a time are found first: $err");
is(worker_pending(), 2560, 'the worker holds the 30 rows inserted one at a time');
same_scans('after rows were sent one at a time');

# 4. VACUUM removes pending rows and new rows take their heap TIDs: a copy of
# the old epoch would answer with those TIDs at the old rows' distances.
$node->safe_psql('postgres', 'DELETE FROM items WHERE id BETWEEN 7001 AND 7500');
$node->safe_psql('postgres', 'SET tsdg.merge_threshold = -1; VACUUM items');
insert_rows(9001, 9500);
same_scans('after VACUUM removed pending rows');
is(batch(1000), batch(-1), "batches are the same after VACUUM removed pending rows");
is(worker_pending(), 2560, 'the worker holds the 2560 live pending rows after VACUUM removed 500 and 500 came');
is(self_misses(9001, 9500), 0, 'rows inserted after VACUUM are found first');

# 5. A merge takes the pending rows into the graph; the new graph's copy starts empty.
$node->safe_psql('postgres', "SELECT tsdg_merge('items_idx')");
scans(1000);
is(worker_pending(), 0, "the merged graph's copy holds no pending rows");
insert_rows(10001, 11200);
same_scans('of the merged graph');
is(worker_pending(), 1200, "the merged graph's copy holds the 1200 rows inserted after it");

# 6. tsdg.gpu_memory_limit holds for the copies too: past it the worker takes
# no more pending rows (it drops no index for them) and the sessions scan them.
sub set_limit
{
	my ($limit, $bytes) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET tsdg.gpu_memory_limit = '$limit'; SELECT pg_reload_conf()");
	ok($node->poll_query_until('postgres', "SELECT coalesce(memory_limit, 0) = $bytes FROM tsdg_gpu_status()"),
		"the worker takes tsdg.gpu_memory_limit = $limit");
}
set_limit('1MB', 1048576);
insert_rows(11201, 21200);
# the session's WARNING (the server log keeps LOG and above, not WARNING)
($ret, $out, $err) = $node->psql('postgres', q{
	SET enable_seqscan = off;
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE q = 1) LIMIT 1});
like($err, qr/would pass tsdg.gpu_memory_limit/, 'a WARNING says the pending rows would pass tsdg.gpu_memory_limit');
same_scans('past tsdg.gpu_memory_limit');
is(worker_pending(), 1200, 'the worker takes no more pending rows past tsdg.gpu_memory_limit');
set_limit('0', 0);
is(self_misses(11201, 21200), 0, 'every row is found first once the limit is lifted');
is(worker_pending(), 11200, 'the worker holds every pending row once the limit is lifted');

done_testing();
