# pg_tsdg beside pgvector: in a database with pgvector's extension "vector",
# CREATE EXTENSION pg_tsdg gives tsdg indexes on pgvector's vector columns,
# pgvector's hnsw indexes (and its other types) keep working in the same
# sessions, and pg_dump/pg_restore carries both. The two shared objects share
# one backend without binding to each other's functions: the dynamic linker's
# own trace of the server (LD_DEBUG=bindings) shows no symbol of one resolved
# in the other, pg_tsdg loaded first (preloaded) or on demand. And a database
# made with pg_tsdg's own extension vector moves onto pgvector by dump and
# restore.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgvectorInstall;

my $dims = 64;
my $rows = 3000;
my $queries = 20;
my $min_recall = 0.9;

my ($install, $private) = pgvector_install();

# pg_tsdg's install rule leaves pgvector's extension "vector" alone
if ($private)
{
	my $make = `make -s -C @{[ repository_root() ]} -o pg_tsdg_vector.so install-vector PG_CONFIG=$install/bin/pg_config 2>&1`;
	like($make, qr/another extension "vector" \(pgvector\) is installed: not replacing it/,
		'make install says it keeps pgvector\'s extension vector');
	my $control = slurp_file(`$install/bin/pg_config --sharedir` =~ s/\n//r . '/extension/vector.control');
	like($control, qr/default_version = '0\.8\.6'/, 'pgvector\'s vector.control is still there');
}

# Rows on 30 clusters, each on its own 16 of the 64 dimensions (neighbouring
# clusters share some, others none), the queries drawn from the same clusters.
sub clustered
{
	my ($count, $seed) = @_;
	return qq{
	SELECT i, (SELECT array_agg(CASE WHEN (d + i % 30 * 5) % $dims < 16
			THEN (i % 30) * 0.3 + random() ELSE random() * 0.02 END)
		FROM generate_series(1, $dims) AS d)::vector($dims) AS v
	FROM (SELECT setseed($seed)) AS s, generate_series(1, $count) AS i};
}

sub exported
{
	my ($library) = @_;
	return { map { (split ' ')[2] => 1 } grep { split(' ') == 3 } split /\n/,
		  `nm -D --defined-only $library` };
}

# recall@10 of the index's answers (the plan forced to an index scan) against
# the exact ones (a sequential scan), over the query table
sub recall
{
	my ($node, $db, $table, $op) = @_;
	my $search = qq{
		SELECT q.i, s.id FROM queries q, LATERAL (
			SELECT id FROM $table ORDER BY v $op q.v LIMIT 10) AS s};
	my %exact = map { $_ => 1 } split /\n/,
	  $node->safe_psql($db, "SET enable_indexscan = off; $search");
	my @found = split /\n/, $node->safe_psql($db, "SET enable_seqscan = off; $search");
	return (scalar(grep { $exact{$_} } @found)) / (10 * $queries);
}

for my $preload (1, 0)
{
	my $label = $preload ? 'pg_tsdg preloaded' : 'pg_tsdg loaded on demand';
	my $node = PostgreSQL::Test::Cluster->new($preload ? 'beside_preload' : 'beside_stock',
		install_path => $install);
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_tsdg'") if $preload;
	my $trace = PostgreSQL::Test::Utils::tempdir;
	{
		local $ENV{LD_DEBUG} = 'bindings';
		local $ENV{LD_DEBUG_OUTPUT} = "$trace/ld";
		$node->start;
	}

	my ($rc, $out, $err) = $node->psql('postgres', "LOAD 'pg_tsdg'");
	if ($rc != 0)
	{
		note("$label: pg_tsdg does not load here: $err");
		$node->stop('immediate');
		next;
	}

	$node->safe_psql('postgres', 'CREATE EXTENSION vector');
	is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
		'0.8.6', "$label: the extension vector is pgvector's");
	$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg');
	pass("$label: CREATE EXTENSION pg_tsdg in a database with pgvector");

	$node->safe_psql('postgres', qq{
		CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
		INSERT INTO items @{[ clustered($rows, 0.1) ]};
		CREATE TABLE items_hnsw AS TABLE items;
		ALTER TABLE items_hnsw ADD PRIMARY KEY (id);
		CREATE TABLE queries AS @{[ clustered($queries, 0.2) ]};
		CREATE INDEX items_tsdg ON items USING tsdg (v vector_l2_ops);
		CREATE INDEX items_tsdg_cosine ON items USING tsdg (v vector_cosine_ops);
		CREATE INDEX items_tsdg_l1 ON items USING tsdg (v vector_l1_ops);
		CREATE INDEX items_hnsw_l2 ON items_hnsw USING hnsw (v vector_l2_ops);
		-- rows after the build go to both indexes
		INSERT INTO items SELECT id + $rows, v FROM (@{[ clustered(200, 0.3) ]}) AS g(id, v);
		INSERT INTO items_hnsw SELECT id + $rows, v FROM (@{[ clustered(200, 0.3) ]}) AS g(id, v);
		ANALYZE;});

	like($node->safe_psql('postgres',
			"SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries LIMIT 1) LIMIT 10"),
		qr/Index Scan using items_tsdg /, "$label: ORDER BY <-> on pgvector's type uses the tsdg index");
	like($node->safe_psql('postgres',
			"SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT id FROM items_hnsw ORDER BY v <-> (SELECT v FROM queries LIMIT 1) LIMIT 10"),
		qr/Index Scan using items_hnsw_l2/, "$label: the hnsw index answers its table");
	my %recall = (
		tsdg_l2 => recall($node, 'postgres', 'items', '<->'),
		tsdg_cosine => recall($node, 'postgres', 'items', '<=>'),
		tsdg_l1 => recall($node, 'postgres', 'items', '<+>'),
		hnsw_l2 => recall($node, 'postgres', 'items_hnsw', '<->'));
	for my $index (sort keys %recall)
	{
		cmp_ok($recall{$index}, '>=', $min_recall, "$label: recall\@10 of $index is $recall{$index}");
	}

	# pg_tsdg's batch search takes arrays of pgvector's type
	is($node->safe_psql('postgres', q{
		SELECT count(*), count(DISTINCT query) FROM tsdg_search_batch('items_tsdg',
			(SELECT array_agg(v ORDER BY i) FROM queries), 10)}),
		10 * $queries . "|$queries", "$label: tsdg_search_batch over an array of pgvector's vectors");

	# pgvector's other types and functions in the same session
	is($node->safe_psql('postgres', q{
		LOAD 'pg_tsdg';
		SELECT '[1,2,3]'::halfvec <-> '[1,2,5]'::halfvec, l2_normalize('[3,4]'::vector),
			'[1,2]'::vector::halfvec(2), vector_dims(subvector('[1,2,3,4]'::vector, 2, 2))}),
		'2|[0.6,0.8]|[1,2]|2', "$label: pgvector's halfvec and functions in a session that loaded pg_tsdg");

	# one backend that searched both indexes
	my @out = split /\n/, $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries LIMIT 1) LIMIT 1;
		SELECT id FROM items_hnsw ORDER BY v <-> (SELECT v FROM queries LIMIT 1) LIMIT 1;
		SELECT pg_backend_pid()});
	my $pid = $out[-1];
	# each line of the trace starts with the process's id; forked processes
	# write to the postmaster's file
	my (%into, %traced);
	for my $file (glob("$trace/ld.*"))
	{
		open(my $fh, '<', $file) or die "$file: $!";
		while (<$fh>)
		{
			next unless m{^\s*(\d+):\s+binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'};
			my ($process, $from, $to, $symbol) = ($1, $2, $3, $4);
			$traced{vector}++ if $process == $pid && $from =~ m{/vector\.so$};
			$traced{pg_tsdg}++ if $from =~ m{/pg_tsdg\.so$};
			$into{"$from -> $to: $symbol"} = 1
			  if ($from =~ m{/vector\.so$} && $to =~ m{/pg_tsdg[^/]*\.so$})
			  || ($from =~ m{/pg_tsdg[^/]*\.so$} && $to =~ m{/vector\.so$});
		}
		close $fh;
	}
	ok($traced{vector}, "$label: the trace shows pgvector's bindings in the backend that searched both indexes");
	ok($traced{pg_tsdg}, "$label: the trace shows pg_tsdg's bindings");
	is(join("\n", sort keys %into), '', "$label: neither shared object binds to the other's symbols");

	# dump and restore of a database with both
	my $dir = PostgreSQL::Test::Utils::tempdir;
	$node->command_ok([ 'pg_dump', '-Fc', '-f', "$dir/both.dump", '-d', $node->connstr('postgres') ],
		"$label: pg_dump of a database with pgvector and pg_tsdg");
	$node->safe_psql('postgres', 'CREATE DATABASE restored');
	$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), "$dir/both.dump" ],
		"$label: pg_restore");
	is($node->safe_psql('restored', q{
		SELECT string_agg(c.relname || ':' || a.amname, ',' ORDER BY c.relname)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
		WHERE i.indisvalid AND a.amname IN ('hnsw', 'tsdg')}),
		'items_hnsw_l2:hnsw,items_tsdg:tsdg,items_tsdg_cosine:tsdg,items_tsdg_l1:tsdg',
		"$label: the restored database has both kinds of index, valid");
	for my $index (sort keys %recall)
	{
		my ($table, $op) = $index eq 'hnsw_l2' ? ('items_hnsw', '<->')
		  : $index eq 'tsdg_l2' ? ('items', '<->') : ('items', '<=>');
		cmp_ok(recall($node, 'restored', $table, $op), '>=', $min_recall,
			"$label: recall\@10 of the restored $index");
	}
	$node->stop;
}

