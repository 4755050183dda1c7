# CREATE INDEX through the GPU worker, the session's side: the heap scan
# writes the rows into the worker's shared memory segment, which grows when
# the table's row estimate falls short; the worker computes the entry points
# after answering, and the session computes them itself when the worker dies
# first. Every index built must find each of its rows.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $node = worker_node('worker_build');
wait_for_worker($node);

sub log_since
{
	my ($offset) = @_;
	return slurp_file($node->logfile, $offset);
}

# How many of 200 rows of $table do not find themselves first through index
# scans: the first 200, or with $spread 200 spread over the table (over all
# its row pages, written while the worker built the graph), searched widely
# enough that a miss means a wrong row or list page rather than a greedy
# search that stopped short.
sub self_misses
{
	my ($table, $spread) = @_;
	my $sample = 'ORDER BY id';
	my $ef = '';
	if ($spread)
	{
		$sample = "WHERE id % GREATEST(1, (SELECT count(*) FROM $table) / 200) = 0 ORDER BY id";
		$ef = 'SET tsdg.ef_search = 200;';
	}
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET tsdg.device = cpu; $ef
		SELECT count(*) FROM (SELECT id, v FROM $table $sample LIMIT 200) p
		WHERE (SELECT t.id FROM $table t ORDER BY t.v <-> p.v LIMIT 1) <> p.id});
}

# 1. The estimate falls short: ANALYZE sees 300 wide rows (about 6 a page),
# which are deleted, and 6000 narrow rows are added without a new ANALYZE, so
# the planner's density says a few hundred rows where the scan finds 6000.
$node->safe_psql('postgres', q{
	SELECT setseed(0.25);
	CREATE TABLE grown (id int, pad text, v vector(16));
	ALTER TABLE grown ALTER COLUMN pad SET STORAGE PLAIN;
	INSERT INTO grown SELECT -i, (SELECT string_agg(md5(random()::text || j), '') FROM generate_series(1, 40) j WHERE i > 0),
	  '[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]' FROM generate_series(1, 300) i;
	ANALYZE grown;
	DELETE FROM grown;
} . 'INSERT INTO grown SELECT i, NULL, ' . random_vector_sql(16, 'i') . ' FROM generate_series(1, 6000) i');
my $from = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE INDEX grown_idx ON grown USING tsdg (v vector_l2_ops)');
my ($line) = log_since($from) =~ /(tsdg index "grown_idx" built from.*)/;
like($line // 'no LOG line', qr/into shared memory, grown \d+ times/,
	'the build grew its shared memory segment');
like(log_since($from), qr/tsdg index "grown_idx" built on the GPU worker/,
	'the worker built grown_idx');
is($node->safe_psql('postgres', "SELECT entry_points > 0 FROM tsdg_index_info('grown_idx')"),
	't', 'grown_idx has entry points');
is(self_misses('grown', 1), 0, 'grown: every row finds itself (segment grown during the heap scan)');

# 2. The worker dies after answering the build, while it computes the entry
# points (about a second for this table on a CPU worker): the session
# computes them itself and the index is complete.
$node->safe_psql('postgres', q{SELECT setseed(0.5);
	CREATE TABLE orphan (id int, v vector(32));
	INSERT INTO orphan SELECT i, } . random_vector_sql(32, 'i') . q{ FROM generate_series(1, 60000) i;
	ANALYZE orphan;});
$from = -s $node->logfile;
my ($build_out, $build_err) = ('', '');
my $build = IPC::Run::start(
	[
		'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c',
		'CREATE INDEX orphan_idx ON orphan USING tsdg (v vector_l2_ops) WITH (iterations = 2)'
	],
	'>', \$build_out, '2>', \$build_err);
my $killed = 0;
for (1 .. 6000)
{
	if (log_since($from) =~ /pg_tsdg GPU worker: built the graph of index/)
	{
		my $pid = worker_status($node, 'worker_pid');
		$killed = kill('KILL', $pid) if $pid;
		last;
	}
	usleep(10_000);
}
ok($build->finish, "CREATE INDEX completes after the worker is killed: $build_err");
ok($killed, 'the worker was seen building orphan_idx and killed');
my $log = log_since($from);
if ($log =~ /tsdg index "orphan_idx": the GPU worker did not compute the entry points/)
{
	note('orphan: the session computed the entry points after the worker died');
}
else
{
	like($log, qr/entry points and statistics of index/,
		'the worker finished the entry points before it was killed (the kill came late)');
}
is($node->safe_psql('postgres', "SELECT entry_points > 0 FROM tsdg_index_info('orphan_idx')"),
	't', 'orphan_idx has entry points');
is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('orphan_idx')"),
	60000, 'orphan_idx holds every row');
# a graph of 2 GNND iterations over uniform 32-dimensional rows: a greedy
# search misses about one row in 200 of it on the GPU
cmp_ok(self_misses('orphan', 0), '<=', 3, 'orphan: the rows find themselves (worker killed after answering)');

# 3. The CPU path of the same table: no shared memory, the same answers.
$from = -s $node->logfile;
$node->safe_psql('postgres', 'SET tsdg.device = cpu; CREATE INDEX grown_cpu ON grown USING tsdg (v vector_l2_ops)');
unlike(join("\n", log_since($from) =~ /(tsdg index "grown_cpu" built from.*)/g),
	qr/shared memory/, 'a tsdg.device = cpu build uses no shared memory of the worker');
$node->safe_psql('postgres', 'DROP INDEX grown_idx');
is(self_misses('grown', 1), 0, 'grown: every row finds itself (built on the CPU)');

# 4. Past maintenance_work_mem the rows go on into the worker's segment, the
# NOTICE says so, and the worker builds: once the worker killed in 2 is back.
$node->safe_psql('postgres', 'DROP INDEX grown_cpu');
ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
	'the worker is ready again after the kill');
$from = -s $node->logfile;
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET maintenance_work_mem = '1MB'; SET client_min_messages = notice; CREATE INDEX grown_small ON grown USING tsdg (v vector_l2_ops)");
is($ret, 0, 'a build on the worker past maintenance_work_mem succeeds');
like($stderr, qr/NOTICE:  tsdg index build no longer fits into maintenance_work_mem after \d+ tuples\nDETAIL:  The rows go on into the shared memory segment the GPU worker reads/,
	'the NOTICE says the rows go on into the worker\'s segment');
like(log_since($from), qr/tsdg index "grown_small" built on the GPU worker/, 'the worker built grown_small');
is(self_misses('grown', 1), 0, 'grown: every row finds itself (built on the worker past maintenance_work_mem)');

done_testing();
