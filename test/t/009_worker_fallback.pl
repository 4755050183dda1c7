# Faults of the GPU worker. The worker process that owns the device is killed
# with SIGKILL while sessions search and while it builds an index; sessions
# terminated while they wait leave no request behind. Every query must still
# return the right rows (searched on the CPU when the worker is gone), the
# build must finish on the CPU with a WARNING, the cluster must not go
# through crash recovery (no session is disconnected) and the supervisor must
# start a new worker.
#
# Without a GPU the worker runs the core's CPU backend, which goes through
# the same slots, DSM segments and restarts. With TSDG_WORKER_BACKEND=cuda,
# TSDG_BIG_ROWS (default 20000) should be large enough (a million) that the
# GPU build lasts long enough to be killed.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use TsdgTest;

my $node = worker_node('worker_fallback', 'max_connections = 40', 'maintenance_work_mem = 2GB');
wait_for_worker($node);
note('worker ready on ' . worker_status($node, 'device') . ', pid ' . worker_status($node, 'worker_pid'));

sub wait_ready
{
	my ($when) = @_;
	ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
		"the worker is ready $when");
}

my $random16 = random_vector_sql(16, 'i');
$node->safe_psql('postgres', qq{
	SELECT setseed(0.25);
	CREATE TABLE items (id int, v vector(16));
	INSERT INTO items SELECT i, $random16 FROM generate_series(1, 5000) i;
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
	CREATE TABLE queries (qid int, v vector(16), truth int[]);
	INSERT INTO queries SELECT i, $random16 FROM generate_series(1, 20) i;
	UPDATE queries q SET truth = ARRAY(SELECT id FROM items i ORDER BY i.v <-> q.v LIMIT 10);
} . q{
	-- raises unless the index scan finds at least 9 of the exact 10
	CREATE FUNCTION check_query(q int) RETURNS int LANGUAGE plpgsql
	  SET enable_seqscan = off SET tsdg.ef_search = 200 AS $$
	DECLARE got int[]; want int[]; hits int;
	BEGIN
	  SELECT truth INTO want FROM queries WHERE qid = q;
	  got := ARRAY(SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE qid = q) LIMIT 10);
	  SELECT count(*) INTO hits FROM unnest(got) g WHERE g = ANY (want);
	  IF hits < 9 THEN
	    RAISE EXCEPTION 'query %: % of the 10 nearest rows', q, hits;
	  END IF;
	  RETURN hits;
	END $$;
	-- the worker's pid once it is busy (polled every millisecond, for 20 s at most)
	CREATE FUNCTION busy_worker_pid() RETURNS int LANGUAGE plpgsql AS $$
	DECLARE pid int;
	BEGIN
	  FOR i IN 1..20000 LOOP
	    SELECT worker_pid INTO pid FROM tsdg_gpu_status() WHERE state = 'busy';
	    EXIT WHEN pid IS NOT NULL;
	    PERFORM pg_sleep(0.001);
	  END LOOP;
	  RETURN pid;
	END $$;
});
cmp_ok(worker_status($node, 'builds'), '>=', 1, 'CREATE INDEX built on the worker');

sub check_queries
{
	my ($when) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		'SELECT sum(check_query(q)) FROM generate_series(1, 20) q');
	is($ret, 0, "every query finds its nearest rows $when: $err");
}
check_queries('before the faults');
cmp_ok(worker_status($node, 'batches'), '>=', 20, 'the searches went to the worker');

my $script = PostgreSQL::Test::Utils::tempdir . '/check.sql';
PostgreSQL::Test::Utils::append_to_file($script, "\\set qid random(1, 20)\nSELECT check_query(:qid);\n");

# pgbench in the background: $clients sessions for $seconds running check.sql
sub start_pgbench
{
	my ($clients, $seconds, $out) = @_;
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', $clients, '-j', 2, '-T', $seconds, '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>&', $out);
}

# ---- SIGKILL while 4 sessions search ----
my $fallbacks_before = worker_status($node, 'fallbacks');
my $old_pid = worker_status($node, 'worker_pid');
my $bench_out = '';
my $bench = start_pgbench(4, 6, \$bench_out);
sleep 2;
kill 'KILL', $old_pid;
ok($bench->finish, "no session failed or got a wrong answer when the worker was killed: $bench_out");
note($bench_out =~ /(number of transactions actually processed.*)/);
wait_ready('after the kill');
isnt(worker_status($node, 'worker_pid'), $old_pid, 'the worker was restarted');
ok($node->log_contains("pg_tsdg GPU worker \\(PID $old_pid\\) was terminated by signal 9"),
	'a LOG line for the killed worker');
ok(!$node->log_contains('terminating any other active server processes'),
	'the kill did not go through crash recovery');
cmp_ok(worker_status($node, 'fallbacks'), '>', $fallbacks_before, 'the fallback was counted');
check_queries('after the restart');

# ---- SIGKILL during CREATE INDEX: the build finishes on the CPU ----
my $big_rows = $ENV{TSDG_BIG_ROWS} // 20000;
$node->safe_psql('postgres', qq{
	SELECT setseed(0.75);
	CREATE TABLE big (id int, v vector(8));
	INSERT INTO big SELECT i, } . random_vector_sql(8, 'i') . qq{ FROM generate_series(1, $big_rows) i;
});
my ($build_out, $build_err) = ('', '');
my $build = IPC::Run::start(
	[
		'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		'-c', 'CREATE INDEX big_idx ON big USING tsdg (v vector_l2_ops)'
	],
	'>', \$build_out, '2>', \$build_err);
my $build_pid = $node->safe_psql('postgres', 'SELECT busy_worker_pid()');
isnt($build_pid, '', 'the worker started the build');
kill 'KILL', $build_pid if $build_pid;
ok($build->finish, "CREATE INDEX completes after the worker is killed: $build_err");
like($build_err, qr/WARNING:  tsdg index build falls back to the CPU/, 'a WARNING says the build went on on the CPU');
# rows used as queries must find themselves (distance 0) among their 10 nearest
my ($found, $probes) = split /\|/, $node->safe_psql('postgres', qq{
	SET enable_seqscan = off;
	SELECT count(*) FILTER (WHERE q.id = ANY (ARRAY(SELECT id FROM big ORDER BY v <-> q.v LIMIT 10))), count(*)
	FROM (SELECT id, v FROM big WHERE id % ($big_rows / 200) = 1) q;
});
cmp_ok(100 * $found, '>=', 95 * $probes, "the CPU-built index finds $found of $probes probe rows");
wait_ready('after the kill during the build');

# ---- sessions terminated while they wait leave no request behind ----
$bench = start_pgbench(6, 4, \$bench_out);
Time::HiRes::usleep(1_500_000);
$node->safe_psql('postgres',
	"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
$bench->finish;
Time::HiRes::usleep(500_000);
is(worker_status($node, 'queue_depth'), 0, 'terminated sessions left no request queued');
my $batches = worker_status($node, 'batches');
check_queries('after terminations');
cmp_ok(worker_status($node, 'batches'), '>', $batches, 'the worker answers after sessions were terminated');

done_testing();
