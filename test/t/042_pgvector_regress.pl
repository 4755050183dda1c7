# pgvector's own regression tests (from its released 0.8.6 source archive,
# named by PGVECTOR_TARBALL) against pg_tsdg's extension "vector" and the tsdg index,
# with "hnsw" read as "tsdg": each statement's output is compared with the
# output pgvector's tests expect of pgvector. Statements about pgvector's
# other types (halfvec, sparsevec, bit) and its other index (ivfflat) do not
# apply, nor do those whose output on pgvector itself, built from the same
# source and run on this server, is not the expected one. Every other
# statement must give pgvector's output, where both give an error the wording
# aside, except the listed differences, each with its reason; the test lists
# every statement that differs.
use strict;
use warnings FATAL => 'all';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgvectorInstall;

my $version = '0.8.6';
my $tarball = pgvector_tarball();
plan skip_all => "no PGVECTOR_TARBALL (pgvector-$version.tar.gz)" unless $tarball;

my @files = qw(vector_type cast copy btree hnsw_vector);
my $not_applicable = qr/halfvec|sparsevec|\bbit\b|binary_quantize|hamming|jaccard|ivfflat/i;
my $not_applicable_mark = 'another type';

# Statements whose output differs from pgvector's for a reason: by file, the
# statement ("hnsw" already read as "tsdg") and the reason, with a pattern
# that pgvector's output matches where the same statement appears more than
# once. Those that give pgvector's output after all are listed too.
my @known = (
	[ 'vector_type', q{SELECT cosine_distance('[3e38]'::vector, '[3e38]');},
		'pg_tsdg sums in double where float sums overflow: a vector is at distance 0 from itself, not NaN' ],
	[ 'vector_type', q{SELECT vector_combine('{0}', '{0}');},
		'pg_tsdg combines two empty avg states into an empty one where pgvector 0.8.6 fails, which fails a parallel avg() whose partial aggregates saw no rows' ],
	[ 'hnsw_vector', q{SHOW tsdg.iterative_scan;},
		'tsdg.iterative_scan defaults to relaxed_order, hnsw.iterative_scan to off: a tsdg scan returns every row unless told otherwise' ],
	[ 'hnsw_vector', q{SHOW tsdg.ef_search;}, 'tsdg.ef_search defaults to 100, hnsw.ef_search to 40' ],
	[ 'hnsw_vector', q{CREATE INDEX ON t USING tsdg (val vector_l2_ops);}, 'tsdg indexes take vectors of more than 2000 dimensions',
		qr/more than 2000 dimensions/ ],
);

sub known_reason
{
	my ($file, $text, $want) = @_;
	for my $entry (@known)
	{
		my ($known_file, $known_text, $reason, $pattern) = @$entry;
		return $reason if $known_file eq $file && $known_text eq $text && (!$pattern || $want =~ $pattern);
	}
	return undef;
}

my $node = PostgreSQL::Test::Cluster->new('pgvector_regress');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_tsdg'");
$node->start;
my $extension = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'vector'");
plan skip_all => "the extension vector installed here is pgvector's ($extension), not pg_tsdg's"
  unless $extension =~ /\+tsdg$/;

my $src = PostgreSQL::Test::Utils::tempdir;
system_or_bail('tar', 'xzf', $tarball, '-C', $src, "pgvector-$version/test");
my $tests = "$src/pgvector-$version/test";

# the statements of a file as lists of its lines: a statement ends with ";"
# or is a psql command; comments and blank lines belong to none
sub statements
{
	my ($lines) = @_;
	my (@statements, @current);
	my $section_applies = 1;
	for my $line (@$lines)
	{
		# the files are in sections by type, each headed by a comment
		$section_applies = $line !~ $not_applicable if $line =~ /^-- \w/;
		next if $line =~ /^\s*(--.*)?$/;
		push @current, $section_applies ? $line : "$line -- $not_applicable_mark";
		if ($line =~ /;\s*$/ || $line =~ /^\\/)
		{
			push @statements, [@current];
			@current = ();
		}
	}
	return @statements;
}

