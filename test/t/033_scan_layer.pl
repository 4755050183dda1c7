# A session's scans of a graph of 16,384 nodes or more start from the walk of
# its navigating layer, which the session keeps from one scan to the next
# (tsdgnavcache.c). In one session, without the worker, on data of many
# clusters, scans answer close to a sequential scan and in distance order
# before and after the graph changes under the kept layer: a merge of new
# rows, a merge that renumbers the nodes after deletes, a REINDEX; under
# cosine; and with a tsdg.navigating_cache_mem too small for the layer, where
# the scans start from the navigating set.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 16;
my $rows = 20000;
my $queries = 20;
my $node = tsdg_node('scan_layer', conf => ['autovacuum = off']);
$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/rows1.tsv", $rows, $dims, 200, 1, 1);
write_subspace_clusters("$dir/rows2.tsv", 4000, $dims, 200, 1, 2);
write_subspace_clusters("$dir/queries.tsv", $queries, $dims, 200, 1, 99);

my $session = $node->background_psql('postgres', on_error_stop => 1);
$session->query_safe(
	qq{LOAD 'pg_tsdg';
	SET tsdg.device = cpu;
	SET tsdg.ef_search = 40;
	SET maintenance_work_mem = '256MB';
	SET max_parallel_workers_per_gather = 0;
	CREATE TABLE queries (id int, v vector($dims));
	\\copy queries FROM '$dir/queries.tsv'
	CREATE TABLE items (id int, v vector($dims));
	\\copy items FROM '$dir/rows1.tsv'
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
	CREATE INDEX items_cos ON items USING tsdg (v vector_cosine_ops);});

# per query, the 10 nearest ids by $op through the index or exactly, and
# whether the index's rows came in distance order
sub nearest
{
	my ($index, $op, $by_index) = @_;
	my $scans =
	  $by_index
	  ? 'SET enable_seqscan = off; SET enable_indexscan = on'
	  : 'SET enable_seqscan = on; SET enable_indexscan = off';
	my $out = $session->query_safe(
		"$scans; SELECT q.id, s.ids, s.ordered FROM queries q, LATERAL "
		  . "(SELECT array_agg(id ORDER BY n) AS ids, "
		  . "bool_and(d >= coalesce(prev, d)) AS ordered FROM "
		  . "(SELECT id, n, d, lag(d) OVER (ORDER BY n) AS prev FROM "
		  . "(SELECT id, v $op q.v AS d, row_number() OVER () AS n FROM "
		  . "(SELECT id, v FROM items ORDER BY v $op q.v LIMIT 10) l) t) u) s ORDER BY q.id");
	my (%ids, $ordered);
	$ordered = 1;
	for my $line (split /\n/, $out)
	{
		my ($q, $list, $in_order) = split /\|/, $line;
		$list =~ s/[{}]//g;
		$ids{$q} = [ split /,/, $list ];
		$ordered = 0 if $in_order ne 't';
	}
	return (\%ids, $ordered);
}

# the index's answers reach recall@10 0.95 of the exact ones, in order, and
# the plan scans the index named
sub close_to_exact
{
	my ($index, $op, $what) = @_;
	my $plan = $session->query_safe(
		"SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY v $op '["
		  . join(',', (1) x $dims)
		  . "]' LIMIT 10");
	like($plan, qr/Index Scan using $index/, "$what: the plan scans $index");
	my ($found, $ordered) = nearest($index, $op, 1);
	my ($exact) = nearest($index, $op, 0);
	my ($hits, $all) = (0, 0);
	for my $q (keys %$exact)
	{
		my %want = map { $_ => 1 } @{ $exact->{$q} };
		$hits += grep { $want{$_} } @{ $found->{$q} // [] };
		$all += @{ $exact->{$q} };
	}
	my $recall = $all ? $hits / $all : 0;
	cmp_ok($recall, '>=', 0.95, "$what: recall\@10 $recall");
	ok($ordered, "$what: rows in distance order");
	return;
}

is($session->query_safe(q{SELECT layer_nodes FROM tsdg_index_info('items_v')}),
	$rows / 16, 'the graph has a layer of every 16th node');
close_to_exact('items_v', '<->', 'after the build');
close_to_exact('items_v', '<->', 'again, the layer kept');
close_to_exact('items_cos', '<=>', 'cosine');

# new rows merged: more nodes, a new layer
$session->query_safe(
	qq{CREATE TEMP TABLE fresh (id int, v vector($dims));
	\\copy fresh FROM '$dir/rows2.tsv'
	INSERT INTO items SELECT id + $rows, v FROM fresh;
	SELECT tsdg_merge('items_v');});
is($session->query_safe(q{SELECT layer_nodes FROM tsdg_index_info('items_v')}),
	($rows + 4000) / 16, 'the merge built the layer of the merged rows');
close_to_exact('items_v', '<->', 'a merge of new rows');

# deletes, then a merge that drops them and renumbers the nodes: the same
# layer node numbers now stand for other rows
$session->query_safe(
	qq{DELETE FROM items WHERE id % 3 = 1;
	VACUUM items;
	INSERT INTO items SELECT id + $rows + 4000, v FROM fresh WHERE id <= 500;
	SELECT tsdg_merge('items_v');});
is($session->query_safe(q{SELECT deleted FROM tsdg_index_info('items_v')}),
	'0', 'the merge dropped the deleted nodes');
close_to_exact('items_v', '<->', 'a merge that renumbers the nodes');

$session->query_safe(q{REINDEX INDEX items_v});
close_to_exact('items_v', '<->', 'REINDEX');

# a budget too small for the layer: the scans start from the navigating set
$session->query_safe(q{SET tsdg.navigating_cache_mem = '64kB'});
close_to_exact('items_v', '<->', 'a budget without room for the layer');
$session->query_safe(q{SET tsdg.navigating_cache_mem = 0});
close_to_exact('items_v', '<->', 'no budget');

$session->quit;
$node->stop;
done_testing();
