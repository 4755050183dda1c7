# CREATE INDEX through the GPU worker, the session's side: the heap scan
# writes the rows into the worker's shared memory segment, which grows when
# the table's row estimate falls short; the worker computes the entry points
# after answering, and the session computes them itself when the worker dies
# first. Past maintenance_work_mem the rows go to the worker in parts through
# a segment within the setting, and the graph comes back the same way; such
# a build may be cancelled, or lose its worker, on the way. Every index built
# must find each of its rows.
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

# CREATE INDEX (or any $sql) in a session of its own: the IPC::Run handle,
# its output in $build_out and $build_err
my ($build_out, $build_err) = ('', '');
sub start_build
{
	my ($sql) = @_;
	($build_out, $build_err) = ('', '');
	return IPC::Run::start(
		[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$build_out, '2>', \$build_err);
}

# the worker's pid once it is busy (looked at every 5 ms, for 10 s at most), or ''
sub busy_worker_pid
{
	for (1 .. 2000)
	{
		my $pid = $node->safe_psql('postgres', "SELECT worker_pid FROM tsdg_gpu_status() WHERE state = 'busy'");
		return $pid if $pid ne '';
		usleep(5_000);
	}
	return '';
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
my $build = start_build('CREATE INDEX orphan_idx ON orphan USING tsdg (v vector_l2_ops) WITH (iterations = 2)');
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

# 4. Past maintenance_work_mem the session keeps the rows in temporary files
# and sends them to the worker in parts, through a segment within the
# setting, and takes the graph back the same way. Hard data (clusters, each
# on its own random 16-dim subspace), built on the worker in memory and in
# parts: on the core's CPU backend (deterministic for a seed and a thread
# count) the graphs, so the answers of the pages (a CPU search) and of the
# worker's copy, must be the same; the GPU's GNND is not deterministic, so
# there the recall must be.
my $cpu_backend = ($ENV{TSDG_WORKER_BACKEND} // 'cpu') eq 'cpu';
$node->safe_psql('postgres', 'DROP INDEX grown_cpu');
ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
	'the worker is ready again after the kill');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/hard.tsv", 12000, 32, 30, 1, 1);
write_subspace_clusters("$dir/hard_queries.tsv", 40, 32, 30, 1, 2);
$node->safe_psql('postgres', qq{
	CREATE TABLE hard (id int, v vector(32));
	CREATE TABLE hard_queries (id int, v vector(32));
	\\copy hard FROM '$dir/hard.tsv'
	\\copy hard_queries FROM '$dir/hard_queries.tsv'
	ANALYZE hard;});

# the 10 nearest rows of each query through the index on $device, or exact (no index)
sub hard_answers
{
	my ($device) = @_;
	my $scan = $device eq 'exact' ? 'SET enable_indexscan = off;' :
	  "SET enable_seqscan = off; SET tsdg.device = $device; SET tsdg.ef_search = 64;";
	return $node->safe_psql('postgres', qq{$scan
		SELECT string_agg(r.ids::text, ' ' ORDER BY q.id) FROM hard_queries q,
		LATERAL (SELECT ARRAY(SELECT h.id FROM hard h ORDER BY h.v <-> q.v LIMIT 10) AS ids) r});
}
my @truth = map { [ /(\d+)/g ] } split / /, hard_answers('exact');

# recall@10 of answers from hard_answers
sub hard_recall
{
	my ($answers) = @_;
	my @got = split / /, $answers;
	my $hits = 0;
	for my $q (0 .. $#truth)
	{
		my %want = map { $_ => 1 } @{ $truth[$q] };
		$hits += grep { $want{$_} } ($got[$q] // '') =~ /(\d+)/g;
	}
	return $hits / (10 * @truth);
}

# the answers of the build in parts against those of the build in memory
sub same_answers
{
	my ($parts, $in_memory, $what) = @_;
	if ($cpu_backend)
	{
		is($parts, $in_memory, "$what: the same answers as the build in memory");
	}
	else
	{
		cmp_ok(hard_recall($parts), '>=', hard_recall($in_memory) - 0.02,
			"$what: recall as high as the build in memory's");
	}
}

# builds hard_idx at $memory on the worker: psql's stderr and the server log's lines of it
sub build_hard
{
	my ($memory) = @_;
	$node->safe_psql('postgres', 'DROP INDEX IF EXISTS hard_idx');
	my $from = -s $node->logfile;
	my ($ret, $stdout, $stderr) = $node->psql('postgres',
		"SET maintenance_work_mem = '$memory'; SET client_min_messages = notice; CREATE INDEX hard_idx ON hard USING tsdg (v vector_l2_ops)");
	is($ret, 0, "the worker's build at maintenance_work_mem $memory succeeds");
	return ($stderr, log_since($from));
}

my ($in_memory_err, $in_memory_log) = build_hard('64MB');
unlike($in_memory_err, qr/maintenance_work_mem/, 'the build in memory raises no NOTICE');
like($in_memory_log, qr/tsdg index "hard_idx" built from.*\(into shared memory\)/, 'its rows went into one segment');
my $cpu_answers = hard_answers('cpu');
my $worker_answers = hard_answers('auto');

# Only the segment counts against the setting on the worker (the builder's
# working memory is the worker's): at 16MB the segment of these rows fits
# where the CPU build's arrays do not.
my ($segment_err, $segment_log) = build_hard('16MB');
unlike($segment_err, qr/maintenance_work_mem/, 'a build whose segment fits maintenance_work_mem raises no NOTICE');
like($segment_log, qr/tsdg index "hard_idx" built from.*\(into shared memory/, 'its rows went into one segment');
my ($cpu_ret, $cpu_out, $cpu_err) = $node->psql('postgres',
	"SET maintenance_work_mem = '16MB'; SET tsdg.device = cpu; SET client_min_messages = notice; "
	. "DROP INDEX hard_idx; CREATE INDEX hard_idx ON hard USING tsdg (v vector_l2_ops)");
like($cpu_err, qr/NOTICE:  tsdg index build no longer fits into maintenance_work_mem/,
	'where the same build on the CPU passes the setting');

my ($parts_err, $parts_log) = build_hard('1MB');
like($parts_err, qr/NOTICE:  tsdg index build no longer fits into maintenance_work_mem after \d+ tuples\nDETAIL:  .*The rows go to the GPU worker in parts through shared memory within maintenance_work_mem; the worker's own copy of them is its working memory/,
	'the NOTICE says the rows go to the worker in parts');
like($parts_log, qr/tsdg index "hard_idx" built on the GPU worker/, 'the worker built hard_idx');
my ($rows, $segment, $parts) = $parts_log =~
  /pg_tsdg GPU worker: received the (\d+) rows of index \S+ through a shared memory segment of (\d+) bytes \(parts: (\d+),/;
is($rows // 0, 12000, 'the worker received every row');
cmp_ok($parts // 0, '>=', 4, "the rows came in parts (" . ($parts // 'none') . ')');
cmp_ok($segment // 'inf', '<=', 1024 * 1024, "through a segment within maintenance_work_mem (" . ($segment // 'none') . ' bytes)');
cmp_ok(hard_recall($cpu_answers), '>=', 0.9, 'the build in memory finds the nearest rows: recall@10 ' . hard_recall($cpu_answers));
same_answers(hard_answers('cpu'), $cpu_answers, 'the pages of the build in parts');
same_answers(hard_answers('auto'), $worker_answers, "the worker's copy of the build in parts");
is(self_misses('hard', 1), 0, 'hard: every row finds itself (built on the worker in parts)');

# 5. A build in parts given up: the session cancelled while the worker works
# on it (the worker stops and lives on), and the worker killed during it
# (the session builds on the CPU from its temporary files). The cancelled
# build asks for GNND's largest lists and samples, whose joins take the CPU
# backend many seconds however fast the machine, so that the timeout finds
# the worker at work.
$node->safe_psql('postgres', 'DROP INDEX hard_idx');
my $pid = worker_status($node, 'worker_pid');
$from = -s $node->logfile;
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET maintenance_work_mem = '1MB'; SET statement_timeout = '1s'; "
	  . "CREATE INDEX hard_idx ON hard USING tsdg (v vector_l2_ops) WITH (build_k = 256, samples = 128)");
if ($ret != 0)
{
	like($stderr, qr/canceling statement due to statement timeout/, 'the build in parts is cancelled');
	ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
		'the worker is ready after the cancel');
	like(log_since($from), qr/pg_tsdg GPU worker: build for index \S+ cancelled/, 'the worker stopped the build');
	is(worker_status($node, 'worker_pid'), $pid, 'the worker lives on after the cancel');
}
else
{
	ok(!$cpu_backend, 'only the GPU builds hard_idx within a second');
	$node->safe_psql('postgres', 'DROP INDEX hard_idx');
}

$build = start_build("SET maintenance_work_mem = '1MB'; CREATE INDEX hard_idx ON hard USING tsdg (v vector_l2_ops)");
my $busy_pid = busy_worker_pid();
isnt($busy_pid, '', 'the worker took the build in parts');
kill('KILL', $busy_pid) if $busy_pid;
ok($build->finish, "CREATE INDEX completes after the worker is killed: $build_err");
# a GPU may have answered before the kill: the session then only computes the entry points
like($build_err, qr/WARNING:  tsdg index build falls back to the CPU/, 'the session built on the CPU')
  if $cpu_backend;
is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('hard_idx')"), 12000, 'hard_idx holds every row');
is(self_misses('hard', 1), 0, 'hard: every row finds itself (the worker killed during the build in parts)');
ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
	'the worker is ready again after the kill');

# 6. A build that starts while the worker is busy with another waits for it
# rather than building on the CPU in the session: the worker finishes both
# sooner. The first build asks for GNND's largest lists, so that the CPU
# backend is still at it when the second starts.
$node->safe_psql('postgres', 'DROP INDEX hard_idx');
$build = start_build('CREATE INDEX hard_idx ON hard USING tsdg (v vector_l2_ops) WITH (build_k = 256, samples = 128)');
isnt(busy_worker_pid(), '', 'the worker is busy with the first build');
$from = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE INDEX waited_idx ON grown USING tsdg (v vector_l2_ops)');
like(log_since($from), qr/tsdg index "waited_idx" built on the GPU worker/,
	'the second build waited for the worker and was built there');
ok($build->finish, "the first build completes: $build_err");
is(self_misses('grown', 0), 0, 'grown: every row finds itself (waited_idx)');

# 7. Identical rows: the session finds their groups while the worker builds
# and links each group into a ring once the graph is back, so that a query
# equal to them reaches every copy first.
$node->safe_psql('postgres', qq{
	CREATE TABLE copies (id int, v vector(16));
	INSERT INTO copies SELECT i, } . random_vector_sql(16, 'i') . qq{ FROM generate_series(1, 3000) i;
	INSERT INTO copies SELECT 3000 + i, '[2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]' FROM generate_series(1, 200) i;
	INSERT INTO copies SELECT 3200 + i, '[0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1]' FROM generate_series(1, 40) i;
	ANALYZE copies;});
$from = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE INDEX copies_idx ON copies USING tsdg (v vector_l2_ops)');
like(log_since($from), qr/tsdg index "copies_idx" built on the GPU worker/, 'the worker built copies_idx');
like(log_since($from),
	qr/tsdg index "copies_idx" built from 3240 rows.*the row pages written meanwhile.*identical rows [0-9.]+ s on threads, waited for [0-9.]+ s \(240 in 2 groups\)/,
	'the session found both groups of identical rows while the worker built');
# the worker reads the lists for its summary and its resident copy only once
# the session has linked the rings into them
like(log_since($from), qr/GPU worker: index \d+\/\d+: the session linked its rings of identical rows [0-9.]+ s after the answer/,
	'the worker waited for the rings before it read the lists again');
for my $device ('cpu', 'gpu')
{
	for my $copy (['[2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]', 200], ['[0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1]', 40])
	{
		my ($vector, $count) = @$copy;
		is($node->safe_psql('postgres', qq{SET enable_seqscan = off; SET tsdg.device = $device; SET tsdg.ef_search = 10;
			SELECT count(*) FROM (SELECT v FROM copies ORDER BY v <-> '$vector' LIMIT $count) s WHERE v = '$vector'}),
			$count, "all $count copies of $vector come first through the index ($device)");
	}
}

done_testing();