# what psql printed for each statement: the lines between its echo and the
# next statement's, blank lines left out
sub outputs
{
	my ($output, $statements) = @_;
	my @lines = grep { !/^\s*$/ } split /\n/, $output;
	my @outputs;
	my $at = 0;
	for my $i (0 .. $#$statements)
	{
		for my $line (@{ $statements->[$i] })
		{
			my $raw = $line =~ s/ -- \Q$not_applicable_mark\E$//r;
			$at++ while $at < @lines && $lines[$at] ne $raw;
			return @outputs if $at >= @lines;
			$at++;
		}
		my $end = $at;
		my $next = $i < $#$statements ? $statements->[ $i + 1 ][0] =~ s/ -- \Q$not_applicable_mark\E$//r : undef;
		$end++ while $end < @lines && (!defined $next || $lines[$end] ne $next);
		my @block = @lines[ $at .. $end - 1 ];
		# comment lines echoed between statements are not output
		push @outputs, join("\n", grep { !/^--\s*\w/ || /^-+$/ } @block);
		$at = $end;
	}
	return @outputs;
}

# an output as the list shows it: lines indented under the first, each cut
# to 100 characters
sub shorten
{
	my ($output) = @_;
	return join("\n            ", map { length > 100 ? substr($_, 0, 100) . '...' : $_ } split /\n/, $output);
}

# the outputs of a file's statements on a node, in a database of their own
# with the extensions named, run as pg_regress runs a test: psql echoing its
# input, errors inline
sub run_file
{
	my ($node, $file, $sql, $statements, @extensions) = @_;
	$node->safe_psql('postgres', "DROP DATABASE IF EXISTS regress_$file");
	$node->safe_psql('postgres', "CREATE DATABASE regress_$file");
	$node->safe_psql("regress_$file", join('; ', map { "CREATE EXTENSION $_" } @extensions));
	my $dir = PostgreSQL::Test::Utils::tempdir;
	mkdir "$dir/results";
	my $output;
	IPC::Run::run([ $node->installed_command('psql'), '-X', '-a', '-q', '-d', $node->connstr("regress_$file") ],
		'<', \$sql, '>&', \$output, init => sub { chdir $dir });
	return outputs($output, $statements);
}

sub same_output
{
	my ($want, $got) = @_;
	return $want eq $got || ($want =~ /^ERROR:/m && $got =~ /^ERROR:/m);
}

my ($install) = pgvector_install();
my $pgvector = PostgreSQL::Test::Cluster->new('pgvector_itself', install_path => $install);
$pgvector->init;
$pgvector->start;

my ($applicable, $same, @differ, @unexpected, @known_same, @not_on_pgvector) = (0, 0);
for my $file (@files)
{
	my $original = slurp_file("$tests/sql/$file.sql");
	my $expected = slurp_file("$tests/expected/$file.out");
	my @statements = statements([ split /\n/, $original ]);
	my @on_pgvector = run_file($pgvector, $file, $original, \@statements, 'vector');
	my @expected_on_pgvector = outputs($expected, \@statements);

	my $sql = $original =~ s/hnsw/tsdg/gr;
	@statements = statements([ split /\n/, $sql ]);
	my @want = outputs($expected =~ s/hnsw/tsdg/gr, \@statements);
	my @got = run_file($node, $file, $sql, \@statements, 'vector', 'pg_tsdg');
	is(scalar(@got), scalar(@statements), "$file: psql echoed every statement");
	for my $i (0 .. $#statements)
	{
		my $text = join(' ', @{ $statements[$i] });
		next if $text =~ $not_applicable || $text =~ /\Q$not_applicable_mark\E/;
		if (!same_output($expected_on_pgvector[$i] // '', $on_pgvector[$i] // ''))
		{
			push @not_on_pgvector, "$file: $text";
			next;
		}
		$applicable++;
		my ($want, $got) = ($want[$i] // '', $got[$i] // '');
		my $reason = known_reason($file, $text, $want);
		if (same_output($want, $got))
		{
			$same++;
			push @known_same, "$file: $text" if $reason;
			next;
		}
		push @differ, "$file: $text\n  pgvector: " . shorten($want) . "\n  pg_tsdg:  " . shorten($got)
		  . ($reason ? "\n  (known: $reason)" : '');
		push @unexpected, "$file: $text" unless $reason;
	}
}

note("$same of $applicable applicable statements give pgvector's output; those that differ:\n"
	  . join("\n", @differ));
note("listed as differing, yet the same as pgvector's:\n" . join("\n", @known_same)) if @known_same;
note("left out, since pgvector itself does not give the expected output here:\n" . join("\n", @not_on_pgvector))
  if @not_on_pgvector;
cmp_ok($applicable, '>', 200, 'pgvector\'s tests have statements that apply');
is(join("\n", @unexpected), '', 'every applicable statement gives pgvector\'s output, or differs for a listed reason');

$node->stop;
$pgvector->stop;
done_testing();
