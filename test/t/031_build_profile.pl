# CREATE INDEX computes the search profile from its arrays, on threads of
# the core beside its page writes (tsdgprofile.c), where ANALYZE walks the
# pages: both must store the same bytes. Each index here is built, its
# stored profile read, then ANALYZE measures it again on the pages of the
# same graph, and the two must be equal, digit for digit. Builds in the
# session on the CPU (in memory, and past maintenance_work_mem with the
# arrays in temporary files) and, with the preload, on the GPU worker (in
# one segment, and in parts); hard rows (clusters, each on its own random
# 16-dim subspace, overlapping) under L2, cosine and inner product, tiny
# tables, and rows repeated so that rings of identical rows are linked.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 24;
my $node = worker_node('build_profile');
$node->poll_query_until('postgres',
	"SELECT state IN ('ready', 'no gpu', 'not preloaded') FROM tsdg_gpu_status()")
  or die 'the GPU worker did not settle';
my $on_worker = worker_status($node, 'state') eq 'ready';
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;

sub query { return $node->safe_psql('postgres', $_[0]); }

write_subspace_clusters("$dir/rows.tsv", 5000, $dims, 40, 1, 11);
query(qq{
	CREATE TABLE hard (id int, v vector($dims));
	\\copy hard FROM '$dir/rows.tsv'
	CREATE TABLE repeated AS SELECT h.id * 10 + c AS id, h.v FROM hard h, generate_series(1, 3) c
		WHERE h.id <= 1200 ORDER BY h.id, c;
	CREATE TABLE tiny1 AS SELECT id, v FROM hard WHERE id = 1;
	CREATE TABLE tiny2 AS SELECT id, v FROM hard WHERE id <= 2;
	CREATE TABLE tiny17 AS SELECT id, v FROM hard WHERE id <= 17;});

# the stored profile of $index: its node count and its means, as text
sub stored_profile
{
	my ($index) = @_;
	return query("SELECT profile_nodes || ' ' || profile_scored::text FROM tsdg_index_info('$index')");
}

# Builds $index on $table ($opclass) under $settings; its profile must be
# the one ANALYZE then measures on its pages.
sub check_build
{
	my ($index, $table, $opclass, $settings, $where) = @_;
	my $from = -s $node->logfile;
	my $notices;
	$node->psql('postgres', "$settings; CREATE INDEX $index ON $table USING tsdg (v $opclass)",
		stderr => \$notices, on_error_die => 1);
	my $log = slurp_file($node->logfile, $from);
	my ($line) = $log =~ /(tsdg index "$index" built from .*)/;
	like(
		$line // 'no LOG line',
		qr/search profile [0-9.]+ s \(waited for after the pages; computed beside them in [0-9.]+ s(, started (after them|between the list pages))?\)/,
		"$index: the build computed the profile beside its pages");
	like("$notices\n$log", $where, "$index: built where it should be") if defined $where;
	my $built = stored_profile($index);
	my ($rows) = query("SELECT count(*) FROM $table");
	like($built, qr/^$rows \{[0-9.]+(,[0-9.]+){6}\}$/, "$index: a profile of every node at seven efs");
	query("ANALYZE $table");
	is(stored_profile($index), $built, "$index: ANALYZE measures on the pages the profile the build stored");
	query("DROP INDEX $index");
	return;
}

my $cpu = 'SET tsdg.device = cpu';
check_build('hard_l2', 'hard', 'vector_l2_ops', $cpu);
check_build('hard_cosine', 'hard', 'vector_cosine_ops', $cpu);
check_build('hard_ip', 'hard', 'vector_ip_ops', $cpu);
check_build('repeated_l2', 'repeated', 'vector_l2_ops', $cpu);
check_build('tiny1_l2', 'tiny1', 'vector_l2_ops', $cpu);
check_build('tiny2_l2', 'tiny2', 'vector_l2_ops', $cpu);
check_build('tiny17_ip', 'tiny17', 'vector_ip_ops', $cpu);
check_build('hard_spilled', 'hard', 'vector_l2_ops', "$cpu; SET maintenance_work_mem = '1MB'",
	qr/no longer fits into maintenance_work_mem/);
# an empty index has no profile, nor a thread
query("CREATE TABLE empty (id int, v vector($dims)); CREATE INDEX empty_v ON empty USING tsdg (v vector_l2_ops)");
is(query("SELECT profile_nodes FROM tsdg_index_info('empty_v')"), '0', 'an empty index has no profile');

SKIP:
{
	skip 'no GPU worker without shared_preload_libraries', 20 unless $on_worker;
	my $gpu = 'SET tsdg.device = gpu';
	check_build('worker_l2', 'hard', 'vector_l2_ops', $gpu, qr/"worker_l2" built on the GPU worker/);
	check_build('worker_cosine', 'hard', 'vector_cosine_ops', $gpu,
		qr/"worker_cosine" built on the GPU worker/);
	check_build('worker_repeated', 'repeated', 'vector_ip_ops', $gpu,
		qr/"worker_repeated" built on the GPU worker/);
	check_build('worker_parts', 'hard', 'vector_l2_ops', "$gpu; SET maintenance_work_mem = '1MB'",
		qr/"worker_parts" built on the GPU worker: .* \(parts: \d+\)/);
}

done_testing();
