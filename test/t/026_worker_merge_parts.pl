# Merges through the GPU worker within maintenance_work_mem: where one
# shared memory segment of the whole merge would pass it, the session sends
# the merge's inputs and takes the merged graph back in parts through a
# segment that does not, as a build in parts does, and what the worker's copy
# of the old graph holds does not travel at all. Two tables of the same hard
# rows (clusters on their own random 16-dim subspaces, overlapping), each
# index built by the worker, take the same loads: one merged at a
# maintenance_work_mem its whole segment fits, one at 1MB. The merge at 1MB
# says it does not fit (the NOTICE and its hint, as a build's), goes through
# a segment of at most 1MB in more than one part each way while the other
# merge's segment is larger than 1MB, sends only the new rows when the
# worker holds the old graph, and the old graph too after deletes; the
# merged indexes reach the same recall@10 within 0.01 (at tsdg.ef_search
# 10), every merged row finds itself first, and the worker keeps the graph
# merged in parts for the searches after it. A worker killed during a merge
# in parts leaves it to the session, which completes it on the CPU.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $dims = 32;
my $base_rows = 10000;
my $load_rows = 1000;
my $small = 1024 * 1024;
my $node = worker_node('worker_merge_parts');
wait_for_worker($node);
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;

sub query { return $node->safe_psql('postgres', $_[0]); }
sub log_position { return -s $node->logfile; }

# the server log from byte $from on
sub log_since
{
	my ($from) = @_;
	return slurp_file($node->logfile, $from);
}

