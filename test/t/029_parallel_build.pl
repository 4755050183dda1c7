# CREATE INDEX with parallel workers in the heap scan, as many as
# plan_create_index_workers gives (the table's parallel_workers, else a count
# by its size, within max_parallel_maintenance_workers), on the CPU path and into the GPU worker's
# segment (where the server has the worker). Every index must hold each
# non-NULL row once and answer as the serial one does: its row count, each
# row found by a search for its own vector, and ORDER BY ... LIMIT 10 against
# a sequential scan's exact answer, in order. Also: an estimate that falls
# short (rows past the shared arrays), CONCURRENTLY, zero vectors under
# cosine, a row of the wrong dimensions (the error still comes), a
# cancelled build (its workers go away, the next build works), and
# parallel_leader_participation = off: two workers place every row, chunk by
# chunk, and the empty places their last chunks leave are filled, so that
# every row is found in the index under its own vector.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use TsdgTest;

my $node = worker_node('parallel_build', 'max_worker_processes = 16', 'max_parallel_workers = 8');
$node->poll_query_until('postgres',
	"SELECT state IN ('ready', 'no gpu', 'not preloaded') FROM tsdg_gpu_status()")
  or die 'the GPU worker did not settle';
my $with_worker = worker_status($node, 'state') eq 'ready';
note $with_worker ? 'builds on the GPU worker too' : 'no GPU worker: CPU builds only';

my $dir = PostgreSQL::Test::Utils::tempdir();
chmod 0755, $dir;
write_subspace_clusters("$dir/items.tsv", 6000, 32, 40, 1, 7);
write_subspace_clusters("$dir/queries.tsv", 20, 32, 40, 1, 8);
$node->safe_psql('postgres', qq{
	CREATE TABLE items (id int, v vector(32));
	\\copy items FROM '$dir/items.tsv'
	INSERT INTO items SELECT 100000 + i, NULL FROM generate_series(1, 50) i;
	CREATE TABLE forced (LIKE items);
	INSERT INTO forced SELECT * FROM items;
	ALTER TABLE forced SET (parallel_workers = 2);
	CREATE TABLE queries (id int, v vector(32));
	\\copy queries FROM '$dir/queries.tsv'
	VACUUM ANALYZE items, forced, queries;
	CREATE TABLE truth AS
	  SELECT q.id AS query, t.ids FROM queries q,
	    LATERAL (SELECT array_agg(id ORDER BY d, id) AS ids
	             FROM (SELECT id, v <-> q.v AS d FROM items WHERE v IS NOT NULL
	                   ORDER BY d, id LIMIT 10) n) t;});

# runs $sql and returns the LOG line of the build of $index
sub build
{
	my ($index, $sql) = @_;
	my $from = -s $node->logfile;
	$node->safe_psql('postgres', $sql);
	my ($line) = slurp_file($node->logfile, $from) =~ /(tsdg index "$index" built from[^\n]*)/;
	return $line // '';
}

sub workers_of
{
	my ($line) = @_;
	return $line =~ /with (\d+) parallel workers?/ ? $1 : 0;
}

# the index holds every non-NULL row of $table once, each row finds itself
# (500 of them, over the whole table), and the queries' 10 nearest come in
# order and as the sequential scan found them
sub check_index
{
	my ($index, $table, $label) = @_;
	is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('$index')"),
		$node->safe_psql('postgres', "SELECT count(v) FROM $table"),
		"$label: every non-NULL row, once");
	my $misses = $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET tsdg.ef_search = 200;
		SELECT count(*) FROM $table p WHERE p.id % 12 = 0 AND p.v IS NOT NULL
		  AND (SELECT t.id FROM $table t ORDER BY t.v <-> p.v LIMIT 1) <> p.id});
	cmp_ok($misses, '<=', 5, "$label: the rows find themselves ($misses of 500 do not)");
	my ($found, $unordered) = split /\|/, $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET tsdg.ef_search = 200;
		SELECT sum(cardinality(ARRAY(SELECT unnest(r.ids) INTERSECT SELECT unnest(t.ids)))),
		       sum(r.unordered)
		FROM truth t, queries q,
		  LATERAL (SELECT array_agg(id) AS ids,
		                  count(*) FILTER (WHERE d < prev) AS unordered
		           FROM (SELECT id, d, lag(d) OVER () AS prev
		                 FROM (SELECT id, v <-> q.v AS d FROM $table ORDER BY v <-> q.v LIMIT 10) s) w) r
		WHERE q.id = t.query});
	cmp_ok($found, '>=', 196, "$label: $found of the 200 nearest rows of a sequential scan");
	is($unordered, 0, "$label: the results come nearest first");
	return;
}

