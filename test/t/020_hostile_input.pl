# Hostile input must end in an ERROR, never in a crash or a damaged page:
# the vectors that crashed the server (no dimension, or -1 from a wrapped
# dimension count) under CREATE INDEX, and a VACUUM whose index merge fails
# (here on a damaged pending page), which must still finish and leave the
# pending rows where they were.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = worker_node('hostile');

# the issue's reproductions, as an unprivileged role with TEMP only
$node->safe_psql('postgres', 'CREATE ROLE hostile LOGIN');
for my $bad ("vector_avg('{1}'::float8[])",
	"vector_avg(ARRAY[1::float8] || array_fill(0::float8, ARRAY[65535]))",
	"vector_avg(ARRAY[1::float8] || array_fill(0::float8, ARRAY[16000]))")
{
	my ($ret, $stdout, $stderr) = $node->psql(
		'postgres', qq{
		CREATE TEMP TABLE x (v vector);
		INSERT INTO x SELECT ('[' || g || ',1,2,3,4,5,6,7]')::vector FROM generate_series(1, 3000) g;
		INSERT INTO x SELECT $bad;
		CREATE INDEX ON x USING tsdg (v vector_l2_ops);
		SELECT count(*) FROM x;},
		extra_params => [ '-U', 'hostile', '-v', 'ON_ERROR_STOP=1' ]);
	like($stderr, qr/ERROR:  (vector|different vector dimensions|vector has)/,
		"$bad: a clean ERROR");
	is($node->safe_psql('postgres', 'SELECT 1'), '1', "$bad: the server still answers");
}
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|server process .* was terminated/,
	'no backend died');
# the catalogs are intact: every page of pg_attribute reads back
is($node->safe_psql('postgres',
		'SELECT count(*) > 0 FROM pg_attribute WHERE attrelid = \'pg_class\'::regclass'),
	't', 'pg_attribute reads back');

# VACUUM whose merge fails on a damaged pending page
$node->safe_psql('postgres', q{
	CREATE EXTENSION pageinspect;
	CREATE TABLE items (id int, v vector(8));
	INSERT INTO items SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i),
		i % 7, i % 11, i % 13, i % 17]::real[]::vector FROM generate_series(1, 2000) i;
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
	INSERT INTO items SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i),
		i % 7, i % 11, i % 13, i % 17]::real[]::vector FROM generate_series(2001, 2300) i;
});
# the worker's status lists the index to those who may read its table only
my $listed = q{SELECT count(*) FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c
	WHERE c->>'index' = 'items_idx'};
SKIP:
{
	# only a preloaded server has a worker that holds indexes
	skip 'no GPU worker without shared_preload_libraries', 1
	  unless $ENV{TSDG_TAP_PRELOAD} // 1;
	is($node->safe_psql('postgres', $listed), '1', 'the status lists the index to its owner');
}
is($node->safe_psql('postgres', $listed, extra_params => [ '-U', 'hostile' ]),
	'0', 'and not to a role that may not read the table');

my $pending_before = $node->safe_psql('postgres',
	"SELECT pending FROM tsdg_index_info('items_idx')");
is($pending_before, '300', '300 rows pending before the VACUUM');
# pending pages are the ones after the metapage with special space
my $pending_blocks = $node->safe_psql('postgres', q{
	SELECT string_agg(b::text, ' ') FROM generate_series(1,
		pg_relation_size('items_idx') / 8192 - 1) b
	WHERE (page_header(get_raw_page('items_idx', b::int))).special < 8192});
ok($pending_blocks ne '', "pending pages found: $pending_blocks");
my $path = $node->data_dir . '/'
  . $node->safe_psql('postgres', "SELECT pg_relation_filepath('items_idx')");
$node->stop;
# pd_flags with bits PostgreSQL never sets: the page fails its header check
open(my $fh, '+<', $path) or die "open $path: $!";
binmode $fh;
for my $block (split / /, $pending_blocks)
{
	seek($fh, $block * 8192 + 10, 0) or die "seek: $!";
	print $fh pack('v', 0xFFFF);
}
close $fh;
$node->start;

my ($ret, $stdout, $stderr) = $node->psql('postgres',
	'SET tsdg.merge_threshold = 0; SET tsdg.merge_scale_factor = 0; VACUUM items;');
is($ret, 0, 'VACUUM finishes although its merge fails');
like($stderr, qr/WARNING:  tsdg index "items_idx" not merged: invalid page/,
	'the merge failure is a WARNING');
is($node->safe_psql('postgres', "SELECT pending FROM tsdg_index_info('items_idx')"),
	$pending_before, 'the rows stay pending');
is($node->safe_psql('postgres',
		"SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'items'"),
	'1', 'the VACUUM is counted as done');

$node->stop;
done_testing();
