# The navigating layer in an index's pages, on a server with the GPU worker
# (its CPU backend: builds, merges and batch searches on the worker) and on
# one without it (the sessions build, merge and search): an index built below
# TSDG_LAYER_MIN_NODES rows has no layer, a merge that takes it past that
# gets one, a merge that drops deleted nodes (and renumbers the rows) builds
# it again, and CREATE INDEX of as many rows has one (the merge past 16384
# rows and one build past maintenance_work_mem: on the worker in parts, else
# with the arrays in temporary files); each time layer_nodes
# is ceil(rows / 16), and index scans and batch searches (whose resident
# indexes search through the layer) find the exact ten nearest rows at
# recall >= 0.95 at tsdg.ef_search 40. After a crash the layer reads back
# the same.
use strict;
use warnings FATAL => 'all';
use POSIX qw(ceil);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 16;
my $min_recall = 0.95;

# loads rows [$first, $first + $count) of the data drawn with $seed into $table
sub load
{
	my ($node, $table, $first, $count, $seed) = @_;
	copy_clustered_rows($node, $table, $first, $count, $dims, $seed);
}

# recall@10 of the index scans and of tsdg_search_batch against truth
sub recalls
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SET enable_indexscan = off;
		SET enable_bitmapscan = off;
		CREATE TEMP TABLE truth AS
		  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids
		  FROM queries q;
		RESET enable_indexscan;
		SET enable_seqscan = off;
		SET tsdg.ef_search = 40;
		SELECT round(avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0), 4)
		  FROM truth t JOIN queries q ON q.id = t.qid,
		  LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids) r;
		SELECT round(avg((SELECT count(*) FROM unnest(b.ids) x WHERE x = ANY(t.ids)) / 10.0), 4)
		  FROM truth t,
		  LATERAL (SELECT array_agg(i.id) AS ids
		           FROM tsdg_search_batch('items_idx', ARRAY(SELECT v FROM queries ORDER BY id), 10) s
		           JOIN items i ON i.ctid = s.tid WHERE s.query = t.qid) b;
		DROP TABLE truth;
	});
}

# layer_nodes is ceil(rows / 16) from 16384 rows on, the answers are right
sub check_layer
{
	my ($node, $when) = @_;
	my ($rows, $layer) = split /\|/,
	  $node->safe_psql('postgres', "SELECT rows, layer_nodes FROM tsdg_index_info('items_idx')");
	my $expected = $rows >= 16384 ? ceil($rows / 16) : 0;
	is($layer, $expected, "$when: layer_nodes of $rows rows");
	my ($scan, $batch) = split /\n/, recalls($node);
	note("$when: recall\@10 of the scans $scan, of the batch $batch");
	cmp_ok($scan, '>=', $min_recall, "$when: recall\@10 of the index scans");
	cmp_ok($batch, '>=', $min_recall, "$when: recall\@10 of tsdg_search_batch");
	return $layer;
}

sub run_on
{
	my ($node, $what) = @_;
	$node->safe_psql('postgres', qq{
		CREATE EXTENSION IF NOT EXISTS pg_tsdg CASCADE;
		CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
		CREATE TABLE queries (id int PRIMARY KEY, v vector($dims));
	});
	load($node, 'items', 1, 15000, 1);
	load($node, 'queries', 1, 40, 2);
	$node->safe_psql('postgres', 'CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops)');
	check_layer($node, "$what, built below 16384 rows");

	# past maintenance_work_mem: through the worker in parts, else spilled
	load($node, 'items', 15001, 3000, 3);
	$node->safe_psql('postgres', "SET maintenance_work_mem = '1MB'; SET client_min_messages = warning;
		SELECT tsdg_merge('items_idx')");
	check_layer($node, "$what, merged past 16384 rows");

	$node->safe_psql('postgres', 'DELETE FROM items WHERE id % 10 = 0');
	load($node, 'items', 18001, 500, 4);
	$node->safe_psql('postgres', 'SET tsdg.merge_threshold = -1; VACUUM items');
	$node->safe_psql('postgres', "SELECT tsdg_merge('items_idx')");
	is($node->safe_psql('postgres', "SELECT deleted FROM tsdg_index_info('items_idx')"),
		0, "$what: the merge dropped the deleted nodes");
	my $layer = check_layer($node, "$what, merged with renumbered rows");

	$node->stop('immediate');
	$node->start;
	is(check_layer($node, "$what, after a crash"), $layer, "$what: the layer survives a crash");

	$node->safe_psql('postgres', 'REINDEX INDEX items_idx');
	check_layer($node, "$what, built from 16384 rows on");
	$node->safe_psql('postgres', "SET maintenance_work_mem = '1MB'; SET client_min_messages = warning;
		REINDEX INDEX items_idx");
	check_layer($node, "$what, built from 16384 rows on past maintenance_work_mem");
}

my $worker = worker_node('layer_worker', "maintenance_work_mem = '256MB'");
wait_for_worker($worker);
run_on($worker, 'with the worker');
like(worker_status($worker, 'builds'), qr/^[1-9]/, 'the worker built the indexes');
$worker->stop;

{
	local $ENV{TSDG_TAP_PRELOAD} = 0;
	my $plain = tsdg_node('layer_plain', conf => ['autovacuum = off', "maintenance_work_mem = '256MB'"]);
	run_on($plain, 'without the worker');
	$plain->stop;
}

done_testing();
