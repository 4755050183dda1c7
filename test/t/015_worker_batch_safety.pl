# The GPU worker's answers on hard cases:
# 1. a batch search through the worker returns k rows a query when most of
#    the index's rows are deleted and not merged yet (VACUUM marks their
#    nodes deleted): it searches wider past them, as the CPU path does;
# 2. two indexes whose storage has the same relfilenode in two tablespaces
#    (relfilenodes are unique only within a tablespace; binary-upgrade mode
#    sets one at will, as pg_upgrade does) are two graphs to the worker;
# 3. a batch search on the CPU ends soon after statement_timeout, long before
#    its searches would.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use TsdgTest;

my $node = worker_node('worker_batch_safety');
wait_for_worker($node);

my $dims = 32;
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/items.tsv", 3000, $dims, 30, 1, 1);
write_subspace_clusters("$dir/others.tsv", 3000, $dims, 30, 4, 3);
write_subspace_clusters("$dir/queries.tsv", 4000, $dims, 30, 1, 2);
write_subspace_clusters("$dir/big.tsv", 20000, $dims, 30, 1, 5);
$node->safe_psql('postgres', qq{
	CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
	CREATE TABLE queries (id int PRIMARY KEY, v vector($dims));
	\\copy items FROM '$dir/items.tsv'
	\\copy queries FROM '$dir/queries.tsv'
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
});

# 1. Nine rows in ten deleted, their nodes marked by a VACUUM that does not merge.
$node->safe_psql('postgres', q{
	DELETE FROM items WHERE id % 10 <> 0;
	SET tsdg.merge_threshold = -1;
	VACUUM items;});
is($node->safe_psql('postgres', q{SELECT deleted FROM tsdg_index_info('items_v')}),
	'2700', 'the VACUUM marked the deleted rows in the index and did not merge');
my $batch = q{SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id <= 20), 50)};
# the first batch ships the index with its deleted nodes to the worker
$node->safe_psql('postgres', $batch);
my $fallbacks = worker_status($node, 'fallbacks');
my $batches = worker_status($node, 'batches');
is($node->safe_psql('postgres', $batch), '1000', 'the worker found 50 live rows for each of 20 queries');
is(worker_status($node, 'batches'), $batches + 1, 'the worker searched the batch');
is(worker_status($node, 'fallbacks'), $fallbacks, 'the batch did not fall back to the CPU');
is($node->safe_psql('postgres', "SET tsdg.device = cpu; $batch"), '1000', 'so did the CPU path');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM tsdg_search_batch('items_v', (SELECT array_agg(v) FROM queries WHERE id <= 20), 50) b
		LEFT JOIN items i ON i.ctid = b.tid WHERE i.id IS NULL}),
	'0', 'every row the worker returned is live');

# 2. A second index, in another tablespace, on storage with the first's relfilenode.
my $space = PostgreSQL::Test::Utils::tempdir();
$node->safe_psql('postgres', qq{
	CREATE TABLESPACE elsewhere LOCATION '$space';
	CREATE TABLE near (id int PRIMARY KEY, v vector($dims));
	CREATE TABLE far (id int PRIMARY KEY, v vector($dims));
	\\copy near FROM '$dir/items.tsv'
	\\copy far FROM '$dir/others.tsv'
	CREATE INDEX near_v ON near USING tsdg (v vector_l2_ops);});
my $relfilenode = $node->safe_psql('postgres', q{SELECT pg_relation_filenode('near_v')});
my $free_oid = $node->safe_psql('postgres',
	q{SELECT max(oid)::int + 1000 FROM pg_class});
$node->stop;
system_or_bail('pg_ctl', '-w', '-D', $node->data_dir, '-l', $node->logfile, '-o', '-b', 'start');
$node->safe_psql('postgres', qq{
	SELECT binary_upgrade_set_next_index_pg_class_oid($free_oid);
	SELECT binary_upgrade_set_next_index_relfilenode($relfilenode);
	CREATE INDEX far_v ON far USING tsdg (v vector_l2_ops) TABLESPACE elsewhere;});
system_or_bail('pg_ctl', '-w', '-D', $node->data_dir, '-m', 'fast', 'stop');
$node->start;
wait_for_worker($node);
is($node->safe_psql('postgres', q{SELECT pg_relation_filenode('far_v')}),
	$relfilenode, 'far_v has the relfilenode of near_v, in another tablespace');

# rows of a table that do not find themselves first through its index
sub self_misses
{
	my ($table) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off;
		SET tsdg.ef_search = 200;
		SELECT count(*) FROM (SELECT id, v FROM $table WHERE id % 150 = 0) p
		WHERE (SELECT t.id FROM $table t ORDER BY t.v <-> p.v LIMIT 1) <> p.id});
}
is(self_misses('near'), '0', 'near_v finds its rows');
is(self_misses('far'), '0', 'far_v finds its rows, not those of near_v');
is(self_misses('near'), '0', 'near_v still finds its rows');
my $cached = $node->safe_psql('postgres',
	q{SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
	  WHERE c->>'index' IN ('near_v', 'far_v')});
is($cached, '2', 'the worker holds both indexes');

# 3. A batch on the CPU that would search for minutes, stopped by statement_timeout.
$node->safe_psql('postgres', qq{
	CREATE TABLE big (id int PRIMARY KEY, v vector($dims));
	\\copy big FROM '$dir/big.tsv'
	CREATE INDEX big_v ON big USING tsdg (v vector_l2_ops);});
my ($out, $err) = ('', '');
my $start = time();
$node->psql('postgres', q{
	SET tsdg.device = cpu;
	SET tsdg.ef_search = 1000;
	SET statement_timeout = '1s';
	SELECT count(*) FROM tsdg_search_batch('big_v',
		(SELECT array_agg(v) FROM queries, generate_series(1, 10)), 100);},
	stdout => \$out, stderr => \$err);
my $elapsed = time() - $start;
like($err, qr/canceling statement due to statement timeout/, 'the CPU batch is cancelled');
cmp_ok($elapsed, '<', 20, 'the CPU batch ends soon after its statement_timeout');

$node->stop;
done_testing();
