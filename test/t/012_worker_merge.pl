# tsdg_merge() through the GPU worker: the session hands the old graph and
# the pending rows to the worker in a shared memory segment and writes the
# merged graph it gets back. Two tables with the same rows and loads, one
# merged by the worker, one in the session (tsdg.device = cpu): recall@10
# after the merges within 0.01 of each other, every row of the last load
# found first through the index, a row inserted just before a merge found
# first after it, and every row of a load merged at a narrow tsdg.ef_search
# found first at that ef; a merge of a graph the worker built or merged takes
# the old rows and lists from the worker's copy, and the worker keeps the
# merged graph, so the first search after a merge ships no index. A merge
# cancelled while the worker computes it stops the worker's computation; a
# worker killed (SIGKILL) during a merge leaves the merge to the session,
# which completes it on the CPU with a correct index; a worker killed during
# its summary of the merged graph leaves the summary to the session; the
# restarted worker merges an index with deleted nodes.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $dims = 32;
my $base_rows = $ENV{TSDG_MERGE_BASE_ROWS} // 20000;
my $load_rows = $ENV{TSDG_MERGE_LOAD_ROWS} // 2000;
my $cpu_backend = ($ENV{TSDG_WORKER_BACKEND} // 'cpu') eq 'cpu';
my $node = worker_node('worker_merge', "maintenance_work_mem = '512MB'");
wait_for_worker($node);
my $py = numpy_python();
my $gen = support_file('clustered_vectors.py');

sub log_position { return -s $node->logfile; }

# whether the server log from byte $from on has a line matching $re
sub logged
{
	my ($from, $re) = @_;
	return $node->log_contains($re, $from) ? 1 : 0;
}

sub query { return $node->safe_psql('postgres', $_[0]); }

sub wait_ready
{
	my ($when) = @_;
	ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
		"the worker is ready $when");
}

# loads rows [$first, $first + $count) of the data drawn with $seed into $table
sub load
{
	my ($table, $first, $count, $seed) = @_;
	copy_clustered_rows($node, $table, $first, $count, $dims, $seed);
}

