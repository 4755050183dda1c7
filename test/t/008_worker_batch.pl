# tsdg_search_batch and tsdg_search_batch_arrays through the GPU worker, the
# session's side: the segment a session keeps for its batches is reused by a
# smaller batch, replaced by a larger one, and given up after a batch
# cancelled while the worker searched it; every answer equals the CPU path's,
# and the arrays form holds the rows of the row form. The batch area of the
# main shared memory (tsdg.batch_memory): one session at a time uses it, a
# concurrent one its own segment; a batch given up while the worker searches
# it keeps the area from the next batch until the worker lets go, and a
# worker killed during such a batch does not keep it. The GPU walks the graph
# otherwise than the CPU and computes distances from norms: with
# TSDG_WORKER_BACKEND=cuda the worker's answers are compared with its own
# answer to the same batch, and where a batch may be answered by either (the
# worker killed meanwhile), with either.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $node = worker_node('worker_batch');
wait_for_worker($node);
my $cpu_backend = ($ENV{TSDG_WORKER_BACKEND} // 'cpu') eq 'cpu';

$node->safe_psql('postgres', q{
	SELECT setseed(0.75);
	CREATE TABLE items (id int, v vector(32));
	INSERT INTO items SELECT i, } . random_vector_sql(32, 'i') . q{ FROM generate_series(1, 20000) i;
	CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
	CREATE TABLE queries AS SELECT i AS q, } . random_vector_sql(32, 'i') . q{ AS v
	  FROM generate_series(1, 20000) i;
});

# The first batches after CREATE INDEX may run on the CPU while the worker
# prepares the index; the answers compared below are the worker's once one
# small batch was answered by it.
my $answered = 0;
for (1 .. 200)
{
	my $batches = worker_status($node, 'batches');
	$node->safe_psql('postgres',
		"SELECT count(*) FROM tsdg_search_batch('items_idx', (SELECT array_agg(v) FROM queries WHERE q <= 1), 10)");
	$answered = worker_status($node, 'batches') > $batches;
	last if $answered;
	usleep(50_000);
}
ok($answered, 'the worker answers a batch of items_idx');

# a query giving a digest of the (query, tid, distance) rows of a batch of
# the first $size queries, in the rows or the arrays form
sub digest
{
	my ($size, $form) = @_;
	return qq{SELECT md5(string_agg(b.query || ':' || t.tid || ':' || t.distance, ',' ORDER BY b.query, t.distance, t.tid))
	  FROM tsdg_search_batch_arrays('items_idx', (SELECT array_agg(v ORDER BY q) FROM queries WHERE q <= $size), 10) b,
	       unnest(b.tids, b.distances) AS t(tid, distance);}
	  if $form eq 'arrays';
	return qq{SELECT md5(string_agg(b.query || ':' || b.tid || ':' || b.distance, ',' ORDER BY b.query, b.distance, b.tid))
	  FROM tsdg_search_batch('items_idx', (SELECT array_agg(v ORDER BY q) FROM queries WHERE q <= $size), 10) b;};
}

# runs $sql in one session, going on past errors: (stdout, stderr)
sub session
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', $sql, stdout => \$out, stderr => \$err, on_error_stop => 0);
	return ($out, $err);
}

my $cancelled = qr/canceling statement due to statement timeout/;

# one session on tsdg.device $device: a small batch, a larger one, a
# cancelled one, a small one again; the digests of the four answered
sub run_session
{
	my ($device, $form) = @_;
	my ($out, $err) = session(join("\n",
		"SET tsdg.device = $device;",
		digest(100, $form), digest(3000, $form),
		"SET statement_timeout = '30ms';", digest(20000, $form),
		'RESET statement_timeout;', digest(100, $form), digest(3000, $form)));
	like($err, $cancelled, "the 20000-query batch ($device, $form) is cancelled");
	return $out;
}

# a session's two answers to each size, before and after the cancelled batch
sub same_around_cancel
{
	my ($answers, $what) = @_;
	my @lines = split /\n/, $answers;
	is("@lines[2, 3]", "@lines[0, 1]", "$what: the same answers around a cancelled batch");
}

my $worker = run_session('auto', 'rows');
my $cpu = run_session('cpu', 'rows');
if ($cpu_backend)
{
	is($worker, $cpu, 'worker and CPU batches are the same');
}
else
{
	same_around_cancel($worker, 'the worker');
}
my $batches = worker_status($node, 'batches');
cmp_ok($batches, '>=', 4, 'the worker answered the batches');

my $worker_arrays = run_session('auto', 'arrays');
my $cpu_arrays = run_session('cpu', 'arrays');
is($cpu_arrays, $cpu, "the CPU path's arrays hold the neighbors of its rows");
is($worker_arrays, $worker, "the worker's arrays hold the neighbors of its rows");
cmp_ok(worker_status($node, 'batches'), '>=', $batches + 4, 'the worker answered the batches of arrays');

# where the last logged batch of $size queries ran: "batch area" or "own segment"
sub where_ran
{
	my ($size) = @_;
	my @ran = slurp_file($node->logfile) =~ /tsdg_search_batch: $size queries on the ([^:]*)/g;
	my $last = $ran[-1] // 'nowhere';
	return $last =~ /\((.*)\)/ ? $1 : $last;
}