# 1. max_parallel_maintenance_workers 0 and 2 on a table without
# parallel_workers: the session scans alone, then with the workers its size
# gets (min_parallel_table_scan_size 0 gives this small one some), none where
# its size gets none; and the table whose parallel_workers asks for 2; on the
# CPU, then on the worker
my @devices = ('cpu');
push @devices, 'auto' if $with_worker;
for my $device (@devices)
{
	my $set = "SET tsdg.device = $device; SET min_parallel_table_scan_size = 0;";
	my $line = build("items_${device}_0",
		"$set SET max_parallel_maintenance_workers = 0;
		 CREATE INDEX items_${device}_0 ON items USING tsdg (v vector_l2_ops)");
	is(workers_of($line), 0, "$device, max_parallel_maintenance_workers = 0: no parallel worker")
	  or diag $line;
	like($line, qr/into shared memory/, "$device: the serial build goes to the worker's segment")
	  if $device eq 'auto';
	check_index("items_${device}_0", 'items', "$device, serial");
	$node->safe_psql('postgres', "DROP INDEX items_${device}_0");

	$line = build("items_${device}_2",
		"$set SET max_parallel_maintenance_workers = 2;
		 CREATE INDEX items_${device}_2 ON items USING tsdg (v vector_l2_ops)");
	cmp_ok(workers_of($line), '>=', 1,
		"$device, max_parallel_maintenance_workers = 2, no parallel_workers: workers by the table's size")
	  or diag $line;
	check_index("items_${device}_2", 'items', "$device, by size at max_parallel_maintenance_workers = 2");
	$node->safe_psql('postgres', "DROP INDEX items_${device}_2");

	$line = build("items_${device}_small",
		"SET tsdg.device = $device; SET max_parallel_maintenance_workers = 2;
		 SET min_parallel_table_scan_size = '1GB';
		 CREATE INDEX items_${device}_small ON items USING tsdg (v vector_l2_ops)");
	is(workers_of($line), 0, "$device, a table below min_parallel_table_scan_size: no parallel worker")
	  or diag $line;
	check_index("items_${device}_small", 'items', "$device, serial below min_parallel_table_scan_size");
	$node->safe_psql('postgres', "DROP INDEX items_${device}_small");

	$line = build("items_${device}_off",
		"$set SET max_parallel_maintenance_workers = 2; ALTER TABLE items SET (parallel_workers = 0);
		 CREATE INDEX items_${device}_off ON items USING tsdg (v vector_l2_ops)");
	is(workers_of($line), 0, "$device, the table's parallel_workers = 0: no parallel worker")
	  or diag $line;
	$node->safe_psql('postgres', "ALTER TABLE items RESET (parallel_workers); DROP INDEX items_${device}_off");

	$line = build("forced_$device",
		"SET tsdg.device = $device; SET max_parallel_maintenance_workers = 2;
		 CREATE INDEX forced_$device ON forced USING tsdg (v vector_l2_ops)");
	is(workers_of($line), 2, "$device, parallel_workers = 2: two parallel workers") or diag $line;
	like($line, qr/into shared memory, with/, "$device: the workers fill the worker's segment")
	  if $device eq 'auto';
	check_index("forced_$device", 'forced', "$device, parallel_workers = 2");
	$node->safe_psql('postgres', "DROP INDEX forced_$device");
}

# 2. CONCURRENTLY: the workers scan with the session's MVCC snapshot
my $line = build('forced_concurrently',
	'CREATE INDEX CONCURRENTLY forced_concurrently ON forced USING tsdg (v vector_l2_ops)');
is(workers_of($line), 2, 'CONCURRENTLY: two parallel workers') or diag $line;
is($node->safe_psql('postgres',
		"SELECT indisvalid FROM pg_index WHERE indexrelid = 'forced_concurrently'::regclass"),
	't', 'CONCURRENTLY: the index is valid');
check_index('forced_concurrently', 'forced', 'CONCURRENTLY');
$node->safe_psql('postgres', 'DROP INDEX forced_concurrently');

# 3. The estimate falls short: ANALYZE sees 300 wide rows (about 6 a page),
# which are deleted, and 12000 narrow rows are added without a new ANALYZE,
# so the shared arrays have room for far fewer rows than the scan finds (a
# table for each build: CREATE INDEX sets the table's row count)
for my $device (@devices)
{
	$node->safe_psql('postgres', qq{SELECT setseed(0.25);
		CREATE TABLE short_$device (id int, pad text, v vector(16)) WITH (parallel_workers = 2);
		ALTER TABLE short_$device ALTER COLUMN pad SET STORAGE PLAIN;
		INSERT INTO short_$device SELECT -i, (SELECT string_agg(md5(random()::text || j), '')
		  FROM generate_series(1, 40) j WHERE i > 0), NULL FROM generate_series(1, 300) i;
		ANALYZE short_$device;
		DELETE FROM short_$device;
		INSERT INTO short_$device SELECT i, NULL, } . random_vector_sql(16, 'i') . ' FROM generate_series(1, 12000) i');
	$line = build("short_${device}_idx",
		"SET tsdg.device = $device; CREATE INDEX short_${device}_idx ON short_$device USING tsdg (v vector_l2_ops)");
	cmp_ok(workers_of($line), '>=', 1, "short estimate, $device: parallel workers") or diag $line;
	my ($past) = $line =~ /(\d+) rows past the estimate/;
	cmp_ok($past // 0, '>', 5000, "short estimate, $device: rows past the shared arrays");
	like($line, qr/grown \d+ times/, 'short estimate: the segment grew once the scan was over')
	  if $device eq 'auto';
	is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('short_${device}_idx')"),
		12000, "short estimate, $device: every row");
	is($node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET tsdg.ef_search = 200;
		SELECT count(*) FROM short_$device p WHERE p.id % 24 = 0
		  AND (SELECT t.id FROM short_$device t ORDER BY t.v <-> p.v LIMIT 1) <> p.id}),
		0, "short estimate, $device: the rows find themselves");
}

# 4. Zero vectors under cosine have no place in the index: none may leave an
# empty place in the shared arrays
$node->safe_psql('postgres', q{
	CREATE TABLE zeros (id int, v vector(8)) WITH (parallel_workers = 2);
	INSERT INTO zeros SELECT i, CASE WHEN i % 100 = 0 THEN array_fill(0, ARRAY[8])::vector
	  ELSE ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i), i % 7, i % 11, i % 13, i % 17]::real[]::vector END
	  FROM generate_series(1, 5000) i;});
for my $device (@devices)
{
	$line = build("zeros_$device",
		"SET tsdg.device = $device; CREATE INDEX zeros_$device ON zeros USING tsdg (v vector_cosine_ops)");
	cmp_ok(workers_of($line), '>=', 1, "zero vectors, $device: parallel workers") or diag $line;
	is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('zeros_$device')"),
		4950, "zero vectors, $device: the other rows, without a gap");
	is($node->safe_psql('postgres', qq{
		SET enable_seqscan = off;
		SELECT count(*) FROM zeros p WHERE p.id % 50 = 1
		  AND (SELECT t.id FROM zeros t ORDER BY t.v <=> p.v LIMIT 1) <> p.id}),
		0, "zero vectors, $device: the rows find themselves");
	$node->safe_psql('postgres', "DROP INDEX zeros_$device");
}

