# A merge never waits for scans: with a cursor open on the table since
# before the previous merge (its scan pins the metapage), tsdg_merge()
# refuses at once with SQLSTATE 55P03 instead of waiting for the cursor
# while it holds the lock that keeps VACUUM out, in another session and in
# the cursor's own; VACUUM meanwhile finishes, and the merge runs once the
# cursor is closed.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = worker_node('merge_pins');
my $rows = sub {
	my ($from, $to) = @_;
	return "INSERT INTO items SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i), "
	  . "i % 7, i % 11, i % 13, i % 17]::real[]::vector FROM generate_series($from, $to) i";
};
$node->safe_psql('postgres',
	join(";\n",
		'CREATE TABLE items (id int, v vector(8))',
		$rows->(1, 2000),
		'CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops)',
		$rows->(2001, 2200),
		"SELECT tsdg_merge('items_idx')",
		$rows->(2201, 2400)));

my $cursor = $node->background_psql('postgres', on_error_stop => 0);
$cursor->query_safe(
	q{SET enable_seqscan = off;
	BEGIN;
	DECLARE c CURSOR FOR SELECT id FROM items ORDER BY v <-> '[0,0,0,0,0,0,0,0]' LIMIT 1000;
	FETCH 1 FROM c;});

my $started = time();
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT tsdg_merge('items_idx')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ],
	timeout => 60);
like($stderr, qr/55P03: tsdg index "items_idx" cannot be merged while a scan/,
	'another session is refused with 55P03');
cmp_ok(time() - $started, '<', 30, 'at once, not after the cursor');
is($node->safe_psql('postgres', 'VACUUM items; SELECT 1', timeout => 60),
	'1', 'VACUUM finishes beside the open cursor');

$cursor->query(q{\set VERBOSITY verbose
	SELECT tsdg_merge('items_idx');});
like($cursor->{stderr}, qr/55P03: tsdg index "items_idx" cannot be merged while a scan/,
	"the cursor's own session is refused with 55P03");
$cursor->{stderr} = '';
$cursor->query_safe('ROLLBACK');
$cursor->quit;

is($node->safe_psql('postgres', "SELECT tsdg_merge('items_idx')"),
	'200', 'the merge runs once the cursor is closed');
is($node->safe_psql('postgres', "SELECT pending FROM tsdg_index_info('items_idx')"),
	'0', 'no row left pending');

$node->stop;
done_testing();
