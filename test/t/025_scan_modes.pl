# What an ordered scan does past its first tsdg.ef_search rows, on hard data
# (overlapping clusters, each on a 16-dimension subspace of its own) with
# pending rows beside the graph, through the GPU worker's first round where
# it runs (its CPU backend here) and in the session otherwise:
# 1. tsdg.iterative_scan takes pgvector's values and no others; off returns
#    at most tsdg.ef_search rows, the nearest first, filtered or not;
#    relaxed_order (the default) returns every row a filter lets through,
#    on a sparse graph (degree 4) some after farther ones; strict_order
#    never returns a row nearer than one it returned before;
# 2. tsdg.scan_mem_multiplier bounds the graph search by work_mem times it:
#    at the smallest work_mem a filtered scan passes the bound, says so at
#    DEBUG1 and scores the rows left exactly, still returning every row in
#    order; under a bound it does not reach it says nothing.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 32;
my $node = worker_node('scan_modes');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/items.tsv", 6000, $dims, 30, 1, 7);
write_subspace_clusters("$dir/more.tsv", 300, $dims, 30, 1, 8);
$node->safe_psql('postgres', qq{
	CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
	\\copy items FROM '$dir/items.tsv'
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
	CREATE TEMP TABLE more (id int, v vector($dims));
	\\copy more FROM '$dir/more.tsv'
	INSERT INTO items SELECT id + 6000, v FROM more;
	CREATE TABLE sparse (id int PRIMARY KEY, v vector($dims));
	\\copy sparse FROM '$dir/items.tsv'
	CREATE INDEX sparse_v ON sparse USING tsdg (v vector_l2_ops) WITH (degree = 4);});
is($node->safe_psql('postgres', q{SELECT pending FROM tsdg_index_info('items_v')}),
	'300', 'the index has pending rows beside its graph');
if ($ENV{TSDG_TAP_PRELOAD} // 1)
{
	$node->poll_query_until('postgres', q{SELECT state = 'ready' FROM tsdg_gpu_status()})
	  or die 'the worker did not become ready';
}

# psql's stdout and stderr for the statements, after the scan settings; the
# library is loaded first, as a server without the preload has not loaded it
# before a session uses the index
sub run
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "LOAD 'pg_tsdg'; SET enable_seqscan = off; SET jit = off; $sql",
		stdout => \$out, stderr => \$err);
	return ($out, $err);
}

# 1. The setting's values.
my ($out, $err) = run('SHOW tsdg.iterative_scan');
is($out, 'relaxed_order', 'tsdg.iterative_scan is relaxed_order by default');
($out, $err) = run('SET tsdg.iterative_scan = on');
like($err, qr/invalid value for parameter "tsdg.iterative_scan": "on".*Available values: off, relaxed_order, strict_order/s,
	'tsdg.iterative_scan takes off, relaxed_order and strict_order only');
($out, $err) = run('SET tsdg.ef_search = 1001');
like($err, qr/1001 is outside the valid range for parameter "tsdg.ef_search" \(1 .. 1000\)/,
	'tsdg.ef_search goes up to 1000, as hnsw.ef_search');

# the ids of a query near row $row's vector whose id is a multiple of $every,
# by the index with the settings, and exactly (a sequential scan)
sub ids
{
	my ($settings, $row, $every, $limit, $table) = @_;
	$table //= 'items';
	my $query = "(SELECT v FROM $table WHERE id = $row)";
	my $limit_clause = defined $limit ? "LIMIT $limit" : '';
	my ($got) = run("$settings; SELECT string_agg(id::text, ',' ORDER BY n) FROM (SELECT id, row_number() OVER () AS n FROM "
		  . "(SELECT id FROM $table WHERE id % $every = 0 ORDER BY v <-> $query $limit_clause) s) t");
	my ($want) = run("SET enable_indexscan = off; SET enable_seqscan = on; "
		  . "SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (SELECT id, v <-> $query AS d FROM $table "
		  . "WHERE id % $every = 0 ORDER BY d, id $limit_clause) s");
	return ([ split /,/, $got ], [ split /,/, $want ]);
}

