# The GPU worker reads a request's sizes and array offsets from shared memory
# that another process wrote: a build or a merge (whole or in parts) and an
# index load whose arrays run past their segment, or whose byte sizes
# overflow, or a build or merge in parts of no rows, must be
# refused with a reply, and the worker must go on (not crash and restart).
# The requests come from test/support/tsdg_forge.c, a hostile client built
# here with the server's headers.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = worker_node('worker_bounds');
wait_for_worker($node);

my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
# the server's headers: scripts/common.sh names them where pg_config's install has none
my $includes = $ENV{TSDG_SERVER_INCLUDEDIR} // `pg_config --includedir-server`;
chomp $includes;
plan skip_all => "no server headers in $includes" unless -f "$includes/postgres.h";
my @cflags = ('-shared', '-fPIC', '-O1', "-I$includes", '-I' . source_file('src/pg/worker'),
	'-I' . source_file('src/core/api'));
system('cc', @cflags, '-o', "$dir/tsdg_forge.so", support_file('tsdg_forge.c')) == 0
  or die 'could not build tsdg_forge.so';
chmod 0755, "$dir/tsdg_forge.so";
$node->safe_psql('postgres',
	qq{CREATE FUNCTION tsdg_forge_request(text) RETURNS text AS '$dir/tsdg_forge.so' LANGUAGE C STRICT});

my $starts = worker_status($node, 'worker_starts');
my $pid = worker_status($node, 'worker_pid');
for my $case (
	[ 'build', qr/the build's sizes do not fit its shared memory segment/ ],
	[ 'build in parts', qr/the build's sizes do not fit its shared memory segment/ ],
	[ 'build in parts of no rows', qr/the build's sizes do not fit its shared memory segment/ ],
	[ 'merge', qr/the merge's sizes do not fit its shared memory segment/ ],
	[ 'merge in parts', qr/the merge's sizes do not fit its shared memory segment/ ],
	[ 'merge in parts of no rows', qr/the merge's sizes do not fit its shared memory segment/ ],
	[ 'load',  qr/the index image's sizes do not fit its shared memory segment/ ])
{
	my ($kind, $refusal) = @$case;
	like($node->safe_psql('postgres', "SELECT tsdg_forge_request('$kind')"),
		$refusal, "a $kind request whose arrays do not fit is refused");
	is(worker_status($node, 'worker_pid'), $pid, "the worker lives on after the $kind request");
}
is(worker_status($node, 'worker_starts'), $starts, 'the worker was not restarted');

# the worker still works: a build and a search through it
$node->safe_psql('postgres', q{
	CREATE TABLE items (id int, v vector(8));
	INSERT INTO items SELECT i, } . random_vector_sql(8, 'i') . q{ FROM generate_series(1, 2000) i;
	CREATE INDEX ON items USING tsdg (v vector_l2_ops);});
is( $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 7) LIMIT 1}),
	'7', 'the worker builds and searches after the refused requests');
is(worker_status($node, 'builds'), '1', 'the build ran on the worker');

$node->stop;
done_testing();
