# An L1 index (vector_l1_ops) with the GPU worker running. The worker on the
# CPU backend (tsdg.worker_backend = cpu, the default of these tests without
# a GPU) builds, holds, merges and searches it like any index. A worker on
# the GPU, whose backend computes no L1 distance, leaves each of those steps
# to the session: counted as fallbacks, said once in the log, the index never
# resident on the device. Either way every answer is the sequential scan's.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = worker_node('worker_l1');
wait_for_worker($node);
my $on_cpu = worker_status($node, 'device') eq 'cpu';
note('worker on ' . worker_status($node, 'device'));

my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/items.tsv", 6000, 32, 30, 1, 1);
write_subspace_clusters("$dir/more.tsv", 600, 32, 30, 1, 3);
write_subspace_clusters("$dir/queries.tsv", 20, 32, 30, 1, 2);
$node->safe_psql('postgres', qq{
	CREATE TABLE items (id int, v vector(32));
	CREATE TABLE queries (id int, v vector(32));
	\\copy items FROM '$dir/items.tsv'
	\\copy queries FROM '$dir/queries.tsv'
});

my $builds = worker_status($node, 'builds');
my $fallbacks = worker_status($node, 'fallbacks');
$node->safe_psql('postgres', 'CREATE INDEX items_l1 ON items USING tsdg (v vector_l1_ops)');
is($node->safe_psql('postgres', q{SELECT metric, rows FROM tsdg_index_info('items_l1')}), 'l1|6000',
	'an L1 index of every row');
if ($on_cpu)
{
	cmp_ok(worker_status($node, 'builds'), '>', $builds, 'the CPU-backed worker built it');
}
else
{
	is(worker_status($node, 'builds'), $builds, 'the GPU worker did not build it');
	cmp_ok(worker_status($node, 'fallbacks'), '>', $fallbacks, 'the session built it, counted as a fallback');
	my ($ret, $out, $err) = $node->psql('postgres',
		'SET tsdg.device = gpu; CREATE INDEX items_l1_gpu ON items USING tsdg (v vector_l1_ops)');
	like($err, qr/tsdg.device is "gpu" but the GPU worker does not compute l1 distances/,
		'tsdg.device = gpu refuses an L1 build rather than run it on the CPU');
}

# the ids of the 10 nearest rows of every query by a scan of the index (or a
# sequential scan), in distance order; wide enough a search to be exact here
sub nearest
{
	my ($scan) = @_;
	my $setting = $scan eq 'index' ? 'SET enable_seqscan = off; SET tsdg.ef_search = 400;' : 'SET enable_indexscan = off;';
	return $node->safe_psql('postgres', qq{$setting
		SELECT string_agg(ids, ' ' ORDER BY q.id) FROM queries q, LATERAL (
			SELECT string_agg(id::text, ',' ORDER BY d, id) AS ids FROM (
				SELECT id, v <+> q.v AS d FROM items ORDER BY v <+> q.v LIMIT 10) s) r});
}

sub batch
{
	return $node->safe_psql('postgres', q{SET tsdg.ef_search = 400;
		SELECT string_agg(ids, ' ' ORDER BY query) FROM (
			SELECT b.query, string_agg(i.id::text, ',' ORDER BY b.distance, i.id) AS ids
			FROM tsdg_search_batch('items_l1', (SELECT array_agg(v ORDER BY id) FROM queries), 10) b
			JOIN items i ON i.ctid = b.tid GROUP BY b.query) s});
}

sub resident
{
	return $node->safe_psql('postgres', q{
		SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
		WHERE c->>'index' = 'items_l1'});
}

my $exact = nearest('seq');
$fallbacks = worker_status($node, 'fallbacks');
is(nearest('index'), $exact, 'index scans give the sequential scan\'s rows');
is(batch(), $exact, 'tsdg_search_batch gives them too');
if ($on_cpu)
{
	is(resident(), 1, 'the CPU-backed worker holds the index');
}
else
{
	is(resident(), 0, 'the GPU holds no L1 index');
	cmp_ok(worker_status($node, 'fallbacks'), '>', $fallbacks, 'the searches ran in the sessions, counted');
	ok($node->log_contains('the worker\'s backend does not compute l1 distances'),
		'the fallback is said in the log');
}

# rows inserted after the build are searched pending, then merged
$node->safe_psql('postgres', qq{
	CREATE TABLE more (id int, v vector(32));
	\\copy more FROM '$dir/more.tsv'
	INSERT INTO items SELECT id + 100000, v FROM more;
});
$exact = nearest('seq');
is(nearest('index'), $exact, 'with pending rows');
$node->safe_psql('postgres', q{SELECT tsdg_merge('items_l1')});
is($node->safe_psql('postgres', q{SELECT rows, pending FROM tsdg_index_info('items_l1')}), '6600|0',
	'the pending rows merged');
is(nearest('index'), $exact, 'after the merge');
is(batch(), $exact, 'tsdg_search_batch after the merge');

$node->stop;
done_testing();
