# Crash safety of tsdg indexes: the server is stopped with -m immediate (no
# checkpoint, recovery replays the WAL) after CREATE INDEX, after inserts into
# the pending list and after VACUUM; every time the index gives the same
# answers and counts as before. An unlogged table's index comes back empty
# and usable.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = tsdg_node('crash', conf => ['autovacuum = off']);

sub crash_and_restart
{
	$node->stop('immediate');
	$node->start;
}

# the 10 nearest ids of each query through the index, and the index's counters
sub answers
{
	return $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SELECT string_agg(ids::text, ';' ORDER BY qid) FROM (
		  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids
		  FROM queries q) s;
		SELECT concat_ws(',', rows, pending, deleted, graph_version, size) FROM tsdg_index_info('items_idx');
	});
}

$node->command_ok(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-v', 'seed=0.5', '-v', 'rows=5000',
		'-d', $node->connstr('postgres'), '-f', support_file('random_items.sql')
	],
	'random items loaded');
$node->safe_psql('postgres', q{
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
	CREATE UNLOGGED TABLE scratch (id int, v vector(16));
	INSERT INTO scratch SELECT id, v FROM items WHERE id <= 500;
	CREATE INDEX scratch_idx ON scratch USING tsdg (v vector_l2_ops);
});

my $before = answers();
crash_and_restart();
is(answers(), $before, 'same answers after a crash after CREATE INDEX');

$node->safe_psql('postgres',
	"INSERT INTO items SELECT 5000 + id, v FROM queries;
	 INSERT INTO items SELECT i, " . random_vector_sql(16, 'i') . " FROM generate_series(6001, 7000) i");
$before = answers();
like($before, qr/,1010,0,/, '1010 pending rows after the inserts');
crash_and_restart();
is(answers(), $before, 'same answers after a crash after inserts');

$node->safe_psql('postgres', 'DELETE FROM items WHERE id % 3 = 0');
$node->safe_psql('postgres', 'VACUUM items');
$before = answers();
crash_and_restart();
is(answers(), $before, 'same answers after a crash after VACUUM');

my $probe = q{
	SET enable_seqscan = off;
	SELECT count(*) FROM (SELECT id FROM scratch ORDER BY v <-> (SELECT v FROM queries WHERE id = 1) LIMIT 5) s;
};
is($node->safe_psql('postgres', "SELECT rows, pending FROM tsdg_index_info('scratch_idx'); $probe"),
	"0|0\n0", 'the unlogged index is empty after a crash');
$node->safe_psql('postgres', 'INSERT INTO scratch SELECT id, v FROM items WHERE id <= 10');
is($node->safe_psql('postgres', $probe), 5, 'the unlogged index takes rows after a crash');

done_testing();
