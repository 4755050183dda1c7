# A session keeps the rows of an index's navigating set from one scan to
# the next (tsdgnavcache.c). In one session, on hard data, scans answer as a
# sequential scan does before and after the index's rows change under it:
# new vectors and a REINDEX, a merge of new rows, a merge that renumbers
# the nodes after deletes, TRUNCATE and a reload; under cosine and inner
# product; on a temporary index; and for two indexes scanned in turns in a
# budget that holds only one of their sets, or none. Each index is small
# enough that a search at tsdg.ef_search 1000 holds every node, so any
# stale row the session scores shows as an answer other than the exact one.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 32;
my $node = tsdg_node('navigating_cache', conf => ['autovacuum = off']);
$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
# each seed draws other rows of the same clusters
for my $seed (1 .. 5)
{
	write_subspace_clusters("$dir/rows$seed.tsv", 700, $dims, 14, 1, $seed);
}
write_subspace_clusters("$dir/queries.tsv", 8, $dims, 14, 1, 99);

my $session = $node->background_psql('postgres', on_error_stop => 1);
$session->query_safe(
	qq{LOAD 'pg_tsdg';
	SET tsdg.device = cpu;
	SET tsdg.ef_search = 1000;
	SET max_parallel_workers_per_gather = 0;
	CREATE TABLE queries (id int, v vector($dims));
	\\copy queries FROM '$dir/queries.tsv'
	CREATE TABLE items (id int, v vector($dims));
	\\copy items FROM '$dir/rows1.tsv'
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
	CREATE TABLE other (id int, v vector($dims));
	\\copy other FROM '$dir/rows2.tsv'
	CREATE INDEX other_cos ON other USING tsdg (v vector_cosine_ops);
	CREATE INDEX other_ip ON other USING tsdg (v vector_ip_ops);});

# the 10 nearest ids of each query by $op, through the index or exactly
sub nearest
{
	my ($table, $op, $by_index) = @_;
	my $scans =
	  $by_index
	  ? 'SET enable_seqscan = off; SET enable_indexscan = on'
	  : 'SET enable_seqscan = on; SET enable_indexscan = off';
	my $order = $by_index ? "v $op q.v" : "v $op q.v, id";
	return $session->query_safe(
		"$scans; SELECT string_agg(ids, ' ' ORDER BY q.id) FROM queries q, LATERAL "
		  . "(SELECT array_agg(id)::text AS ids FROM (SELECT id FROM $table ORDER BY $order LIMIT 10) t) s");
}

# both scans of $table by $op in this session agree
sub same_as_exact
{
	my ($table, $op, $what) = @_;
	my $plan = $session->query_safe(
		"SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT id FROM $table ORDER BY v $op '["
		  . join(',', (0) x $dims)
		  . "]' LIMIT 10");
	like($plan, qr/Index Scan using/, "$what: the plan scans the index");
	is(nearest($table, $op, 1), nearest($table, $op, 0), "$what: the index answers as a sequential scan");
	return;
}

same_as_exact('items', '<->', 'L2 after the build');
same_as_exact('items', '<->', 'L2 again, the navigating set kept');

# new vectors for every row, then the index rebuilt on new storage
$session->query_safe(
	qq{CREATE TEMP TABLE fresh (id int, v vector($dims));
	\\copy fresh FROM '$dir/rows3.tsv'
	UPDATE items SET v = fresh.v FROM fresh WHERE fresh.id = items.id;
	REINDEX INDEX items_v;});
same_as_exact('items', '<->', 'new vectors and REINDEX');

# 200 rows merged into the graph: a new graph_version of the same storage
$session->query_safe(
	qq{INSERT INTO items SELECT id + 700, v FROM fresh WHERE id <= 200;
	SELECT tsdg_merge('items_v');});
same_as_exact('items', '<->', 'a merge of new rows');

# 200 rows deleted and as many inserted: the merge drops the deleted nodes
# and renumbers the rest, the node count as before
$session->query_safe(
	qq{TRUNCATE fresh;
	\\copy fresh FROM '$dir/rows4.tsv'
	DELETE FROM items WHERE id % 4 = 1 AND id <= 800;
	VACUUM items;
	INSERT INTO items SELECT id + 1000, v FROM fresh WHERE id <= 200;
	SELECT tsdg_merge('items_v');});
is($session->query_safe(q{SELECT rows, deleted FROM tsdg_index_info('items_v')}),
	'900|0', 'the merge left 900 nodes, none deleted');
same_as_exact('items', '<->', 'a merge that renumbers the nodes');

# emptied and loaded again with other vectors, then merged
$session->query_safe(
	qq{TRUNCATE items;
	\\copy items FROM '$dir/rows5.tsv'
	SELECT tsdg_merge('items_v');});
same_as_exact('items', '<->', 'TRUNCATE, a reload and a merge');

same_as_exact('other', '<=>', 'cosine');
same_as_exact('other', '<#>', 'inner product');
$session->query_safe(
	qq{UPDATE other SET v = items.v FROM items WHERE items.id = other.id;
	REINDEX TABLE other;});
same_as_exact('other', '<=>', 'cosine after new vectors and REINDEX');
same_as_exact('other', '<#>', 'inner product after new vectors and REINDEX');

# a temporary index reads local buffers; its storage is this backend's
$session->query_safe(
	qq{CREATE TEMP TABLE scratch (id int, v vector($dims));
	\\copy scratch FROM '$dir/rows1.tsv'
	CREATE INDEX scratch_v ON scratch USING tsdg (v vector_l2_ops);});
same_as_exact('scratch', '<->', 'a temporary index');
$session->query_safe(
	qq{TRUNCATE scratch;
	\\copy scratch FROM '$dir/rows2.tsv'
	SELECT tsdg_merge('scratch_v');});
same_as_exact('scratch', '<->', 'a temporary index emptied, reloaded and merged');

# a budget of one navigating set (the rows and ids of 256 entry points and
# a few strided nodes), then none: each scan of the two indexes in turn
# drops the other's copy or reads the pages
for my $budget ('40kB', '0')
{
	$session->query_safe("SET tsdg.navigating_cache_mem = '$budget'");
	for my $turn (1, 2)
	{
		same_as_exact('items',   '<->', "budget $budget, turn $turn, one index");
		same_as_exact('scratch', '<->', "budget $budget, turn $turn, the other");
	}
}

$session->quit;
$node->stop;
done_testing();
