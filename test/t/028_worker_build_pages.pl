# CREATE INDEX through the GPU worker writes the k-NN pages and the list
# pages while the worker still computes: the k-NN pages once its k-NN lists
# are final in the shared memory segment (it then diversifies), in their
# place after the list pages' blocks, and the list pages once its search
# lists are there (it then checks the graph, changing a few of them, and the
# pages of those are written again after its answer). Two tables of the
# same hard rows (clusters, each on its own random 16-dim subspace,
# overlapping), loaded alike so that their heap TIDs are the same: one index
# built in one segment (pages written meanwhile), one in parts (its lists
# come back with the graph, so every page is written after). On the core's
# CPU backend, whose graphs are the same for a seed and a thread count, both
# indexes hold the same pages; on a GPU, whose GNND is not deterministic,
# their recall must be as high. The index whose pages were written
# meanwhile answers as an exact scan does, and a merge in the session, which
# reads its k-NN pages for GGM, gives right answers too.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 32;
my $base_rows = 12000;
my $load_rows = 1500;
my $cpu_backend = ($ENV{TSDG_WORKER_BACKEND} // 'cpu') eq 'cpu';
my $node = worker_node('worker_build_pages');
wait_for_worker($node);
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;

sub query { return $node->safe_psql('postgres', $_[0]); }

write_subspace_clusters("$dir/rows.tsv", $base_rows, $dims, 30, 1, 1);
write_subspace_clusters("$dir/load.tsv", $load_rows, $dims, 30, 1, 3);
write_subspace_clusters("$dir/queries.tsv", 40, $dims, 30, 1, 2);
query(qq{
	CREATE EXTENSION pageinspect;
	CREATE TABLE early (id int, v vector($dims));
	CREATE TABLE late (id int, v vector($dims));
	CREATE TABLE queries (id int, v vector($dims));
	\\copy early FROM '$dir/rows.tsv'
	\\copy late FROM '$dir/rows.tsv'
	\\copy queries FROM '$dir/queries.tsv'
	ANALYZE early; ANALYZE late;});
is(query("SELECT count(*) FROM early e JOIN late l ON e.ctid = l.ctid AND e.id = l.id"), $base_rows,
	'both tables hold each row at the same TID');

# builds $index on $table at maintenance_work_mem $memory: the build's LOG line
sub build
{
	my ($table, $index, $memory) = @_;
	my $from = -s $node->logfile;
	query("SET maintenance_work_mem = '$memory'; SET client_min_messages = warning;
		CREATE INDEX $index ON $table USING tsdg (v vector_l2_ops)");
	my $log = slurp_file($node->logfile, $from);
	like($log, qr/tsdg index "$index" built on the GPU worker/, "the worker built $index");
	my ($line) = $log =~ /(tsdg index "$index" built from .*)/;
	return $line // 'no LOG line';
}

# every page of $index but the metapage, without the page headers (their
# LSNs differ from one build to the next): a digest
sub pages_digest
{
	my ($index) = @_;
	return query("SELECT count(*) || ' ' || md5(string_agg(substr(get_raw_page('$index', b::int), 25), ''::bytea ORDER BY b))
		FROM generate_series(1, pg_relation_size('$index') / current_setting('block_size')::int - 1) b");
}

# the 10 nearest rows of each query through the index (exact: none)
sub answers
{
	my ($table, $exact) = @_;
	my $scan = $exact ? 'SET enable_indexscan = off;' :
	  'SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 64;';
	return query(qq{$scan
		SELECT string_agg(r.ids::text, ' ' ORDER BY q.id) FROM queries q,
		LATERAL (SELECT ARRAY(SELECT t.id FROM $table t ORDER BY t.v <-> q.v LIMIT 10) AS ids) r});
}

# recall@10 of answers against exact ones
sub recall
{
	my ($got, $truth) = @_;
	my @got = split / /, $got;
	my @truth = split / /, $truth;
	my $hits = 0;
	for my $q (0 .. $#truth)
	{
		my %want = map { $_ => 1 } $truth[$q] =~ /(\d+)/g;
		$hits += grep { $want{$_} } ($got[$q] // '') =~ /(\d+)/g;
	}
	return $hits / (10 * @truth);
}

# rows of $table with an id in [$lo, $hi), every $every-th, that do not find
# themselves first through the index, searched widely enough that a miss
# means a wrong page
sub self_misses
{
	my ($table, $lo, $hi, $every) = @_;
	return query("SET enable_seqscan = off; SET tsdg.device = cpu; SET tsdg.ef_search = 200;
		SELECT count(*) FROM (SELECT id, v FROM $table WHERE id >= $lo AND id < $hi AND id % $every = 0) p
		WHERE (SELECT t.id FROM $table t ORDER BY t.v <-> p.v LIMIT 1) <> p.id");
}

# 1. In one segment: the row pages, then the k-NN pages, while the worker builds.
my $early = build('early', 'early_idx', '64MB');
like($early, qr/\(into shared memory\)/, 'early_idx: the rows went into one segment');
like($early, qr/graph [0-9.]+ s \(the row pages written meanwhile in [0-9.]+ s, the k-NN pages meanwhile in [0-9.]+ s, \d+ list pages meanwhile in [0-9.]+ s\)/,
	'early_idx: the k-NN pages and the list pages were written while the worker built the graph');
like($early, qr/, list pages [0-9.]+ s \(\d+ of \d+: changed since or left\),/,
	'early_idx: only list pages changed since or left were written after the graph');

# 2. In parts: every page after the graph.
my $late = build('late', 'late_idx', '1MB');
like($late, qr/\(into temporary files, for the GPU worker in parts\)/, 'late_idx: the rows went to the worker in parts');
like($late, qr/, list and k-NN pages [0-9.]+ s,/, 'late_idx: the list and k-NN pages were written after the graph');
unlike($late, qr/k-NN pages meanwhile/, 'late_idx: no k-NN page was written meanwhile');

is(query("SELECT knn_lag FROM tsdg_index_info('early_idx')"), 0, 'early_idx: every node has its k-NN list in the pages');
my $truth = answers('early', 1);
my $early_answers = answers('early', 0);
cmp_ok(recall($early_answers, $truth), '>=', 0.9, 'early_idx finds the nearest rows: recall@10 ' . recall($early_answers, $truth));
is(self_misses('early', 1, $base_rows + 1, 60), 0, 'early_idx: every 60th row finds itself');
if ($cpu_backend)
{
	is(pages_digest('early_idx'), pages_digest('late_idx'),
		'the pages written meanwhile are those the build in parts wrote after the graph');
}
else
{
	cmp_ok(recall($early_answers, $truth), '>=', recall(answers('late', 0), $truth) - 0.02,
		'the build whose k-NN pages were written meanwhile finds as many nearest rows as the build in parts');
}

# 3. A merge in the session reads the k-NN pages for GGM: the merged index
# answers as an exact scan does, its new rows found first.
query(qq{CREATE TABLE load (id int, v vector($dims));
	\\copy load FROM '$dir/load.tsv'
	INSERT INTO early SELECT $base_rows + id, v FROM load;});
my $from = -s $node->logfile;
is(query("SET tsdg.device = cpu; SELECT tsdg_merge('early_idx')"), $load_rows, 'the session merges the new rows');
unlike(slurp_file($node->logfile, $from), qr/merged on the GPU worker/, 'the merge ran in the session');
$truth = answers('early', 1);
my $merged = answers('early', 0);
cmp_ok(recall($merged, $truth), '>=', 0.9, 'the merged index finds the nearest rows: recall@10 ' . recall($merged, $truth));
is(self_misses('early', $base_rows + 1, $base_rows + $load_rows + 1, 5), 0, 'every 5th merged row finds itself');

done_testing();
