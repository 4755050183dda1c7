# The first searches after CREATE INDEX on the GPU worker. A backend may
# prepare, on an index's first search, what all its searches share (the CPU
# backend picks its entry points: seconds on wide vectors); the worker does
# that while it is marked busy, before the index is published, so the
# sessions that search meanwhile search on the CPU at once instead of waiting
# for the worker until tsdg.worker_timeout_ms. A short timeout makes such a
# wait show as a LOG line of the session.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = worker_node('worker_first_search', 'maintenance_work_mem = 1GB',
	'tsdg.worker_timeout_ms = 400');
wait_for_worker($node);

$node->safe_psql('postgres',
	q{SELECT setseed(0.75);
	CREATE TABLE wide (id int, v vector(1536));
	INSERT INTO wide SELECT i, } . random_vector_sql(1536, 'i') . q{ FROM generate_series(1, 6000) i;
	ANALYZE wide;});
my $from = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE INDEX wide_idx ON wide USING tsdg (v vector_l2_ops) WITH (iterations = 3)');
like(slurp_file($node->logfile, $from), qr/tsdg index "wide_idx" built on the GPU worker/,
	'the worker built the index');

# searches right after the build, from new sessions, each the nearest row to a row of the table
my $found = 0;
for my $id (1 .. 8)
{
	$found += $node->safe_psql('postgres',
		qq{SET enable_seqscan = off; SET tsdg.ef_search = 200;
		   SELECT count(*) FROM (SELECT id FROM wide ORDER BY v <-> (SELECT v FROM wide WHERE id = $id) LIMIT 1) s
		   WHERE id = $id});
}
cmp_ok($found, '>=', 7, 'the first searches find their rows');
unlike(slurp_file($node->logfile, $from), qr/no answer within tsdg.worker_timeout_ms/,
	'no search waited out tsdg.worker_timeout_ms');
ok($node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()"),
	'the worker is ready again');

$node->stop;
done_testing();
