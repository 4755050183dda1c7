# recall@10 of tsdg index scans against the exact answer (a sequential scan)
# on 50k synthetic clustered rows of 128 dimensions, at default index options
# and settings, for each operator class; and the plain plan of ORDER BY ...
# LIMIT uses the index.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $rows = 50000;
my $queries = 100;
my $min_recall = 0.95;

my $node = tsdg_node('recall');
my $tmp = PostgreSQL::Test::Utils::tempdir;
my $py = numpy_python();
my $gen = support_file('clustered_vectors.py');
system_or_bail("$py $gen $rows 128 1 > $tmp/items.tsv");
system_or_bail("$py $gen $queries 128 2 > $tmp/queries.tsv");
$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_tsdg CASCADE;
	CREATE TABLE items (id int PRIMARY KEY, v vector(128));
	CREATE TABLE queries (id int PRIMARY KEY, v vector(128));
	\\copy items FROM '$tmp/items.tsv'
	\\copy queries FROM '$tmp/queries.tsv'
	ANALYZE items;
});

for my $spec (['vector_l2_ops', '<->'], ['vector_ip_ops', '<#>'], ['vector_cosine_ops', '<=>'],
	['vector_l1_ops', '<+>'])
{
	my ($opclass, $op) = @$spec;
	my $start = time;
	$node->safe_psql('postgres', "CREATE INDEX items_idx ON items USING tsdg (v $opclass)");
	my $build_s = time - $start;

	if ($opclass eq 'vector_l2_ops')
	{
		like(
			$node->safe_psql('postgres',
				"EXPLAIN SELECT id FROM items ORDER BY v $op (SELECT v FROM queries WHERE id = 1) LIMIT 10"),
			qr/Index Scan using items_idx/,
			'ORDER BY ... LIMIT uses the index');
	}

	my $recall = $node->safe_psql('postgres', qq{
		SET enable_indexscan = off;
		CREATE TEMP TABLE truth AS
		  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.v $op q.v LIMIT 10) AS ids
		  FROM queries q;
		RESET enable_indexscan;
		SET enable_seqscan = off;
		SELECT round(avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0), 4)
		  FROM truth t JOIN queries q ON q.id = t.qid,
		  LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v $op q.v LIMIT 10) AS ids) r;
	});
	note("$opclass: recall\@10 = $recall over $queries queries (build ${build_s}s, $rows rows)");
	cmp_ok($recall, '>=', $min_recall, "$opclass recall\@10");
	$node->safe_psql('postgres', 'DROP INDEX items_idx');
}

done_testing();