# 5. A row of other dimensions, behind a cast to the index's, fails the
# build in whichever process reads it
$node->safe_psql('postgres', q{
	CREATE TABLE loose (id int, v vector) WITH (parallel_workers = 2);
	INSERT INTO loose SELECT i, ARRAY[sin(i), cos(i), i % 7, i % 11]::real[]::vector
	  FROM generate_series(1, 4000) i;
	INSERT INTO loose VALUES (0, '[1,2,3]');
	INSERT INTO loose SELECT i, ARRAY[sin(i), cos(i), i % 7, i % 11]::real[]::vector
	  FROM generate_series(4001, 8000) i;});
for my $device (@devices)
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET tsdg.device = $device; CREATE INDEX loose_$device ON loose USING tsdg ((v::vector(4)) vector_l2_ops)");
	isnt($ret, 0, "wrong dimensions, $device: the build fails");
	like($err, qr/ERROR:  expected 4 dimensions, not 3/, "wrong dimensions, $device: the error says why");
}
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname LIKE 'loose\\_%'"),
	0, 'wrong dimensions: no index is left');

# 6. A build cancelled while its workers scan: each row costs a millisecond
# in the index expression, so the scan lasts seconds
$node->safe_psql('postgres', q{
	CREATE FUNCTION slow(v vector) RETURNS vector LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
	  AS $$ BEGIN PERFORM pg_sleep(0.001); RETURN v; END $$;
	CREATE TABLE slow_rows (id int, v vector(4)) WITH (parallel_workers = 2);
	INSERT INTO slow_rows SELECT i, ARRAY[sin(i), cos(i), i % 7, i % 11]::real[]::vector
	  FROM generate_series(1, 6000) i;});
