# The GPU worker's resident indexes: keyed by (database, index storage,
# graph_version), loaded on first use by the session that asks, reloaded
# after a merge or a REINDEX, evicted least recently used under
# tsdg.gpu_memory_limit and dropped once their storage is gone (DROP,
# TRUNCATE); the worker's answers, pending rows included, are the CPU path's.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

# room for one of the two indexes below (each about 1.1 MB of rows and graph)
my $node = worker_node('worker_cache', 'tsdg.gpu_memory_limit = 1MB');
wait_for_worker($node);

# the indexes resident in the worker ('gone' where no index of this database
# has the storage), once it is done with the last request:
# after answering a build it still computes the entry points and makes the
# new graph resident (searching it once), marked busy
sub resident
{
	$node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()")
	  or die 'the worker did not become ready';
	return $node->safe_psql('postgres', q{
		SELECT coalesce(string_agg(coalesce(c->>'index', 'gone') || '@' || (c->>'graph_version'), ','
								   ORDER BY c->>'index'), '')
		FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c});
}

# the ids (sorted: the probe's copy ties with it) a query returns through
# the index, on the worker or on the CPU; wide enough a search to be exact here
sub answer
{
	my ($table, $device) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET tsdg.device = $device; SET tsdg.ef_search = 400;
		SELECT string_agg(id::text, ',' ORDER BY id)
		FROM (SELECT id FROM $table ORDER BY v <-> (SELECT v FROM probe) LIMIT 10) s});
}

sub same_answers
{
	my ($table, $when) = @_;
	is(answer($table, 'auto'), answer($table, 'cpu'), "$table: the worker answers as the CPU ($when)");
}

my $random16 = random_vector_sql(16, 'i');
$node->safe_psql('postgres', qq{
	SELECT setseed(0.5);
	CREATE TABLE a (id int, v vector(16));
	CREATE TABLE b (id int, v vector(16));
	INSERT INTO a SELECT i, $random16 FROM generate_series(1, 5000) i;
	INSERT INTO b SELECT id, v FROM a;
	CREATE TABLE probe AS SELECT v FROM a WHERE id = 77;
	CREATE INDEX a_idx ON a USING tsdg (v vector_l2_ops);
});
is(resident(), 'a_idx@1', 'a fresh build stays resident');
$node->safe_psql('postgres', 'CREATE INDEX b_idx ON b USING tsdg (v vector_l2_ops)');
is(resident(), 'b_idx@1', 'the second build evicts the first under the limit');

my $loads = worker_status($node, 'index_loads');
same_answers('a', 'shipped by the session that asked');
cmp_ok(worker_status($node, 'index_loads'), '>', $loads, 'a was loaded');
is(resident(), 'a_idx@1', 'a loaded, b evicted');
same_answers('b', 'b again');
is(resident(), 'b_idx@1', 'b loaded, a evicted');

# pending rows do not change the graph: the copy stays, the session merges them
$node->safe_psql('postgres', 'INSERT INTO b SELECT 100000 + id, v FROM a WHERE id BETWEEN 70 AND 89');
$loads = worker_status($node, 'index_loads');
same_answers('b', 'with pending rows');
is(worker_status($node, 'index_loads'), $loads, 'pending rows do not reload the index');
like(answer('b', 'auto'), qr/\b100077\b/, 'the pending copy of the probe row is found');

# a merge bumps graph_version, a REINDEX gives the index new storage: both reload
$node->safe_psql('postgres', "SELECT tsdg_merge('b_idx')");
same_answers('b', 'after a merge');
is(resident(), 'b_idx@2', 'the merged graph is resident');
$node->safe_psql('postgres', 'REINDEX INDEX b_idx');
is(resident(), 'b_idx@1', 'REINDEX builds a new graph');
same_answers('b', 'after REINDEX');
# storage that is gone (DROP, TRUNCATE, REINDEX) is never asked for again: its
# copy goes within seconds, not when others need the room
sub resident_soon
{
	my ($expected) = @_;
	for (1 .. 300)
	{
		my $now = resident();
		return $now if $now eq $expected;
		usleep(100_000);
	}
	return resident();
}
$node->safe_psql('postgres', 'DROP INDEX a_idx');
same_answers('b', 'before the TRUNCATE');
is(resident_soon('b_idx@1'), 'b_idx@1', 'b resident');
$node->safe_psql('postgres', 'CREATE TABLE c AS SELECT * FROM b; TRUNCATE b');
is(resident_soon(''), '', 'TRUNCATE: the copy of the old storage goes');
$node->safe_psql('postgres', 'INSERT INTO b SELECT * FROM c; REINDEX INDEX b_idx');
is(resident_soon('b_idx@1'), 'b_idx@1', 'the rebuilt index is resident');
$node->safe_psql('postgres', 'DROP TABLE b');
is(resident_soon(''), '', 'DROP TABLE: the copy of its index goes');

# a temporary index's storage is the session's own: its copy stays while it lives
my $temp_resident = $node->safe_psql('postgres', qq{
	CREATE TEMP TABLE t AS SELECT id, v FROM c WHERE id <= 1000;
	CREATE INDEX t_idx ON t USING tsdg (v vector_l2_ops);
	SELECT pg_sleep(2.5);
	SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
	WHERE (c->>'relfilenode')::oid = pg_relation_filenode('t_idx');});
is((split /\n/, $temp_resident)[-1], '1', 'a temporary index stays resident while its session lives');
is(resident_soon(''), '', 'and goes with its session');

note('worker_cache: ' . worker_status($node, 'index_loads') . ' loads, '
	  . worker_status($node, 'batches') . ' batches');

done_testing();