# rows [$first, $first + $count) of the mixture drawn with $seed, into both tables
sub load
{
	my ($first, $count, $seed) = @_;
	write_subspace_clusters("$dir/load.tsv", $count, $dims, 50, 1, $seed);
	query("CREATE TEMP TABLE load (id int, v vector($dims));
		COPY load FROM '$dir/load.tsv';
		INSERT INTO items_big SELECT id - 1 + $first, v FROM load;
		INSERT INTO items_small SELECT id - 1 + $first, v FROM load");
}

# merges $table's index at maintenance_work_mem $mem: (rows merged, log lines, notices)
sub merge
{
	my ($table, $mem) = @_;
	my $from = log_position();
	my ($merged, $notices) = ('', '');
	$node->psql('postgres',
		"SET maintenance_work_mem = '$mem'; SET log_min_messages = debug1; SELECT tsdg_merge('${table}_idx')",
		stdout => \$merged, stderr => \$notices, on_error_die => 1);
	return ($merged, log_since($from), $notices);
}

# recall@10 of $table's index over the queries, in the session, at tsdg.ef_search $ef
sub recall
{
	my ($table, $ef) = @_;
	return query("SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = $ef;
		SELECT round(avg(hits) / 10, 4) FROM (
		  SELECT (SELECT count(*) FROM (SELECT t.id FROM $table t ORDER BY t.v <-> q.v LIMIT 10) a
		          WHERE a.id = ANY (q.truth)) AS hits FROM queries q) s");
}

# rows of $table with an id in [$lo, $hi) (every $every-th when given) whose
# search for their own vector does not find them first
sub not_found_first
{
	my ($table, $lo, $hi, $device, $every) = @_;
	$every //= 1;
	return query("SET enable_seqscan = off; SET tsdg.device = $device; SET tsdg.ef_search = 200;
		SELECT count(*) FROM (SELECT id, v FROM $table WHERE id >= $lo AND id < $hi AND id % $every = 0) p
		WHERE (SELECT t.id FROM $table t ORDER BY t.v <-> p.v LIMIT 1) <> p.id");
}

write_subspace_clusters("$dir/items.tsv", $base_rows, $dims, 50, 1, 1);
write_subspace_clusters("$dir/queries.tsv", 100, $dims, 50, 1, 2);
query("CREATE TABLE items_big (id int, v vector($dims)); CREATE TABLE items_small (id int, v vector($dims));
	CREATE TABLE queries (id int, v vector($dims), truth int[]);
	COPY items_big FROM '$dir/items.tsv'; COPY items_small FROM '$dir/items.tsv';
	COPY queries (id, v) FROM '$dir/queries.tsv';
	CREATE INDEX items_big_idx ON items_big USING tsdg (v vector_l2_ops);
	CREATE INDEX items_small_idx ON items_small USING tsdg (v vector_l2_ops)");
is(worker_status($node, 'builds'), 2, 'the worker built both indexes');

# 1. The worker holds both graphs: the merge at 1MB sends the new rows only.
my $next = $base_rows + 1;
load($next, $load_rows, 3);
my ($merged, $log, $notices) = merge('items_big', '512MB');
is($merged, $load_rows, 'the merge at 512MB merges the load');
my ($whole_mb) = $log =~ /tsdg index "items_big_idx" merged on the GPU worker.*\n.*Shared memory segment of ([0-9]+) MB/;
ok(defined $whole_mb && $whole_mb > 1, 'the merge at 512MB makes one segment of the whole merge, of more than 1MB ('
	  . ($whole_mb // 'none') . ' MB)');
my $loads = worker_status($node, 'index_loads');
($merged, $log, $notices) = merge('items_small', '1MB');
is($merged, $load_rows, 'the merge at 1MB merges the load');
like($notices, qr/merging tsdg index "items_small_idx" does not fit into maintenance_work_mem.*in parts through shared memory within maintenance_work_mem.*HINT:  Increase maintenance_work_mem/s,
	'the merge at 1MB says it does not fit, and that its data goes to the worker in parts');
my ($bytes, $in, $what, $out) = $log =~
  /tsdg index "items_small_idx" merged on the GPU worker.*\n.*Through a shared memory segment of ([0-9]+) bytes within maintenance_work_mem, in parts of up to [0-9]+ rows: ([0-9]+) parts in \(([^)]*)\), ([0-9]+) parts out/;
ok(defined $bytes && $bytes <= $small, 'the merge at 1MB goes through a segment of at most 1MB (' . ($bytes // 'none') . ' bytes)');
ok(defined $in && $in > 1 && $out > 1, 'its data goes in more than one part each way (' . ($in // 0) . ' in, ' . ($out // 0) . ' out)');
is($what, "the new rows; the old graph is the worker's copy", "only the new rows travel: the worker holds the old graph");
like($log, qr/parts out \(the merged search lists; the worker keeps the merged k-NN lists\)/,
	'the merged k-NN lists stay with the worker: the k-NN pages are kept as they were');
is(query("SELECT knn_lag FROM tsdg_index_info('items_small_idx')"), $load_rows,
	'tsdg_index_info shows the nodes past the k-NN pages after the merge in parts');
like($log, qr/pg_tsdg GPU worker: merging $load_rows rows into the graph of $base_rows rows .*the old graph from its copy, in parts/,
	'the worker merges from its copy of the old graph');
query('SET enable_seqscan = off; SET tsdg.device = gpu;
	SELECT count(*) FROM (SELECT id FROM items_small ORDER BY v <-> (SELECT v FROM queries WHERE id = 1) LIMIT 10) a');
is(worker_status($node, 'index_loads') - $loads, 0,
	'the first search after the merge in parts ships no index: the worker kept the merged graph');
$next += $load_rows;

# 2. After deletes the worker's copy is stale: the merge at 1MB sends the old graph in parts too.
query('DELETE FROM items_big WHERE id % 10 = 3; DELETE FROM items_small WHERE id % 10 = 3;
	SET tsdg.merge_threshold = -1; VACUUM items_big, items_small');
load($next, $load_rows, 4);
($merged, $log) = merge('items_big', '512MB');
($merged, $log) = merge('items_small', '1MB');
is($merged, $load_rows, 'the merge at 1MB after deletes merges the load');
($bytes, $in, $what, $out) = $log =~
  /tsdg index "items_small_idx" merged on the GPU worker.*\n.*Through a shared memory segment of ([0-9]+) bytes within maintenance_work_mem, in parts of up to [0-9]+ rows: ([0-9]+) parts in \(([^)]*)\), ([0-9]+) parts out/;
ok(defined $bytes && $bytes <= $small, 'the merge at 1MB after deletes goes through a segment of at most 1MB');
is($what, 'the old graph and the new rows', 'the old graph travels in parts after deletes');
like($log, qr/parts out \(the merged search and k-NN lists\)/, 'the merge with deletes takes the merged k-NN lists back');
like($log, qr/nodes past the stored k-NN lists merged again/,
	'the merge with deletes merges the nodes past the stored k-NN lists again');
$next += $load_rows;
is(query("SELECT rows || '/' || deleted || '/' || pending FROM tsdg_index_info('items_small_idx')"),
	query('SELECT count(*) FROM items_small') . '/0/0', 'the index merged in parts holds every row, no deleted node, no pending row');

# 3. Both merged indexes answer alike.
query('SET max_parallel_workers_per_gather = 0;
	UPDATE queries q SET truth = ARRAY(SELECT r.id FROM items_small r ORDER BY (r.v <-> q.v) + 0 LIMIT 10)');
# at a narrow ef, where a worse graph would show
my $big = recall('items_big', 10);
my $small_recall = recall('items_small', 10);
ok(abs($big - $small_recall) <= 0.01, "recall\@10 at ef 10 merged in parts ($small_recall) within 0.01 of merged whole ($big)");
cmp_ok($small_recall, '>=', 0.9, 'recall@10 at ef 10 of the index merged in parts');
for my $device ('cpu', 'auto')
{
	is(not_found_first('items_small', $base_rows + 1, $next, $device), 0,
		"every merged row finds itself first in the index merged in parts (tsdg.device = $device)");
}
is(not_found_first('items_small', 1, $base_rows + 1, 'cpu', 7), not_found_first('items_big', 1, $base_rows + 1, 'cpu', 7),
	'the old rows (every 7th) are found first as often in both indexes');

# 4. The worker killed during a merge in parts that left the old graph to
# its copy: the session reads what it left from the pages and merges on the
# CPU (or, when the worker answered first, writes its answer), and every row
# of the load finds itself first.
ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
	'the worker is ready before the kill');
write_subspace_clusters("$dir/load.tsv", $load_rows, $dims, 50, 1, 5);
query("CREATE TEMP TABLE load (id int, v vector($dims)); COPY load FROM '$dir/load.tsv';
	INSERT INTO items_small SELECT id - 1 + $next, v FROM load");
my $worker_pid = worker_status($node, 'worker_pid');
my $from = log_position();
my ($merge_out, $merge_err) = ('', '');
my $session = IPC::Run::start(
	[ 'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
	  '-c', "SET maintenance_work_mem = '1MB'", '-c', "SELECT tsdg_merge('items_small_idx')" ],
	'>', \$merge_out, '2>', \$merge_err);
my $seen = 0;
for (1 .. 6000)
{
	last if ($seen = $node->log_contains(qr/pg_tsdg GPU worker: merging $load_rows rows .*in parts/, $from));
	usleep(10_000);
}
ok($seen, 'the worker merges the load in parts');
kill 'KILL', $worker_pid;
ok($session->finish, "the merge completes when the worker is killed: $merge_err");
is($merge_out, "$load_rows\n", 'the merge after the kill merges the load');
$log = log_since($from);
if ($log =~ /tsdg index "items_small_idx" merged on the GPU worker/)
{
	note('kill: the worker had answered, the session finished the merge without it');
}
else
{
	like($log, qr/tsdg merge of index "items_small_idx" falls back to the CPU/, 'the merge falls back to the CPU');
}
is(query("SELECT rows || '/' || pending FROM tsdg_index_info('items_small_idx')"),
	query('SELECT count(*) FROM items_small') . '/0', 'the index holds every row after the merge on the CPU');
is(not_found_first('items_small', $next, $next + $load_rows, 'cpu'), 0,
	'every row of the load finds itself first after the merge on the CPU');
is(not_found_first('items_small', 1, $next, 'cpu', 7), 0, 'the old rows (every 7th) find themselves first');

done_testing();
