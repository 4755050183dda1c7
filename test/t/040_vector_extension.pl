# The extension "vector" that pg_tsdg installs where pgvector is not: an
# application that creates it itself (the schema and queries of LangChain's
# PGVector store, with only the index method changed), pg_tsdg on top of it
# with and without CASCADE, dump and restore, dropping it; and the symbols
# each shared object exports. On a server with shared_preload_libraries and
# on a stock one.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Cwd qw(abs_path);
use File::Basename qw(dirname);

my $dims = 32;
my $rows = 2000;

# Rows on 20 clusters, each spread over its own 8 of the 32 dimensions (some
# sharing dimensions, some apart), with the same generator for the queries.
sub clustered
{
	my ($count) = @_;
	return qq{
	SELECT i,
		(SELECT array_agg(CASE WHEN (d + i % 20 * 3) % $dims < 8
			THEN (i % 20) * 0.5 + random() ELSE random() * 0.01 END)
		 FROM generate_series(1, $dims) AS d)::vector($dims)
	FROM generate_series(1, $count) AS i};
}

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;

sub exported_symbols
{
	my ($library) = @_;
	my %symbols;
	for (split /\n/, `nm -D --defined-only $pkglibdir/$library`)
	{
		my @fields = split ' ';
		$symbols{ $fields[2] } = 1 if @fields == 3;
	}
	return \%symbols;
}

