# The search profile (tsdgprofile.c) is what the planner prices a search by:
# the mean count of rows a search scores at each ef, over sample rows
# searched for their own vectors. Here it is measured again by ordinary
# scans of those rows' vectors, each of which reports at DEBUG1 the rows its
# walk scored, and the means must agree exactly with tsdg_index_info's.
# The index of hard data is searched at the profile's efs up to 512 (past
# tsdg.ef_search's largest, 1000, no scan reaches the profile's last ef);
# the small one, whose profile was measured with no navigating set kept in
# memory, is searched at ef 1000, where the search already scores every row
# it can reach, as the profile's search at 1024 does. A graph of 16,384
# nodes or more has a navigating layer, which its scans walk first, each
# reporting at DEBUG1 the rows that walk scored too: its profile must count
# both walks as the scans do, measured by the build (on threads, from its
# arrays) and by ANALYZE (on the pages) alike.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $dims = 24;
my $samples = 16;
my $node = tsdg_node('search_profile', conf => ['autovacuum = off']);
$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/rows.tsv", 6000, $dims, 40, 1, 3);
write_subspace_clusters("$dir/small.tsv", 900, $dims, 12, 4, 5);
my $layered_rows = 17000;
my $layered_dims = 8;
write_subspace_clusters("$dir/layered.tsv", $layered_rows, $layered_dims, 60, 1, 7);

# the node ids of a build are the rows' order in the heap: one COPY, one run of ids
$node->safe_psql(
	'postgres',
	qq{SET tsdg.device = cpu;
	CREATE TABLE items (id int, v vector($dims));
	\\copy items FROM '$dir/rows.tsv'
	CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);
	CREATE TABLE small (id int, v vector($dims));
	\\copy small FROM '$dir/small.tsv'
	CREATE TABLE layered (id int, v vector($layered_dims));
	\\copy layered FROM '$dir/layered.tsv'
	CREATE INDEX layered_v ON layered USING tsdg (v vector_l2_ops);
	SET tsdg.navigating_cache_mem = 0;
	CREATE INDEX small_v ON small USING tsdg (v vector_cosine_ops);});

# the stored profile of $index: its node count and the means at each ef,
# of the graph's searches and of the layer's walks
sub stored_profile
{
	my ($index) = @_;
	my ($nodes, $scored, $layer_scored) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT profile_nodes, array_to_string(profile_scored, ','), "
		  . "coalesce(array_to_string(profile_layer_scored, ','), '') FROM tsdg_index_info('$index')");
	return ($nodes, [ split /,/, $scored ], [ split /,/, $layer_scored ]);
}

# The mean over the profile's sample rows of $table of the rows a scan's
# walk at each of @efs scores, searched by $op for the row's own vector;
# in list context after them, those its layer's walk scored.
sub scanned_means
{
	my ($table, $op, $nodes, @efs) = @_;
	my $sql = "SET tsdg.device = cpu; SET enable_seqscan = off; SET client_min_messages = debug1;\n";
	for my $s (0 .. $samples - 1)
	{
		# the middle of each of the samples' equal runs of node ids, as tsdgprofile.c picks them
		my $id = int($nodes * (2 * $s + 1) / (2 * $samples)) + 1;
		for my $ef (@efs)
		{
			$sql .= "SET tsdg.ef_search = $ef; SELECT id FROM $table "
			  . "ORDER BY v $op (SELECT v FROM $table WHERE id = $id) LIMIT 1;\n";
		}
	}
	my ($stdout, $stderr);
	$node->psql('postgres', $sql, stdout => \$stdout, stderr => \$stderr, on_error_die => 1);
	my @counts = $stderr =~ /the graph walk at ef \d+ has scored (\d+) rows/g;
	is(scalar(@counts), $samples * @efs, "$table: each scan reports its walk");
	my @layer_counts = $stderr =~ /the navigating layer's walk at ef \d+ has scored (\d+) rows/g;
	my @sums = (0) x @efs;
	my @layer_sums = (0) x @efs;
	$sums[ $_ % @efs ] += $counts[$_] for 0 .. $#counts;
	$layer_sums[ $_ % @efs ] += $layer_counts[$_] for 0 .. $#layer_counts;
	return map { $_ / $samples } @sums, (@layer_counts ? @layer_sums : ());
}

my ($nodes, $profile, $no_layer) = stored_profile('items_v');
is($nodes, 6000, 'the profile was measured on every node');
is(scalar(@$no_layer), 0, 'items: a graph without a layer has no walks of one in its profile');
my @efs = map { 16 << $_ } 0 .. 5;
my @means = scanned_means('items', '<->', $nodes, @efs);
for my $step (0 .. $#efs)
{
	cmp_ok(abs($means[$step] - $profile->[$step]), '<', 0.01,
		"items: the profile at ef $efs[$step] ($profile->[$step]) is what scans score ($means[$step])");
}
cmp_ok($profile->[6], '>', $profile->[5], 'items: a search at ef 1024 scores more than at 512');

($nodes, $profile) = stored_profile('small_v');
my ($reach) = scanned_means('small', '<=>', $nodes, 1000);
cmp_ok(abs($reach - $profile->[6]), '<', 0.01,
	"small: the profile at ef 1024 ($profile->[6]) is what scans at ef 1000 score ($reach)");

# the layered graph: the build's profile counts the layer's walk and the
# graph's search from its entries, as the scans count them
my $layer_profile;
($nodes, $profile, $layer_profile) = stored_profile('layered_v');
is($nodes, $layered_rows, 'layered: the profile was measured on every node');
is($node->safe_psql('postgres', "SELECT layer_nodes > 0 FROM tsdg_index_info('layered_v')"),
	't', 'layered: the graph has a navigating layer');
is(scalar(@$layer_profile), 7, 'layered: the profile holds the layer\'s walks');
my @scanned = scanned_means('layered', '<->', $nodes, @efs);
is(scalar(@scanned), 2 * @efs, 'layered: each scan reports its walk of the layer');
for my $step (0 .. $#efs)
{
	cmp_ok(abs($scanned[$step] - $profile->[$step]), '<', 0.01,
		"layered: the profile at ef $efs[$step] ($profile->[$step]) is what scans score from the layer's entries ($scanned[$step])"
	);
	my $layer_scanned = $scanned[ @efs + $step ];
	cmp_ok(abs($layer_scanned - $layer_profile->[$step]), '<', 0.01,
		"layered: the layer's walk at ef $efs[$step] ($layer_profile->[$step]) is the scans' ($layer_scanned)"
	);
}
my $built = join ',', @$profile, @$layer_profile;
$node->safe_psql('postgres', 'ANALYZE layered');
is(join(',', map { @$_ } (stored_profile('layered_v'))[ 1, 2 ]),
	$built, 'layered: ANALYZE, on the pages, measures the build\'s profile again');

# ANALYZE measures the profile again, of the same graph
my $before = join ',', @{ (stored_profile('items_v'))[1] };
$node->safe_psql('postgres', 'ANALYZE items');
is(join(',', @{ (stored_profile('items_v'))[1] }), $before, 'ANALYZE measures the same profile again');

done_testing();
