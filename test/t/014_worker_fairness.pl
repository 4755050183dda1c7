# One user cannot stall the GPU worker for the others. A huge batch search
# (40,000 queries at ef 1000, which holds a CPU worker far longer than the
# test takes) runs in one session; meanwhile another session's index
# scans, which wait for the worker without a time limit here, and another
# client's small batch must be answered by the worker while the huge batch
# is still running.
# pg_cancel_backend of the huge batch must stop the worker's work on it. A
# role that is not a superuser cannot raise the caps on what the worker
# takes (tsdg.worker_max_ef_search, tsdg.worker_max_k), and its searches
# above them run in its own session.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $node = worker_node('worker_fairness');
wait_for_worker($node);

my $dims = 32;
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/items.tsv", 20000, $dims, 50, 1, 1);
write_subspace_clusters("$dir/queries.tsv", 4000, $dims, 50, 1, 2);
$node->safe_psql('postgres', qq{
	CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
	CREATE TABLE queries (id int PRIMARY KEY, v vector($dims));
	\\copy items FROM '$dir/items.tsv'
	\\copy queries FROM '$dir/queries.tsv'
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
	CREATE ROLE plain LOGIN;
	GRANT SELECT ON items, queries TO plain;
});
# the worker holds the index once it answered a batch on it
$node->safe_psql('postgres',
	q{SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id <= 10), 10)});
$node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()")
  or die 'the worker did not become ready';

# Sections 1 to 4 need a worker that a huge batch holds for seconds: the
# CPU backend's. A GPU answers it before the other sessions ask.
my ($found, $batches, $log_from);
my $cpu_backend = ($ENV{TSDG_WORKER_BACKEND} // 'cpu') eq 'cpu';
if ($cpu_backend)
{
	# 1. The huge batch, in a session of its own.
	my ($big_out, $big_err) = ('', '');
	my $big = IPC::Run::start(
		[
			'psql', '-X', '-d', $node->connstr('postgres'),
			'-c', q{SET application_name = 'huge_batch'},
			'-c', q{SET tsdg.ef_search = 1000},
			'-c', q{SELECT count(*) FROM tsdg_search_batch('items_v',
				(SELECT array_agg(v ORDER BY round, id) FROM queries, generate_series(1, 10) AS round), 100)}
		],
		'>', \$big_out, '2>', \$big_err);
	# it waits on the worker (its batch queued or running), not on the CPU
	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) = 1 FROM pg_stat_activity
			  WHERE application_name = 'huge_batch' AND wait_event_type = 'Extension'}),
		'the huge batch waits for the worker');
	my $big_pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'huge_batch'});
	# the worker has taken it by now
	usleep(500_000);

	# the huge batch's session still waits for the worker's answer
	my $huge_batch_running = sub {
		return $node->safe_psql('postgres',
			qq{SELECT count(*) FROM pg_stat_activity
			   WHERE pid = $big_pid AND state = 'active' AND wait_event_type = 'Extension'}) eq '1';
	};

	ok($huge_batch_running->(), 'the huge batch is running');

	# 2. Index scans of another session, which wait for the worker as long as it
	# takes: without a fair worker they end only after the huge batch.
	my $fallbacks = worker_status($node, 'fallbacks');
	$batches = worker_status($node, 'batches');
	$found = $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SET tsdg.worker_timeout_ms = '1h';
		SELECT count(*) FROM queries q,
		  LATERAL (SELECT id FROM items i ORDER BY i.v <-> q.v LIMIT 10) n
		WHERE q.id BETWEEN 101 AND 120;});
	is($found, '200', 'the index scans found 10 rows each');
	ok($huge_batch_running->(), 'the index scans completed while the huge batch was still running');
	cmp_ok(worker_status($node, 'batches'), '>=', $batches + 20, 'the worker answered the index scans');
	is(worker_status($node, 'fallbacks'), $fallbacks, 'no index scan fell back to the CPU');

	# 3. A small batch of another client.
	my $small = $node->safe_psql('postgres',
		q{SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id BETWEEN 201 AND 210), 10)});
	is($small, '100', 'the small batch found 10 rows a query');
	ok($huge_batch_running->(), 'the small batch completed while the huge batch was still running');
	is(worker_status($node, 'fallbacks'), $fallbacks, 'the small batch did not fall back to the CPU');

	# 4. pg_cancel_backend of the huge batch frees the worker.
	$log_from = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($big_pid)");
	$big->finish;
	like($big_err, qr/canceling statement due to user request/, 'the huge batch is cancelled');
	my $dropped = 0;
	for (my $i = 0; $i < 600 && !$dropped; $i++)
	{
		$dropped = slurp_file($node->logfile, $log_from) =~
		  /dropped a batch of 40000 queries after \d+ of them: its session gave it up/;
		usleep(100_000) unless $dropped;
	}
	ok($dropped, 'the worker dropped the cancelled batch');
	unlike(slurp_file($node->logfile, $log_from), qr/searched a batch of 40000 queries/,
		'the worker did not search the cancelled batch to its end');
}

# 5. The caps: a role that is not a superuser cannot raise them, and its
# searches above them are not sent to the worker.
my ($out, $err) = ('', '');
$node->psql('postgres', q{SET ROLE plain; SET tsdg.worker_max_ef_search = 100000;},
	stdout => \$out, stderr => \$err);
like($err, qr/permission denied to set parameter "tsdg.worker_max_ef_search"/,
	'a plain role cannot raise tsdg.worker_max_ef_search');
$node->psql('postgres', q{SET ROLE plain; SET tsdg.worker_max_k = 100000;},
	stdout => \$out, stderr => \$err);
like($err, qr/permission denied to set parameter "tsdg.worker_max_k"/,
	'a plain role cannot raise tsdg.worker_max_k');

$node->safe_psql('postgres', q{ALTER SYSTEM SET tsdg.worker_max_ef_search = 500; SELECT pg_reload_conf();});
$node->poll_query_until('postgres', q{SELECT current_setting('tsdg.worker_max_ef_search') = '500'});
$batches = worker_status($node, 'batches');
$log_from = -s $node->logfile;
$found = $node->safe_psql('postgres', q{
	SET ROLE plain;
	SET enable_seqscan = off;
	SET tsdg.ef_search = 1000;
	SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 300) LIMIT 10) n;
	SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id BETWEEN 301 AND 303), 10);});
is($found, "10\n30", 'the searches above the caps found their rows');
is(worker_status($node, 'batches'), $batches, 'no search above the caps went to the worker');
like(slurp_file($node->logfile, $log_from),
	qr/a search too wide for the shared GPU worker runs on the CPU: ef 1000 is above tsdg.worker_max_ef_search \(500\)/,
	'the session says why it searched on the CPU');
$node->safe_psql('postgres', q{ALTER SYSTEM SET tsdg.worker_max_k = 10; SELECT pg_reload_conf();});
$node->poll_query_until('postgres', q{SELECT current_setting('tsdg.worker_max_k') = '10'});
$log_from = -s $node->logfile;
$found = $node->safe_psql('postgres', q{
	SET ROLE plain;
	SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id BETWEEN 301 AND 303), 11);});
is($found, '33', 'a batch above tsdg.worker_max_k found its rows');
like(slurp_file($node->logfile, $log_from), qr/k 11 is above tsdg.worker_max_k \(10\)/,
	'the batch above tsdg.worker_max_k ran in the session');

$node->stop;
done_testing();