# What PostgreSQL looks up by name in an extension's shared object: its magic
# block, _PG_init where it has one, the C functions of its SQL script and
# their pg_finfo_ records, and the background worker's entry point.
sub expected_symbols
{
	my ($node, $db, $extension, @fixed) = @_;
	my %symbols = map { $_ => 1 } @fixed;
	for (split /\n/, $node->safe_psql($db, qq{
		SELECT DISTINCT p.prosrc FROM pg_proc p
		JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
		JOIN pg_extension e ON e.oid = d.refobjid
		WHERE e.extname = '$extension'
		  AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')}))
	{
		$symbols{$_} = 1;
		$symbols{"pg_finfo_$_"} = 1;
	}
	return \%symbols;
}

# the functions PostgreSQL starts background and parallel workers at, named
# in the sources
sub worker_entry_points
{
	my %names;
	my $root = dirname(dirname(dirname(abs_path(__FILE__))));
	for my $file (split /\n/, `find $root/src/pg -name '*.c'`)
	{
		my $source = slurp_file($file);
		$names{$1} = 1 while $source =~ /CreateParallelContext\("pg_tsdg",\s*"(\w+)"/g;
		$names{$1} = 1 while $source =~ /bgw_function_name,\s*BGW_MAXLEN,\s*"(\w+)"/g;
	}
	return sort keys %names;
}

sub same_set
{
	my ($got, $want, $name) = @_;
	my @extra = sort grep { !$want->{$_} } keys %$got;
	my @missing = sort grep { !$got->{$_} } keys %$want;
	is(scalar(@extra) + scalar(@missing), 0, $name)
	  or diag("exported but not looked up: @extra\nlooked up but not exported: @missing");
}

for my $preload (1, 0)
{
	my $label = $preload ? 'preloaded' : 'stock server';
	my $node = PostgreSQL::Test::Cluster->new($preload ? 'vector_preload' : 'vector_stock');
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_tsdg'") if $preload;
	$node->start;

	my $version = $node->safe_psql('postgres',
		"SELECT default_version FROM pg_available_extensions WHERE name = 'vector'");
	if ($version !~ /\+tsdg$/)
	{
		$node->stop;
		plan skip_all => "the extension vector installed here is not pg_tsdg's (version '$version'): "
		  . 'pgvector is installed, and t/041_beside_pgvector.pl tests that case';
	}

	# where the module cannot load without the preload, nothing below can run
	my ($load_rc, $load_out, $load_err) = $node->psql('postgres', "LOAD 'pg_tsdg'");
	if ($load_rc != 0)
	{
		note("$label: pg_tsdg does not load here: $load_err");
		$node->stop('immediate');
		next;
	}

	# the application's own setup, as LangChain's PGVector store runs it: its
	# embedding column has no dimension count
	$node->safe_psql('postgres', 'CREATE DATABASE app');
	for (1 .. 2)
	{
		$node->safe_psql('app', 'CREATE EXTENSION IF NOT EXISTS vector');
	}
	is($node->safe_psql('app', "SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
		$version, "$label: CREATE EXTENSION IF NOT EXISTS vector installs pg_tsdg's");
	$node->safe_psql('app', qq{
		CREATE TABLE langchain_pg_collection (
			uuid uuid PRIMARY KEY, name varchar NOT NULL UNIQUE, cmetadata json);
		CREATE TABLE langchain_pg_embedding (
			id varchar PRIMARY KEY,
			collection_id uuid REFERENCES langchain_pg_collection (uuid) ON DELETE CASCADE,
			embedding vector, document varchar, cmetadata jsonb);
		INSERT INTO langchain_pg_collection
			VALUES ('00000000-0000-0000-0000-000000000001', 'docs', '{}');
		INSERT INTO langchain_pg_embedding
			SELECT 'doc' || i, '00000000-0000-0000-0000-000000000001', v,
				'text ' || i, jsonb_build_object('cluster', i % 20)
			FROM (@{[ clustered($rows) ]}) AS g(i, v);
		CREATE TABLE queries AS SELECT i, v FROM (@{[ clustered(20) ]}) AS g(i, v);
		ANALYZE langchain_pg_embedding;});

	my ($rc, $out, $err) = $node->psql('app',
		'CREATE INDEX ON langchain_pg_embedding USING tsdg (embedding vector_cosine_ops)');
	like($err, qr/access method "tsdg" does not exist/,
		"$label: no tsdg index before CREATE EXTENSION pg_tsdg");

	$node->safe_psql('app', 'CREATE EXTENSION pg_tsdg');
	is($node->safe_psql('app', q{
		SELECT p.probin FROM pg_amproc ap
		JOIN pg_opfamily f ON f.oid = ap.amprocfamily
		JOIN pg_am a ON a.oid = f.opfmethod
		JOIN pg_proc p ON p.oid = ap.amproc
		WHERE a.amname = 'tsdg' AND f.opfname = 'vector_cosine_ops'}),
		'$libdir/pg_tsdg', "$label: the operator class's support function is pg_tsdg's");
	is($node->safe_psql('app', q{
		SELECT e.extname FROM pg_amop ao
		JOIN pg_opfamily f ON f.oid = ao.amopfamily
		JOIN pg_am a ON a.oid = f.opfmethod
		JOIN pg_depend d ON d.classid = 'pg_operator'::regclass AND d.objid = ao.amopopr AND d.deptype = 'e'
		JOIN pg_extension e ON e.oid = d.refobjid
		WHERE a.amname = 'tsdg' AND f.opfname = 'vector_cosine_ops'}),
		'vector', "$label: its operator is the extension vector's");

	$node->safe_psql('app',
		'CREATE INDEX embedding_idx ON langchain_pg_embedding USING tsdg (embedding vector_cosine_ops)');
	# The 4 nearest by their distances, to 6 places: two rows whose distances
	# differ past that are a tie, which the index, ordering by float sums, and
	# the operator, summing in double, may break either way.
	my $search = q{
		SELECT string_agg(round(distance::numeric, 6)::text, ',' ORDER BY distance) FROM queries q, LATERAL (
			SELECT id, embedding <=> q.v AS distance FROM langchain_pg_embedding
			WHERE collection_id = '00000000-0000-0000-0000-000000000001'
			ORDER BY distance LIMIT 4) AS s
		GROUP BY q.i ORDER BY q.i};
	my $exact = $node->safe_psql('app', "SET enable_indexscan = off; $search");
	like($node->safe_psql('app', "SET enable_seqscan = off; EXPLAIN (COSTS OFF) $search"),
		qr/Index Scan using embedding_idx/, "$label: the similarity search uses the tsdg index");
	my $indexed = $node->safe_psql('app', "SET enable_seqscan = off; $search");
	is($indexed, $exact, "$label: the index finds the exact 4 nearest of each query");

	# dump and restore, custom and plain formats
	my $dir = PostgreSQL::Test::Utils::tempdir;
	$node->command_ok([ 'pg_dump', '-Fc', '-f', "$dir/app.dump", '-d', $node->connstr('app') ],
		"$label: pg_dump -Fc");
	$node->safe_psql('postgres', 'CREATE DATABASE restored');
	$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), "$dir/app.dump" ],
		"$label: pg_restore into an empty database");
	is($node->safe_psql('restored', "SET enable_seqscan = off; $search"), $exact,
		"$label: the restored tsdg index answers as before");
	$node->command_ok([ 'pg_dump', '-f', "$dir/app.sql", '-d', $node->connstr('app') ],
		"$label: pg_dump, plain");
	$node->safe_psql('postgres', 'CREATE DATABASE restored_plain');
	$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', "$dir/app.sql",
		'-d', $node->connstr('restored_plain') ], "$label: the plain dump restores through psql");
	is($node->safe_psql('restored_plain', "SET enable_seqscan = off; $search"), $exact,
		"$label: the tsdg index restored from the plain dump answers as before");

	# pg_tsdg needs the type: without the extension vector, CASCADE installs it
	$node->safe_psql('postgres', 'CREATE DATABASE fresh');
	($rc, $out, $err) = $node->psql('fresh', 'CREATE EXTENSION pg_tsdg');
	like($err, qr/required extension "vector" is not installed.*CASCADE/s,
		"$label: CREATE EXTENSION pg_tsdg without the type asks for CASCADE");
	$node->safe_psql('fresh', 'CREATE EXTENSION pg_tsdg CASCADE');
	is($node->safe_psql('fresh', "SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension"),
		'pg_tsdg,plpgsql,vector', "$label: CASCADE installs vector and pg_tsdg");
	($rc, $out, $err) = $node->psql('fresh', 'DROP EXTENSION vector');
	like($err, qr/extension pg_tsdg depends on/,
		"$label: the type cannot be dropped from under pg_tsdg");
	$node->safe_psql('fresh', 'DROP EXTENSION pg_tsdg; DROP EXTENSION vector');
	is($node->safe_psql('fresh', 'SELECT count(*) FROM pg_extension'), '1',
		"$label: pg_tsdg, then vector, drop cleanly");

	if ($preload)
	{
		same_set(exported_symbols('pg_tsdg.so'),
			expected_symbols($node, 'app', 'pg_tsdg', qw(Pg_magic_func _PG_init), worker_entry_points()),
			'pg_tsdg.so exports only what PostgreSQL looks up, worker entry points included');
		same_set(exported_symbols('pg_tsdg_vector.so'),
			expected_symbols($node, 'app', 'vector', qw(Pg_magic_func)),
			'pg_tsdg_vector.so exports only the type\'s SQL functions');
		my $tsdg = exported_symbols('pg_tsdg.so');
		my @shared = sort grep { $tsdg->{$_} && $_ ne 'Pg_magic_func' }
		  keys %{ exported_symbols('pg_tsdg_vector.so') };
		is("@shared", '', 'pg_tsdg.so exports none of the vector type\'s functions');
	}
	$node->stop;
}

done_testing();