my ($out, $err) = ('', '');
my $session = IPC::Run::start(
	[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c',
	  'SET tsdg.device = cpu; SET application_name = slow_build;
	   CREATE INDEX slow_idx ON slow_rows USING tsdg ((slow(v)::vector(4)) vector_l2_ops)' ],
	'>', \$out, '2>', \$err);
my $leader = '';
my $helpers = 0;
for (1 .. 1000)
{
	$leader = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
		WHERE application_name = 'slow_build' AND backend_type = 'client backend'});
	$helpers = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker' AND leader_pid = '$leader'")
	  if $leader ne '';
	last if $helpers > 0;
	usleep(10_000);
}
cmp_ok($helpers, '>=', 1, 'the slow build has parallel workers scanning');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($leader)");
ok(!$session->finish, 'the cancelled build fails');
like($err, qr/canceling statement due to user request/, 'the build was cancelled');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'parallel worker'"),
	'the workers are gone');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname = 'slow_idx'"),
	0, 'no index is left');
$node->safe_psql('postgres', 'DROP FUNCTION slow(vector) CASCADE');
$line = build('slow_rows_idx', 'CREATE INDEX slow_rows_idx ON slow_rows USING tsdg (v vector_l2_ops)');
cmp_ok(workers_of($line), '>=', 1, 'after the cancel, a parallel build works') or diag $line;
is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('slow_rows_idx')"),
	6000, 'after the cancel: every row');

# 7. parallel_leader_participation = off: the session does not scan, so
# the two workers place every row, each in chunks of its own, and the last
# chunk of each ends in empty places, which the rows above the count fill.
# The index is partial on a predicate that pauses at every 2000th row, so
# that the scan outlasts the workers' start and both take blocks to the end.
# Every row must be in the index once, under its own vector: an unlimited
# ORDER BY scan that goes to the exact pass over the row pages at once
# (tsdg.max_scan_tuples 1) returns every row once, in the order of the
# distances of the heap's vectors; the 10 nearest are a sequential scan's.
# A build whose last chunks happen to end full moves nothing, so the builds
# (plain and CONCURRENTLY) must move rows between them. maintenance_work_mem
# 256MB: a build on the CPU whose arrays and graph would not fit scans alone.
write_subspace_clusters("$dir/chunked.tsv", 40000, 32, 40, 1, 9);
$node->safe_psql('postgres', qq{
	CREATE FUNCTION paced(id int) RETURNS bool LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
	  AS \$\$ BEGIN IF id % 2000 = 0 THEN PERFORM pg_sleep(0.01); END IF; RETURN true; END \$\$;
	CREATE TABLE chunked (id int, v vector(32)) WITH (parallel_workers = 2);
	\\copy chunked FROM '$dir/chunked.tsv'
	INSERT INTO chunked SELECT 100000 + i, NULL FROM generate_series(1, 50) i;
	VACUUM ANALYZE chunked;
	CREATE TABLE chunked_truth AS
	  SELECT q.id AS query, t.ids FROM queries q,
	    LATERAL (SELECT array_agg(id ORDER BY d, id) AS ids
	             FROM (SELECT id, v <-> q.v AS d FROM chunked WHERE v IS NOT NULL
	                   ORDER BY d, id LIMIT 10) n) t;});