# from pg_tsdg's extension vector to pgvector: a dump of a database on a
# server without pgvector restores on one with it, tsdg index and all
my $ours = PostgreSQL::Test::Cluster->new('without_pgvector');
$ours->init;
$ours->start;
if ($ours->safe_psql('postgres', "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
	=~ /\+tsdg$/)
{
	$ours->safe_psql('postgres', qq{
		CREATE EXTENSION pg_tsdg CASCADE;
		CREATE TABLE items (id int PRIMARY KEY, v vector($dims));
		INSERT INTO items @{[ clustered($rows, 0.1) ]};
		CREATE TABLE queries AS @{[ clustered($queries, 0.2) ]};
		CREATE INDEX items_tsdg ON items USING tsdg (v vector_l2_ops);});
	my $dir = PostgreSQL::Test::Utils::tempdir;
	$ours->command_ok([ 'pg_dump', '-Fc', '-f', "$dir/ours.dump", '-d', $ours->connstr('postgres') ],
		'pg_dump of a database with pg_tsdg\'s extension vector');
	my $target = PostgreSQL::Test::Cluster->new('moved_to_pgvector', install_path => $install);
	$target->init;
	$target->start;
	$target->safe_psql('postgres', 'CREATE DATABASE moved');
	$target->command_ok([ 'pg_restore', '--exit-on-error', '-d', $target->connstr('moved'), "$dir/ours.dump" ],
		'pg_restore on a server with pgvector');
	is($target->safe_psql('moved', "SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
		'0.8.6', 'the restored database has pgvector\'s extension vector');
	cmp_ok(recall($target, 'moved', 'items', '<->'), '>=', $min_recall,
		'recall@10 of the tsdg index restored onto pgvector\'s type');
	$target->stop;
}
else
{
	note('the server in PATH has pgvector: no database with pg_tsdg\'s extension vector to move');
}
$ours->stop;

# by name: what each object exports (t/040_vector_extension.pl checks pg_tsdg's
# list in full)
my $pgvector = exported("$install/lib/vector.so");
my $tsdg = exported("$install/lib/pg_tsdg.so");
my @both = sort grep { $pgvector->{$_} && !/^(Pg_magic_func|_PG_init)$/ } keys %$tsdg;
is("@both", '', 'pg_tsdg.so and pgvector\'s vector.so export no function of the same name');

done_testing();