sub one_digest
{
	my ($size) = @_;
	return $node->safe_psql('postgres', digest($size, 'rows'));
}

sub cpu_digest
{
	my ($size) = @_;
	return $node->safe_psql('postgres', 'SET tsdg.device = cpu; ' . digest($size, 'rows'));
}

# a batch of $size queries in the background
sub start_batch
{
	my ($size, $out) = @_;
	return IPC::Run::start(
		[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'), '-c', digest($size, 'rows') ],
		'>', $out, '2>', \my $err);
}

my $cpu3000 = cpu_digest(3000);
my $cpu20000 = cpu_digest(20000);
# what the worker's answers must equal: the CPU path's, or on a GPU its own
my ($ref3000, $ref20000) = ($cpu3000, $cpu20000);
if (!$cpu_backend)
{
	$ref3000 = (split /\n/, $worker)[1];
	$ref20000 = one_digest(20000);
}

# a batch while another session's batch holds the area: its own segment, both right
my $long_out = '';
my $long = start_batch(20000, \$long_out);
usleep(300_000);
my $concurrent = one_digest(3000);
$long->finish;
chomp $long_out;
is($long_out, $ref20000, "the batch in the area is the worker's answer");
is($concurrent, $ref3000, "the concurrent batch is the worker's answer");
# the CPU-backed worker is still searching the 20000 queries 0.3 s later; a GPU may be done
is(where_ran(3000), 'own segment', 'the batch beside one in the area runs in its own segment')
  if $cpu_backend;
is(where_ran(20000), 'batch area', 'the first batch runs in the batch area');

# a batch given up while the worker searches it: the worker drops it at its
# next part and only then lets go of the area (a batch meanwhile runs in its
# own segment). The session is cancelled once the worker has taken its batch (it
# waits for the answer and nothing is queued): a statement timeout, or a
# cancel while the batch is queued, could come before the worker takes it,
# and the worker never takes a batch given up.
my $log_before_cancel = -s $node->logfile;
my $giving_up = $node->background_psql('postgres', on_error_stop => 0);
my $giving_up_pid = $giving_up->query_safe('SELECT pg_backend_pid()');
$giving_up->query_until(qr/sent\n/, "\\echo sent\n" . digest(20000, 'rows') . "\n");
$node->safe_psql('postgres', qq{
	DO \$\$ BEGIN
	  FOR i IN 1..20000 LOOP
	    PERFORM pg_stat_clear_snapshot();
	    EXIT WHEN EXISTS (SELECT FROM pg_stat_activity WHERE pid = $giving_up_pid AND wait_event_type = 'Extension')
	      AND (SELECT queue_depth FROM tsdg_gpu_status()) = 0;
	    PERFORM pg_sleep(0.001);
	  END LOOP;
	  PERFORM pg_cancel_backend($giving_up_pid);
	END \$\$});
my $given_up = $giving_up->query(digest(3000, 'rows'));
like($giving_up->{stderr}, qr/canceling statement due to user request/, 'the batch to give up is cancelled');
$giving_up->quit;
is($given_up, $ref3000, "the batch after a cancelled one is the worker's answer");
my $dropped = 0;
for (1 .. 300)
{
	$dropped = slurp_file($node->logfile, $log_before_cancel) =~
	  /dropped a batch of 20000 queries after \d+ of them: its session gave it up/;
	last if $dropped && worker_status($node, 'queue_depth') == 0;
	usleep(100_000);
}
# a GPU may have answered the batch before the cancel came
ok($dropped, 'the worker dropped the given-up batch') if $cpu_backend;
usleep(500_000);
is(one_digest(3000), $ref3000, "the batch after the worker let go is the worker's answer");
is(where_ran(3000), 'batch area', 'the area is free again after the worker let go');

# the worker killed while it searches a batch in the area: the batch
# answered on the CPU, the area free again
my $worker_pid = worker_status($node, 'worker_pid');
my $killed_out = '';
my $killed_batch = start_batch(20000, \$killed_out);
usleep(300_000);
kill 'KILL', $worker_pid;
$killed_batch->finish;
chomp $killed_out;
ok($killed_out eq $cpu20000 || $killed_out eq $ref20000,
	"the batch whose worker was killed is the CPU's answer or the worker's: $killed_out");
$node->poll_query_until('postgres', "SELECT state = 'ready' FROM tsdg_gpu_status()");
# The restarted worker holds no index yet: the CPU worker's first batch
# ships it; the GPU's first batches may run on the CPU while it settles, so
# up to five are tried there
for (1 .. 5)
{
	my $after_restart = one_digest(3000);
	ok($after_restart eq $ref3000 || $after_restart eq $cpu3000,
		"the batch after the restart is the worker's answer or the CPU's: $after_restart");
	last if $cpu_backend || where_ran(3000) eq 'batch area';
	usleep(500_000);
}
is(where_ran(3000), 'batch area', 'the area is free for the restarted worker');

done_testing();