my $chunked_rows = $node->safe_psql('postgres', 'SELECT count(v) FROM chunked');
my $moved = 0;
for my $device (@devices)
{
	for my $concurrently ('', 'CONCURRENTLY')
	{
		my $label = "leader off, $device" . ($concurrently ? ', CONCURRENTLY' : '');
		my $index = "chunked_$device" . ($concurrently ? '_concurrently' : '');
		$line = build($index,
			"SET tsdg.device = $device; SET max_parallel_maintenance_workers = 2;
			 SET parallel_leader_participation = off; SET maintenance_work_mem = '256MB';
			 CREATE INDEX $concurrently $index ON chunked USING tsdg (v vector_l2_ops) WHERE paced(id)");
		is(workers_of($line), 2, "$label: two parallel workers") or diag $line;
		my @placed = $line =~ /rows placed (\d+) \+ (\d+) \+ (\d+)/;
		is($placed[0], 0, "$label: the session placed no row") or diag $line;
		cmp_ok($placed[$_], '>', 2 * 1024, "$label: worker $_ placed rows in several chunks")
		  for (1, 2);
		$moved += ($line =~ /(\d+) moved into the last chunks' empty places/)[0] // 0;
		# CONCURRENTLY adds a row the build left out as a pending row
		is($node->safe_psql('postgres', "SELECT rows || ' ' || pending FROM tsdg_index_info('$index')"),
			"$chunked_rows 0", "$label: every non-NULL row, none pending");
		is($node->safe_psql('postgres', qq{
			SET enable_seqscan = off; SET tsdg.max_scan_tuples = 1;
			SELECT count(*) FILTER (WHERE rows <> $chunked_rows OR ids <> $chunked_rows OR unordered > 0)
			FROM queries q,
			  LATERAL (SELECT count(*) AS rows, count(DISTINCT id) AS ids,
			                  count(*) FILTER (WHERE n > 2 AND d < prev - 1e-4 * prev) AS unordered
			           FROM (SELECT id, d, lag(d) OVER () AS prev, row_number() OVER () AS n
			                 FROM (SELECT id, v <-> q.v AS d FROM chunked WHERE paced(id)
			                       ORDER BY v <-> q.v) s) w) r
			WHERE q.id <= 3}),
			0, "$label: an unlimited scan returns every row once, in the order of its vector");
		is($node->safe_psql('postgres', qq{
			SET enable_seqscan = off; SET tsdg.ef_search = 400;
			SELECT count(*) FROM chunked_truth t, queries q
			WHERE q.id = t.query AND t.ids IS DISTINCT FROM
			  ARRAY(SELECT id FROM chunked WHERE paced(id) ORDER BY v <-> q.v LIMIT 10)}),
			0, "$label: the 10 nearest rows are a sequential scan's, in order");
		$node->safe_psql('postgres', "DROP INDEX $index");
	}
}
cmp_ok($moved, '>', 0, "leader off: rows were moved into the last chunks' empty places ($moved)");

# with no worker to launch, the session scans alone all the same
$line = build('chunked_alone',
	"SET max_parallel_maintenance_workers = 2; SET max_parallel_workers = 0;
	 SET parallel_leader_participation = off; SET maintenance_work_mem = '256MB';
	 CREATE INDEX chunked_alone ON chunked USING tsdg (v vector_l2_ops)");
is(workers_of($line), 0, 'leader off, no worker launched: no parallel worker') or diag $line;
is($node->safe_psql('postgres', "SELECT rows FROM tsdg_index_info('chunked_alone')"),
	$chunked_rows, 'leader off, no worker launched: the session scanned every row');

unlike(slurp_file($node->logfile), qr/terminated by signal|was terminated by/, 'no process crashed');
$node->stop;
done_testing();
