# recall@10 through SQL on hard data: 50k rows in 100 clusters, each on its
# own random 16-dim subspace (test/support/subspace_clusters.py), overlapping
# (spread 1) and well separated (spread 4). CREATE INDEX at default options,
# ORDER BY ... LIMIT 10 against the exact answer of a sequential scan: some
# tsdg.ef_search <= 256 must reach recall 0.99.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use TsdgTest;
use Test::More;

my $rows = 50000;
my $dims = 64;
my $queries = 100;

my $node = PostgreSQL::Test::Cluster->new('hard_recall');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;

for my $spread (1, 4)
{
	write_subspace_clusters("$dir/items.tsv", $rows, $dims, 100, $spread, 1);
	write_subspace_clusters("$dir/queries.tsv", $queries, $dims, 100, $spread, 2);
	$node->safe_psql(
		'postgres', qq{
		DROP TABLE IF EXISTS items, queries, truth;
		CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
		CREATE TABLE queries (id int PRIMARY KEY, v vector($dims));
		\\copy items FROM '$dir/items.tsv'
		\\copy queries FROM '$dir/queries.tsv'
		ANALYZE items;
		SET enable_indexscan = off;
		CREATE TABLE truth AS SELECT q.id AS qid,
			ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids FROM queries q;
		CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
	});
	my $best = 0;
	my @curve;
	for my $ef (64, 128, 256)
	{
		my $recall = $node->safe_psql(
			'postgres', qq{
			SET enable_seqscan = off;
			SET tsdg.ef_search = $ef;
			SELECT round(avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0), 4)
			FROM truth t JOIN queries q ON q.id = t.qid,
			LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids) r;
		});
		push @curve, "ef $ef: $recall";
		$best = $recall if $recall > $best;
	}
	cmp_ok($best, '>=', 0.99,
		"spread $spread: recall\@10 reaches 0.99 at some ef <= 256 (" . join(', ', @curve) . ')');
}

$node->stop;
done_testing();
