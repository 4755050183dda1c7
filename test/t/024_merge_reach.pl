# Many small merges keep every row findable: a table of hard data (clusters
# on 16-dimension windows of their own) takes round after round of inserts,
# deletes and updates, each followed by VACUUM and tsdg_merge(), so that
# every merge drops deleted nodes and rebuilds the lists that pointed to
# them, and old rows lose edges into them. After every few dozen merges,
# every live row must be the first answer of an index scan for its own
# vector at the default tsdg.ef_search: once merged through the GPU worker
# (on the CPU backend here; not with TSDG_TAP_PRELOAD=0, which has none),
# once in the session (tsdg.device = cpu).
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $rows = 6000;
my $rounds = 2;
my $merges_per_round = 40;
my $node = worker_node('merge_reach', "maintenance_work_mem = '256MB'");

$node->safe_psql('postgres', q{
	CREATE FUNCTION cluster_vector(c int) RETURNS vector(64) LANGUAGE sql VOLATILE AS $$
		SELECT array_agg(CASE WHEN (d + c * 7) % 64 < 16
				THEN ((c * 13 + d) % 10) * 0.2 + random() ELSE random() * 0.02 END ORDER BY d)::vector(64)
		FROM generate_series(0, 63) AS d $$;
});

# one table per way of merging, with the same load; without the preload
# there is no worker
my %device = (in_session => 'cpu');
$device{by_worker} = 'auto' if $ENV{TSDG_TAP_PRELOAD} // 1;
for my $table (sort keys %device)
{
	$node->safe_psql('postgres', qq{
		SELECT setseed(0.25);
		CREATE TABLE $table (id bigserial PRIMARY KEY, c int NOT NULL, v vector(64) NOT NULL)
			WITH (autovacuum_enabled = off);
		INSERT INTO $table (c, v) SELECT i % 100, cluster_vector(i % 100) FROM generate_series(1, $rows) AS i;
		CREATE INDEX ${table}_idx ON $table USING tsdg (v vector_l2_ops);
	});
}

# the live rows of $table that an index scan for their own vector does not return first
sub missed
{
	my ($table) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off;
		SELECT count(*) FROM $table i
			LEFT JOIN LATERAL (SELECT j.id FROM $table j ORDER BY j.v <-> i.v LIMIT 1) f ON true
			WHERE f.id IS DISTINCT FROM i.id});
}

for my $round (1 .. $rounds)
{
	for my $table (sort keys %device)
	{
		my @load = ("SET tsdg.device = $device{$table}", "SELECT setseed(0.$round)");
		for (1 .. $merges_per_round)
		{
			push @load,
			  "INSERT INTO $table (c, v) SELECT c, cluster_vector(c) FROM "
			  . "(SELECT (random() * 99)::int AS c FROM generate_series(1, 12)) s",
			  "DELETE FROM $table WHERE id IN (SELECT id FROM $table ORDER BY random() LIMIT 5)",
			  "UPDATE $table SET v = cluster_vector(c) WHERE id IN (SELECT id FROM $table ORDER BY random() LIMIT 6)",
			  "VACUUM $table",
			  "SELECT tsdg_merge('${table}_idx')";
		}
		$node->safe_psql('postgres', join(";\n", @load) . ';', timeout => 600);
		is(missed($table), '0',
			"$table: after "
			  . $round * $merges_per_round
			  . ' merges every live row is found first by its own vector');
	}
}

$node->stop;
done_testing();
