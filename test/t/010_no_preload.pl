# pg_tsdg on a stock server: no shared_preload_libraries, so the library is
# loaded by each session that touches it and there is no GPU worker. Every
# session must work (the settings only the postmaster reads cannot be defined
# then) and build and search on the CPU; a postgresql.conf that sets the
# worker's settings for a later preload must not break the sessions either.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('no_preload');
$node->init;
$node->append_conf('postgresql.conf', "tsdg.worker_backend = cpu\ntsdg.ef_search = 80");
$node->start;

is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), '', 'the server does not preload pg_tsdg');

$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
$node->safe_psql(
	'postgres', q{
	CREATE TABLE items (id int, v vector(4));
	INSERT INTO items SELECT i, ARRAY[sin(i), cos(i * 0.7), (i % 13) / 6.0, (i % 7) / 3.0]::real[]::vector
		FROM generate_series(1, 2000) i;
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
});

# a new session loads the library itself, like every session of an application
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'SELECT state FROM tsdg_gpu_status()');
is($ret, 0, 'a new session can call the extension');
is($stdout, 'not preloaded', 'no worker without the preload');
unlike($stderr, qr/FATAL|PGC_POSTMASTER/, 'no session is ended');

is($node->safe_psql('postgres', 'SHOW tsdg.ef_search'), '80', 'the session settings of postgresql.conf apply');
($ret, $stdout, $stderr) = $node->psql('postgres', 'SHOW tsdg.worker_backend');
is($stdout, 'cpu', 'the worker settings of postgresql.conf are kept for a later preload');
unlike($stderr, qr/WARNING/, 'without a warning');

my $plan = $node->safe_psql('postgres',
	q{SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY v <-> '[0,1,0.5,1]' LIMIT 5});
like($plan, qr/Index Scan using items_v/, 'the index answers ORDER BY ... LIMIT');

my $exact = $node->safe_psql('postgres',
	q{SET enable_indexscan = off; SELECT string_agg(id::text, ',' ORDER BY d, id) FROM
	  (SELECT id, v <-> '[0,1,0.5,1]' AS d FROM items ORDER BY d, id LIMIT 5) s});
my $found = $node->safe_psql('postgres',
	q{SET enable_seqscan = off; SET tsdg.ef_search = 400; SELECT string_agg(id::text, ',' ORDER BY d, id) FROM
	  (SELECT id, v <-> '[0,1,0.5,1]' AS d FROM items ORDER BY v <-> '[0,1,0.5,1]' LIMIT 5) s});
is($found, $exact, 'the CPU search finds the exact nearest rows');

# rows inserted after the build, and a merge, in a session of its own
$node->safe_psql('postgres',
	q{INSERT INTO items SELECT i, ARRAY[sin(i), cos(i * 0.7), (i % 13) / 6.0, (i % 7) / 3.0]::real[]::vector
	  FROM generate_series(2001, 2300) i});
$node->safe_psql('postgres', q{SELECT tsdg_merge('items_v')});
is($node->safe_psql('postgres', q{SELECT rows, pending FROM tsdg_index_info('items_v')}),
	'2300|0', 'a merge runs in the session');
is( $node->safe_psql(
		'postgres',
		q{SET enable_seqscan = off; SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM items ORDER BY v <-> '[0,1,0.5,1]') s}
	),
	'2300|2300',
	'an ordered scan returns every row once');

unlike(slurp_file($node->logfile), qr/FATAL|invalid configuration parameter/,
	'no FATAL and no warning about the settings in the server log');

$node->stop;
done_testing();