# the distances to row $row's vector of the rows of a list, in its order
sub distances
{
	my ($row, $ids, $table) = @_;
	$table //= 'items';
	return [] unless @$ids;
	my ($out) = run("SELECT string_agg((i.v <-> (SELECT v FROM $table WHERE id = $row))::text, ',' ORDER BY o.n) "
		  . "FROM unnest('{" . join(',', @$ids) . "}'::int[]) WITH ORDINALITY AS o(id, n) JOIN $table i ON i.id = o.id");
	return [ split /,/, $out ];
}

sub backward_steps
{
	my ($dists) = @_;
	return scalar grep { $dists->[$_] < $dists->[ $_ - 1 ] } 1 .. $#$dists;
}

my @rows = (11, 2222, 4545, 6123);
for my $row (@rows)
{
	my ($got, $want) = ids('SET tsdg.iterative_scan = off; SET tsdg.ef_search = 20', $row, 1, 100);
	is(scalar @$got, 20, "off: a LIMIT 100 near row $row returns tsdg.ef_search rows");
	is($got->[0], $want->[0], "off: the nearest row to row $row comes first");
	is(backward_steps(distances($row, $got)), 0, "off: the rows near row $row come in order");

	($got, $want) = ids('SET tsdg.iterative_scan = off; SET tsdg.ef_search = 20', $row, 7, 100);
	cmp_ok(scalar @$got, '<=', 20, "off: a filtered scan near row $row returns at most tsdg.ef_search rows");

	($got, $want) = ids('SET tsdg.ef_search = 20', $row, 7, undef);
	is(join(',', sort { $a <=> $b } @$got), join(',', sort { $a <=> $b } @$want),
		"relaxed_order: a filtered scan near row $row returns every row the filter lets through, once");

	# sparse has the rows of the graph only
	my $sparse_row = $row % 6000;
	($got, $want) = ids('SET tsdg.ef_search = 10', $sparse_row, 7, undef, 'sparse');
	is(scalar @$got, scalar @$want, "relaxed_order: every filtered row near row $sparse_row through the sparse graph");
	cmp_ok(backward_steps(distances($sparse_row, $got, 'sparse')), '>', 0, 'some of them after farther ones');
	($got, $want) = ids('SET tsdg.iterative_scan = strict_order; SET tsdg.ef_search = 10', $sparse_row, 7, undef, 'sparse');
	is(backward_steps(distances($sparse_row, $got, 'sparse')), 0,
		"strict_order: the filtered rows near row $sparse_row through the sparse graph never step back");
	my %wanted = map { $_ => 1 } @$want;
	is(scalar(grep { !$wanted{$_} } @$got), 0, "strict_order: they are rows the filter lets through");
	cmp_ok(scalar @$got, '>=', 10, "strict_order: more than a first round of them (" . scalar(@$got) . ' of ' . scalar(@$want) . ')');
}

# 2. The memory bound of the graph search.
my $switch = qr/tsdg index scan passed work_mem x tsdg.scan_mem_multiplier after \d+ graph rows/;
($out, $err) = run('SET tsdg.scan_mem_multiplier = 0');
like($err, qr/outside the valid range for parameter "tsdg.scan_mem_multiplier" \(1 .. 1000\)/,
	'tsdg.scan_mem_multiplier goes from 1 to 1000');
for my $row (@rows)
{
	my $filtered = "SELECT count(*) FROM (SELECT id FROM items WHERE id % 7 = 0 ORDER BY v <-> (SELECT v FROM items WHERE id = $row)) s";
	($out, $err) = run("SET client_min_messages = debug1; SET tsdg.ef_search = 10; SET work_mem = '64kB'; $filtered");
	like($err, $switch, "at work_mem 64kB a filtered scan near row $row ends its graph search");
	($out, $err) = run("SET client_min_messages = debug1; SET tsdg.ef_search = 10; SET work_mem = '64kB'; "
		  . "SET tsdg.scan_mem_multiplier = 1000; $filtered");
	unlike($err, $switch, "64MB are enough for the graph search near row $row");

	my ($got, $want) = ids("SET tsdg.ef_search = 10; SET work_mem = '64kB'", $row, 7, undef);
	is(join(',', @$got), join(',', @$want),
		"the scan near row $row that scores the rest exactly returns every row, in order");
}

cmp_ok(worker_status($node, 'batches'), '>', 0, 'the worker answered first rounds')
  if $ENV{TSDG_TAP_PRELOAD} // 1;

$node->stop;
done_testing();
