# Replication of tsdg indexes: a streaming replica made from a base backup
# answers index scans the same as its primary, for an index that existed at
# the base backup and one built after it, through inserts, merges and VACUUM;
# a merge's new region, of which only the graph's pages and the last page are
# logged, has the same size on the replica.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $primary = tsdg_node('primary', allows_streaming => 1, conf => ['autovacuum = off']);

# both indexes' 10 nearest ids of each query, and their counters
sub answers
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SELECT string_agg(ids::text, ';' ORDER BY qid) FROM (
		  SELECT q.id AS qid,
		         ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS l2,
		         ARRAY(SELECT i.id FROM items i ORDER BY i.v <=> q.v LIMIT 10) AS ids
		  FROM queries q) s;
		SELECT concat_ws(',', rows, pending, deleted, graph_version) FROM tsdg_index_info('items_l2');
		SELECT concat_ws(',', rows, pending, deleted, graph_version) FROM tsdg_index_info('items_cos');
	});
}

my $replica;

sub compare
{
	my ($when) = @_;
	$primary->wait_for_catchup($replica, 'replay');
	is(answers($replica), answers($primary), "the replica answers the same $when");
}

$primary->command_ok(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-v', 'seed=0.25', '-v', 'rows=4000',
		'-d', $primary->connstr('postgres'), '-f', support_file('random_items.sql')
	],
	'random items loaded');
$primary->safe_psql('postgres', 'CREATE INDEX items_l2 ON items USING tsdg (v vector_l2_ops)');

$primary->backup('base');
$replica = PostgreSQL::Test::Cluster->new('replica');
$replica->init_from_backup($primary, 'base', has_streaming => 1);
$replica->start;

$primary->safe_psql('postgres', 'CREATE INDEX items_cos ON items USING tsdg (v vector_cosine_ops)');
compare('after CREATE INDEX');

$primary->safe_psql('postgres',
	'INSERT INTO items SELECT i, ' . random_vector_sql(16, 'i') . ' FROM generate_series(4001, 4600) i');
compare('after inserts');

$primary->safe_psql('postgres', "SELECT tsdg_merge('items_l2'), tsdg_merge('items_cos')");
compare('after merges');
for my $index ('items_l2', 'items_cos')
{
	my $size = "SELECT pg_relation_size('$index')";
	is($replica->safe_psql('postgres', $size),
		$primary->safe_psql('postgres', $size),
		"$index has the same size on the replica after its merge");
}

$primary->safe_psql('postgres', 'DELETE FROM items WHERE id % 4 = 0');
$primary->safe_psql('postgres', 'VACUUM items');
compare('after VACUUM');

done_testing();