# merges $index through the worker ($how = worker) or in the session
# ($how = cpu), with tsdg.merge_knn_lag $lag (default 0.5)
sub merge
{
	my ($index, $how, $lag) = @_;
	$lag //= 0.5;
	my $from = log_position();
	my $device = $how eq 'worker' ? 'auto' : 'cpu';
	cmp_ok(query("SET tsdg.device = $device; SET log_min_messages = debug1;
		SET tsdg.merge_knn_lag = $lag; SELECT tsdg_merge('$index')"), '>', 0, "tsdg_merge('$index') merges rows");
	if ($how eq 'worker')
	{
		ok(logged($from, qr/tsdg index "$index" merged on the GPU worker/), "$index is merged by the worker");
		ok(logged($from, qr/pg_tsdg GPU worker: merged index/), "the worker logs the merge of $index");
	}
	else
	{
		ok(!logged($from, qr/merged on the GPU worker/), "$index is not merged by the worker under tsdg.device = cpu");
	}
}

# recall@10 of the index on $table over the queries
sub recall
{
	my ($table) = @_;
	return query("SET enable_seqscan = off; SET tsdg.device = cpu;
		SELECT round(avg(hits) / 10, 4) FROM (
		  SELECT (SELECT count(*) FROM (SELECT t.id FROM $table t ORDER BY t.v <-> q.v LIMIT 10) a
		          WHERE a.id = ANY (q.truth)) AS hits FROM queries q) s");
}

# recall@10 of the indexes on two tables within 0.01 of each other; returns the first's
sub recall_close
{
	my ($first, $first_is, $second, $second_is, $when) = @_;
	my $a = recall($first);
	my $b = recall($second);
	ok(abs($a - $b) <= 0.01, "recall\@10 $when: $a ($first_is) within 0.01 of $b ($second_is)");
	return $a;
}

# the exact top 10 of every query over items
sub set_truth
{
	query("SET max_parallel_workers_per_gather = 0;
		UPDATE queries q SET truth = ARRAY(SELECT r.id FROM items r ORDER BY (r.v <-> q.v) + 0 LIMIT 10)");
}

# Every row of $table with an id in [$lo, $hi) (every $every-th when given)
# finds itself first through the index. A graph search at the default ef
# misses a few rows' own vectors, in fresh builds too, so the search here is
# wide enough that a miss means the row is not in the graph.
sub finds_itself
{
	my ($table, $lo, $hi, $what, $every) = @_;
	$every //= 1;
	is(query("SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 200;
		SELECT count(*) FROM (SELECT id, v FROM $table WHERE id >= $lo AND id < $hi AND id % $every = 0) p
		WHERE (SELECT t.id FROM $table t ORDER BY t.v <-> p.v LIMIT 1) <> p.id"),
		0, "$table: the rows of [$lo, $hi) find themselves first ($what)");
}

# a search of items through the worker (near row $row): how many index images
# the sessions shipped to the worker for it
sub shipped_for_search
{
	my ($row) = @_;
	my $loads = worker_status($node, 'index_loads');
	query("SET enable_seqscan = off; SET tsdg.device = gpu;
		SELECT count(*) FROM (SELECT t.id FROM items t ORDER BY t.v <-> (SELECT v FROM items WHERE id = $row) LIMIT 10) a");
	return worker_status($node, 'index_loads') - $loads;
}

# Waits until the server log from byte $from on has a line matching $re,
# looking every 10 ms: a merge on a GPU is over soon after it starts, and the
# cancel and the kills below must come while it runs. Dies after 60 s.
sub wait_for_log
{
	my ($re, $from) = @_;
	for (1 .. 6000)
	{
		return if logged($from, $re);
		usleep(10_000);
	}
	die "timed out waiting for $re in the server log";
}

# a statement in a session of its own, in the background: (handle, \stdout, \stderr)
sub start_session
{
	my (@commands) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), map { ('-c', $_) } @commands ],
		'>', \$out, '2>', \$err);
	return ($h, \$out, \$err);
}

query("CREATE TABLE items (id int, v vector($dims)); CREATE TABLE queries (id int, v vector($dims), truth int[])");
load('items', 1, $base_rows, 1);
query('CREATE TABLE items_cpu AS SELECT * FROM items;
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
	SET tsdg.device = cpu; CREATE INDEX items_cpu_idx ON items_cpu USING tsdg (v vector_l2_ops)');

# 1. Two loads, each merged by the worker into items and in the session into
# items_cpu. The worker keeps the graph it built and each graph it merged,
# its k-NN lists included: each merge leaves the old rows and lists to its
# copy instead of reading them, and the search after each merge finds the
# merged graph on the worker. The first merge leaves the k-NN pages as they
# were (the worker has the lists), the second (tsdg.merge_knn_lag = 0)
# writes them.
my $next = $base_rows + 1;
my $first_merge = log_position();
for my $l (1, 2)
{
	load('items', $next, $load_rows, $l + 1);
	query("INSERT INTO items_cpu SELECT * FROM items WHERE id >= $next");
	my $from = log_position();
	merge('items_idx', 'worker', $l == 1 ? 0.5 : 0);
	my $old = $next - 1;
	ok(logged($from, qr/merging $load_rows rows into the graph of $old rows .*the old graph from its copy/),
		"merge $l takes the old graph from the worker's copy");
	if ($l == 1)
	{
		my $nodes = $next + $load_rows - 1;
		ok(logged($from, qr/k-NN pages kept as they were \(the lists of $base_rows of $nodes nodes\)/),
			"merge 1 leaves the k-NN pages to the worker's lists");
		ok(logged($from, qr/the worker's own memory has the merged graph's rows and k-NN lists/),
			"merge 1's segment carries neither the old rows nor the merged k-NN lists the worker keeps");
		is(query("SELECT knn_lag FROM tsdg_index_info('items_idx')"), $load_rows,
			'tsdg_index_info shows the nodes past the k-NN pages');
	}
	else
	{
		ok(!logged($from, qr/k-NN pages kept/), 'merge 2 writes the k-NN pages under tsdg.merge_knn_lag = 0');
		ok(logged($from, qr/the worker's own memory has the merged graph's rows\./),
			"merge 2's segment carries the merged k-NN lists it writes out, not the old rows");
		is(query("SELECT knn_lag FROM tsdg_index_info('items_idx')"), 0,
			'tsdg_index_info shows no k-NN lag after merge 2 wrote the k-NN pages');
	}
	is(shipped_for_search($next), 0, "the first search after merge $l ships no index: the worker kept the merged graph");
	merge('items_cpu_idx', 'cpu');
	$next += $load_rows;
}
is(query("SELECT pending FROM tsdg_index_info('items_idx')"), 0, 'no rows pending after the merges');
# the session writes the merged k-NN lists while the worker diversifies, when
# the worker's progress poll (every 50 ms) sees it do so: the CPU worker
# takes longer than that here, a GPU may not
if ($cpu_backend)
{
	ok(logged($first_merge, qr/k-NN pages written while the worker diversified/),
		'a merge writes its k-NN pages while the worker diversifies');
}
# A GPU merge puts its search lists in the segment batch by batch before it
# links the graph's components: parallel workers and the session write the
# list pages meanwhile, and those holding a list the linking changed again
# after the answer (the CPU worker merges as the session does, without that
# step, and publishes its lists with its answer: the same writers write them
# then).
ok(logged($first_merge, qr/list pages written in .* by [1-9][0-9]* parallel workers and the session/),
	'parallel workers write list pages of the merges');
if (!$cpu_backend)
{
	ok(logged($first_merge, qr/list pages written in .* \([1-9][0-9]* before its answer/),
		'a merge writes list pages while the worker writes its lists out');
}
is(query("SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
	WHERE c->>'index' = 'items_idx'"), 1, 'the worker holds no older graph of items_idx after searches of the newer one');
my $queries = '';
IPC::Run::run([ $py, $gen, 100, $dims, 99 ], '>', \$queries) or die 'clustered_vectors.py failed';
query("COPY queries (id, v) FROM STDIN;\n$queries\\.\n");
set_truth();
my $recall = recall_close('items', 'merged by the worker', 'items_cpu', 'merged in the session', 'after 2 merges');
cmp_ok($recall, '>=', 0.9, 'recall@10 after the merges');
finds_itself('items', $next - $load_rows, $next, 'the last load, merged by the worker');
finds_itself('items', 1, $next, 'the graph merged by the worker', 25);

# 2. A row inserted just before a merge is found first right after it.
query("INSERT INTO items SELECT $next, v FROM queries WHERE id = 7");
merge('items_idx', 'worker');
is(query('SET enable_seqscan = off; SET tsdg.device = cpu;
	SELECT t.id FROM items t, queries q WHERE q.id = 7 ORDER BY t.v <-> q.v LIMIT 1'),
	$next, 'the row inserted before the merge is found first after it');
$next += 1;

# 2b. A load merged at a narrow tsdg.ef_search: the merge looks each row up
# by its own vector at that ef, repairs the graph for the rows those
# searches do not reach (the worker's walk and the pages'), and the rows
# still not reached are searched exactly from then on, so every row of the
# load is found first at that ef: through the worker, through the pages and
# in a batch.
load('items', $next, $load_rows, 5);
my $from = log_position();
query("SET tsdg.ef_search = 2; SELECT tsdg_merge('items_idx')");
ok(logged($from, qr/are not reached by the walk for their own vector at ef 2 .*; [0-9]* lists given an edge/),
	'the worker repairs its graph for the merged rows its searches do not reach');
my @left = slurp_file($node->logfile, $from) =~ /lists given an edge.*, then ([0-9]*) not reached by a search/g;
is(query("SELECT unreached FROM tsdg_index_info('items_idx')"), $left[-1] // 'none',
	"the metapage lists the rows the worker's repair left unreached");
my $end = $next + $load_rows;
for my $device ('auto', 'cpu')
{
	is(query("SET enable_seqscan = off; SET tsdg.device = $device; SET tsdg.ef_search = 2;
		SELECT count(*) FROM (SELECT id, v FROM items WHERE id >= $next AND id < $end) p
		WHERE (SELECT t.id FROM items t ORDER BY t.v <-> p.v LIMIT 1) <> p.id"),
		0, "the rows of the load merged at ef 2 are found first at ef 2 (tsdg.device = $device)");
}
is(query("SET tsdg.ef_search = 2;
	SELECT count(*) FROM tsdg_search_batch('items_idx',
	  ARRAY(SELECT v FROM items WHERE id >= $next AND id < $end ORDER BY id), 1) b
	JOIN items t ON t.ctid = b.tid WHERE t.id <> b.query - 1 + $next"),
	0, 'the rows of the load merged at ef 2 are found first by a batch at ef 2');
$next = $end;

# 3. A merge cancelled while the worker computes it: the worker stops it (or,
# when it answered first, the session stops writing), the pending rows stay,
# and the next merge goes through the worker again. (Larger loads from here
# on, so that the merges last long enough to be interrupted.)
$load_rows *= 3;
load('items', $next, $load_rows, 4);
$next += $load_rows;
# connected beforehand, so that the cancel follows the log line at once
my $canceller = $node->background_psql('postgres');
$from = log_position();
my ($session, $out, $err) = start_session("SELECT tsdg_merge('items_idx')");
wait_for_log(qr/pg_tsdg GPU worker: merging/, $from);
$canceller->query_safe(
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT tsdg_merge%' AND pid <> pg_backend_pid()");
$canceller->quit;
ok(!$session->finish, 'the cancelled merge does not complete');
like($$err, qr/canceling statement due to user request/, 'the merge is cancelled');
# a GPU may finish the merge before it sees the cancel (it looks every 50
# ms): the session, cancelled while it waited, then drops the answer; the
# CPU worker is slow enough to be stopped
my $stopped = qr{pg_tsdg GPU worker: merge for index [0-9/]* cancelled};
if ($cpu_backend)
{
	wait_for_log($stopped, $from);
}
else
{
	wait_for_log(qr/$stopped|pg_tsdg GPU worker: merged index/, $from);
	note('cancel: the worker finished the merge before it saw the cancel; the session dropped it')
	  unless logged($from, $stopped);
}
pass('the worker stopped or finished the cancelled merge');
wait_ready('after a cancelled merge');
is(query("SELECT pending FROM tsdg_index_info('items_idx')"), $load_rows, 'the cancelled merge leaves the pending rows');
merge('items_idx', 'worker');
finds_itself('items', $next - $load_rows, $next, 'merged after a cancelled merge');

# 4. The worker killed during a merge: the session merges on the CPU (or,
# when the worker answered first, writes its answer).
load('items', $next, $load_rows, 5);
$next += $load_rows;
my $fallbacks = worker_status($node, 'fallbacks');
my $worker_pid = worker_status($node, 'worker_pid');
$from = log_position();
($session, $out, $err) = start_session('SET log_min_messages = debug1', "SELECT tsdg_merge('items_idx')");
wait_for_log(qr/pg_tsdg GPU worker: merging/, $from);
kill 'KILL', $worker_pid;
ok($session->finish, "the merge completes when the worker is killed: $$err");
is($$out, "$load_rows\n", 'the merge after the kill merges the load');
# a GPU may have answered before the kill came: the session then finishes
# the merge without the worker (the entry points included)
if (!$cpu_backend && logged($from, qr/tsdg index "items_idx" merged on the GPU worker/))
{
	note('kill: the worker had answered, the session finished the merge without it');
}
else
{
	ok(logged($from, qr/tsdg merge of index "items_idx" falls back to the CPU/), "a LOG line of the merge's fallback");
	cmp_ok(worker_status($node, 'fallbacks'), '>', $fallbacks, 'the fallback is counted');
	# the merges since the second kept the k-NN pages: the session read them
	# and merged the nodes past them again
	ok(logged($from, qr/nodes past the stored k-NN lists merged again/),
		'the merge on the CPU merges the nodes past the stored k-NN lists');
}
is(query("SELECT pending FROM tsdg_index_info('items_idx')"), 0, 'no rows pending after the merge on the CPU');
is(query("SELECT rows FROM tsdg_index_info('items_idx')"), query('SELECT count(*) FROM items'),
	'the index holds every row after the merge on the CPU');
finds_itself('items', $next - $load_rows, $next, 'merged on the CPU after the worker was killed');
finds_itself('items', 1, 1000, 'old rows after the merge on the CPU');

# 4b. The worker killed during its summary of the merged graph, after its
# answer, while it looks the merged rows up and repairs its graph for those
# it does not reach (a wide ef makes that last): the session computes the
# summary with the pages' walk and writes again every list the worker's
# repair had marked (the worker marks a list before it writes it), so each
# row of the load is found first at the merging ef. A kill that comes after
# the summary leaves nothing to check: the load is merged again until one
# lands in it.
my $killed_in_summary = 0;
for my $attempt (1 .. 3)
{
	wait_ready("before attempt $attempt to kill it in its summary");
	load('items', $next, $load_rows, 20 + $attempt);
	$worker_pid = worker_status($node, 'worker_pid');
	$from = log_position();
	($session, $out, $err) = start_session('SET log_min_messages = debug1', 'SET tsdg.ef_search = 400',
		"SELECT tsdg_merge('items_idx')");
	wait_for_log(qr/pg_tsdg GPU worker: merged index/, $from);
	kill 'KILL', $worker_pid;
	ok($session->finish, "the merge completes when the worker is killed in its summary: $$err");
	is($$out, "$load_rows\n", 'the merge with the worker killed in its summary merges the load');
	$end = $next + $load_rows;
	is(query("SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 400;
		SELECT count(*) FROM (SELECT id, v FROM items WHERE id >= $next AND id < $end) p
		WHERE (SELECT t.id FROM items t ORDER BY t.v <-> p.v LIMIT 1) <> p.id"),
		0, 'the rows of a load whose worker was killed in its summary are found first');
	$next = $end;
	if (logged($from, qr/the worker's summary failed: computed here/))
	{
		$killed_in_summary = 1;
		note("killed in its summary (attempt $attempt)");
		last;
	}
	ok(logged($from, qr/pg_tsdg GPU worker: summary of the merged graph of index/),
		'the worker finished its summary before the kill');
}
ok($killed_in_summary, "a kill landed in the worker's summary in 3 attempts");
finds_itself('items', 1, $next, 'the graph after the worker was killed in its summary', 25);

# 5. The restarted worker merges again, for VACUUM, with deleted nodes: the
# session sends the repaired k-NN lists with their distances and which lists
# it repaired, and the worker's graph leaves the deleted nodes out. The merge
# before it kept the k-NN pages, so the merge with deletes also merges the
# nodes past them again, and writes them; the merge after it reuses the
# region they leave.
wait_ready('after the kill in its summary');
load('items', $next, 300, 7);
merge('items_idx', 'worker');
$next += 300;
query('DELETE FROM items WHERE id % 10 = 3');
query('SET tsdg.merge_threshold = -1; VACUUM items');
is(query("SELECT deleted > 0 FROM tsdg_index_info('items_idx')"), 't', 'VACUUM marks nodes deleted');
load('items', $next, 500, 6);
# this merge is VACUUM's (past tsdg.merge_threshold), through the worker as well
$from = log_position();
query('SET tsdg.merge_threshold = 0; SET tsdg.merge_scale_factor = 0; SET log_min_messages = debug1; VACUUM items');
ok(logged($from, qr/tsdg index "items_idx" merged on the GPU worker/), "VACUUM's merge goes through the worker");
ok(logged($from, qr/nodes past the stored k-NN lists merged again/),
	'the merge with deleted nodes merges the nodes past the stored k-NN lists');
ok(!logged($from, qr/k-NN pages kept/), 'the merge with deleted nodes writes the k-NN pages');
is(query("SELECT rows || '/' || deleted FROM tsdg_index_info('items_idx')"),
	query('SELECT count(*) FROM items') . '/0', 'after the merge with deleted nodes the index holds every row and no deleted node');
finds_itself('items', $next, $next + 500, 'merged by the restarted worker after deletes');
finds_itself('items', 1, 2000, 'old rows after the merge that dropped deleted nodes');
$next += 500;
load('items', $next, 400, 8);
merge('items_idx', 'worker');
finds_itself('items', $next, $next + 400, 'merged after the merge that wrote the k-NN pages again');
finds_itself('items', 1, 2000, 'old rows after the merge that reused the retired k-NN region');

# 6. After merges from k-NN pages that lagged, the graph is as good as a fresh build's.
query('CREATE TABLE items_fresh AS SELECT * FROM items;
	SET tsdg.device = cpu; CREATE INDEX items_fresh_idx ON items_fresh USING tsdg (v vector_l2_ops)');
set_truth();
recall_close('items', 'merged', 'items_fresh', 'fresh build', 'at the end');

# 7. A temporary table's index merged through the worker: other backends
# cannot write its pages, so the session writes its list pages alone.
$from = log_position();
my $missed = query("SET log_min_messages = debug1;
	CREATE TEMP TABLE temp_items AS SELECT * FROM items WHERE id % 3 = 0;
	CREATE INDEX temp_items_idx ON temp_items USING tsdg (v vector_l2_ops);
	INSERT INTO temp_items SELECT * FROM items WHERE id % 3 = 1;
	-- the worker makes the new graph resident after answering the build
	DO \$\$ BEGIN
		FOR i IN 1..3000 LOOP
			EXIT WHEN (SELECT state FROM tsdg_gpu_status()) = 'ready';
			PERFORM pg_sleep(0.01);
		END LOOP;
	END \$\$;
	SELECT tsdg_merge('temp_items_idx');
	SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 200;
	SELECT count(*) FROM (SELECT id, v FROM temp_items WHERE id % 3 = 1) p
	WHERE (SELECT t.id FROM temp_items t ORDER BY t.v <-> p.v LIMIT 1) <> p.id");
ok(logged($from, qr/tsdg index "temp_items_idx" merged on the GPU worker/),
	"the temporary table's index is merged by the worker");
ok(logged($from, qr/list pages written in .* by 0 parallel workers and the session/),
	"no parallel worker writes list pages of a temporary table's index");
is((split /\n/, $missed)[-1], 0, 'the merged rows of the temporary table find themselves first');

done_testing();
