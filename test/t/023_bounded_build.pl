# CREATE INDEX and merges (tsdg_merge(), VACUUM) past maintenance_work_mem:
# a NOTICE with the hint, an index that answers as well as one built in
# memory, and a backend whose private memory stays bounded. The rows: hard data (test/support/subspace_clusters.py,
# 50 clusters, each on its own random 16-dim subspace, overlapping). The
# backend's anonymous memory (RssAnon, Linux) is sampled while each build
# runs; the bounded build's temporary files are page cache, not counted there.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $rows = 30000;
my $pending = 3000;    # of them, inserted after the builds
my $built = $rows - $pending;
my $dims = 64;
my $queries = 50;

my $node = tsdg_node('bounded_build');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/items.tsv", $rows, $dims, 50, 1, 1);
write_subspace_clusters("$dir/queries.tsv", $queries, $dims, 50, 1, 2);
$node->safe_psql(
	'postgres', qq{
	CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
	CREATE TABLE queries (id int PRIMARY KEY, v vector($dims));
	\\copy items FROM '$dir/items.tsv' WHERE id <= $built
	\\copy queries FROM '$dir/queries.tsv'
	ANALYZE items;
	CREATE TABLE truth (qid int, ids int[]);
});

# the exact answers of the queries over the table as it is
sub compute_truth
{
	$node->safe_psql(
		'postgres', q{
		SET enable_indexscan = off;
		DELETE FROM truth;
		INSERT INTO truth SELECT q.id,
			ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) FROM queries q;
	});
}
compute_truth();

# kB of anonymous memory of process $pid, or undef where /proc has no RssAnon
sub rss_anon_kb
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/status") or return undef;
	while (<$fh>)
	{
		return $1 if /^RssAnon:\s+(\d+)\s+kB/;
	}
	return undef;
}

# Runs $sql at $memory in a session of its own; returns the growth of the
# backend's anonymous memory over it at its peak (kB, or undef) and what
# psql wrote to stderr.
sub run_measured
{
	my ($memory, $sql) = @_;
	my $session = $node->background_psql('postgres');
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	# in the session, whose memory this measures (a build on the worker: 006_worker_build.pl)
	$session->query_safe(
		"SET maintenance_work_mem = '$memory'; SET tsdg.device = cpu; SET client_min_messages = notice");
	my $before = rss_anon_kb($pid);
	my $peak = $before;
	$session->{stdout} = '';
	$session->{stderr} = '';
	$session->{stdin} .= "$sql\n\\echo built\n";
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while ($session->{stdout} !~ /built/)
	{
		die "$sql at $memory did not finish: $session->{stderr}" if time() > $deadline;
		eval { $session->{run}->pump_nb; 1 }
		  or die "$sql at $memory failed: $session->{stderr}";
		my $now = rss_anon_kb($pid);
		$peak = $now if defined $now && defined $peak && $now > $peak;
		usleep(10_000);
	}
	my $stderr = $session->{stderr};
	$session->quit;
	return (defined $before ? $peak - $before : undef, $stderr);
}

sub build_index
{
	my ($memory) = @_;
	$node->safe_psql('postgres', 'DROP INDEX IF EXISTS items_v');
	return run_measured($memory, 'CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);');
}

sub recall_at_10
{
	return $node->safe_psql(
		'postgres', q{
		SET enable_seqscan = off;
		SET tsdg.ef_search = 128;
		SELECT round(avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0), 4)
		FROM truth t JOIN queries q ON q.id = t.qid,
		LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids) r;
	});
}

my ($in_memory_growth, $in_memory_stderr) = build_index('1GB');
unlike($in_memory_stderr, qr/maintenance_work_mem/, 'a build within maintenance_work_mem raises no NOTICE');
my $in_memory_recall = recall_at_10();
cmp_ok($in_memory_recall, '>=', 0.95, "recall\@10 of the build in memory: $in_memory_recall");

my ($bounded_growth, $bounded_stderr) = build_index('1MB');
like(
	$bounded_stderr,
	qr/NOTICE:  tsdg index build no longer fits into maintenance_work_mem after \d+ tuples/,
	'a build past maintenance_work_mem says so');
like($bounded_stderr, qr/HINT:  Increase maintenance_work_mem/, 'and names the setting');
unlike($bounded_stderr, qr/ERROR/, 'and does not fail');
my $bounded_recall = recall_at_10();
cmp_ok($bounded_recall, '>=', 0.95, "recall\@10 of the bounded build: $bounded_recall");
is($node->safe_psql('postgres', "SELECT count(*) FROM items WHERE id IN (SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 1))"),
	$built, 'an ordered scan of the bounded build returns every row');

SKIP:
{
	skip 'no RssAnon in /proc (not Linux)', 1 unless defined $bounded_growth;
	note "anonymous memory grown by the build: $in_memory_growth kB in memory, $bounded_growth kB bounded";
	cmp_ok($bounded_growth, '<', $in_memory_growth / 4,
		"the bounded build's private memory ($bounded_growth kB) stays well below the one in memory ($in_memory_growth kB)");
}

# merges past maintenance_work_mem: the last rows pending, merged by
# tsdg_merge(), then a tenth of the rows deleted and merged by VACUUM
$node->safe_psql(
	'postgres', qq{
	\\copy items FROM '$dir/items.tsv' WHERE id > $built
});
compute_truth();
my ($merge_growth, $merge_stderr) =
  run_measured('1MB', "SELECT tsdg_merge('items_v');");
like(
	$merge_stderr,
	qr/NOTICE:  merging tsdg index "items_v" does not fit into maintenance_work_mem/,
	'a merge past maintenance_work_mem says so');
unlike($merge_stderr, qr/ERROR/, 'and does not fail');
is($node->safe_psql('postgres', "SELECT rows || ' ' || pending FROM tsdg_index_info('items_v')"),
	"$rows 0", 'tsdg_merge() merged every pending row');
my $merged_recall = recall_at_10();
cmp_ok($merged_recall, '>=', 0.95, "recall\@10 after the bounded merge: $merged_recall");

$node->safe_psql('postgres', "DELETE FROM items WHERE id % 10 = 1");
my $deleted = $rows / 10;    # ids 1 .. $rows
my ($vacuum_growth, $vacuum_stderr) = run_measured('1MB',
	"SET tsdg.merge_threshold = 0; SET tsdg.merge_scale_factor = 0; VACUUM items;");
unlike($vacuum_stderr, qr/WARNING|ERROR/, 'VACUUM merges past maintenance_work_mem');
is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('items_v')"),
	$rows - $deleted, 'the deleted rows are dropped from the graph');
compute_truth();
my $vacuumed_recall = recall_at_10();
cmp_ok($vacuumed_recall, '>=', 0.95, "recall\@10 after the bounded VACUUM merge: $vacuumed_recall");
SKIP:
{
	skip 'no RssAnon in /proc (not Linux)', 1 unless defined $merge_growth;
	note "anonymous memory grown by the merges: $merge_growth kB (tsdg_merge), $vacuum_growth kB (VACUUM)";
	cmp_ok($merge_growth, '<', $in_memory_growth / 4,
		"the bounded merge's private memory ($merge_growth kB) stays well below the build's in memory ($in_memory_growth kB)");
}

$node->stop;
done_testing();
