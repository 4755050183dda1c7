# Crash during a merge: the server is stopped with -m immediate while
# tsdg_merge() writes the new graph (the pending rows being merged, deleted
# rows being dropped, inserts arriving); after recovery the index still has
# the old graph and every pending row, answers like an exact scan for rows
# equal to rows of the table, and the next merge completes. The navigating
# layer of each graph is the one of its node count and reads back whole (a
# batch search loads it).
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = tsdg_node('merge_crash', conf => ['autovacuum = off', "maintenance_work_mem = '512MB'"]);

# live rows the index returns, how many of the probes (rows of the table)
# come back first for their own vector, and the index's counters
sub index_state
{
	return $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SET tsdg.ef_search = 128;
		SET tsdg.max_scan_tuples = 1000000;
		SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 7) LIMIT 100000) s;
		SELECT count(*) FROM (SELECT p.id, (SELECT i.id FROM items i ORDER BY i.v <-> p.v LIMIT 1) AS first
		                      FROM items p WHERE p.id % 997 = 1) s WHERE first = id;
		SELECT concat_ws(',', pending, deleted, graph_version, merges) FROM tsdg_index_info('items_idx');
		SELECT layer_nodes = ceil((rows + deleted) / 16.0) FROM tsdg_index_info('items_idx');
		SELECT count(*) FROM tsdg_search_batch('items_idx', ARRAY(SELECT v FROM items WHERE id = 7), 10);
	});
}

my $random32 = random_vector_sql(32, 'i');
$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_tsdg CASCADE;
	SELECT setseed(0.25);
	CREATE TABLE items (id int PRIMARY KEY, v vector(32));
	INSERT INTO items SELECT i, $random32 FROM generate_series(1, 30000) i;
	-- wide lists make the new graph's region long to write: the crash below
	-- must land between its first block and the switch, which an incremental
	-- merge of the default-sized graph on an idle machine could finish before
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops) WITH (degree = 64, build_k = 128);
	INSERT INTO items SELECT i, $random32 FROM generate_series(30001, 40000) i;
	DELETE FROM items WHERE id % 50 = 0;
});
$node->safe_psql('postgres', 'SET tsdg.merge_threshold = -1; VACUUM items');
my $live = $node->safe_psql('postgres', 'SELECT count(*) FROM items');
my $probes = $node->safe_psql('postgres', 'SELECT count(*) FROM items WHERE id % 997 = 1');
is(index_state(), "$live\n$probes\n9800,600,1,0\nt\n10", 'before the merge: the old graph and 9800 pending rows');

# The merge runs in another session; rows arrive meanwhile; the server dies
# once the merge has allocated the blocks of the new graph and writes them.
my $size_before = $node->safe_psql('postgres', "SELECT pg_relation_size('items_idx')");
my ($merge_out, $merge_err) = ('', '');
my $merge = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', "SELECT tsdg_merge('items_idx')" ],
	'>', \$merge_out, '2>', \$merge_err);
my $merging = q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE 'SELECT tsdg_merge%' AND state = 'active'};
ok($node->poll_query_until('postgres', $merging), 'the merge started');
$node->safe_psql('postgres',
	"INSERT INTO items SELECT i, $random32 FROM generate_series(40001, 40100) i");
# polled inside one statement, every 10 ms for 2 minutes at most: the window
# between the first block and the switch is short
my $grown = $size_before + 16 * 8192;
$node->safe_psql('postgres', qq{
	DO \$\$ BEGIN
	  FOR i IN 1..12000 LOOP
	    EXIT WHEN pg_relation_size('items_idx') > $grown;
	    PERFORM pg_sleep(0.01);
	  END LOOP;
	END \$\$});
cmp_ok($node->safe_psql('postgres', "SELECT pg_relation_size('items_idx')"),
	'>', $grown, 'the merge extended the index');
is($node->safe_psql('postgres', $merging), 't', 'the merge had not ended before the crash');
$node->stop('immediate');
$merge->finish;
$node->start;

my $expected = ($live + 100) . "\n$probes\n9900,600,1,0\nt\n10";
is(index_state(), $expected, 'after the crash: the old graph and every pending row');

is($node->safe_psql('postgres', "SELECT tsdg_merge('items_idx')"),
	9900, 'the merge after the crash merges the 9900 pending rows');
$expected = ($live + 100) . "\n$probes\n0,0,2,1\nt\n10";
is(index_state(), $expected, 'after the next merge: the new graph, nothing pending');

# and the merged graph itself survives a crash
$node->stop('immediate');
$node->start;
is(index_state(), $expected, 'the merged graph is the same after a crash');

done_testing();
