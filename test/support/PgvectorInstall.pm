# A PostgreSQL installation with pgvector's extension "vector" for the tests
# that run pg_tsdg beside it: the installed one when the server in PATH has
# pgvector, otherwise a private copy of that server with pgvector built from
# its released source archive, named by PGVECTOR_TARBALL, never installed
# into the project or the system. pgvector_install() returns the
# installation's directory (its bin/ and lib/) and whether it is a private
# copy, or skips the whole test with the reason when there is neither.
package PgvectorInstall;

use strict;
use warnings FATAL => 'all';
use Exporter 'import';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Path qw(make_path);
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(pgvector_install pgvector_tarball repository_root);

my $version = '0.8.6';

sub repository_root
{
	return dirname(dirname(dirname(abs_path(__FILE__))));
}

# pgvector's released source archive (PGVECTOR_TARBALL), or undef
sub pgvector_tarball
{
	my $tarball = $ENV{PGVECTOR_TARBALL};
	return (defined $tarball && -f $tarball) ? $tarball : undef;
}

sub pg_config
{
	my ($bindir, $option) = @_;
	my $value = `$bindir/pg_config $option`;
	chomp $value;
	return $value;
}

sub is_pgvector_control
{
	my ($control) = @_;
	return 0 unless -f $control;
	return !system("grep", "-q", "pg_tsdg_vector", $control) ? 0 : 1;
}

sub pgvector_install
{
	my $bindir = dirname(`which pg_config`);
	my $sharedir = pg_config($bindir, '--sharedir');
	return (dirname($bindir), 0) if is_pgvector_control("$sharedir/extension/vector.control");

	my $tarball = pgvector_tarball();
	plan skip_all => "neither an installed pgvector nor PGVECTOR_TARBALL (pgvector-$version.tar.gz)"
	  unless $tarball;

	# a copy of the server in PATH, laid out as Debian installs it, so that
	# its binaries find their libraries and shared files where they expect
	my ($root, $major) = $bindir =~ m{^(.*)/usr/lib/postgresql/(\d+)/bin$}
	  or plan skip_all => "the server in PATH ($bindir) is not laid out as usr/lib/postgresql/N/bin";
	my $copy = PostgreSQL::Test::Utils::tempdir . '/pg';
	make_path("$copy/usr/lib/postgresql", "$copy/usr/share/postgresql", "$copy/usr/include");
	system_or_bail('cp', '-a', "$root/usr/lib/postgresql/$major", "$copy/usr/lib/postgresql/");
	system_or_bail('cp', '-a', "$root/usr/share/postgresql/$major", "$copy/usr/share/postgresql/");
	my ($headers) = grep { -d "$_/$major/server" } ("$root/usr/include/postgresql", '/usr/include/postgresql');
	plan skip_all => "no server headers for PostgreSQL $major" unless $headers;
	# copied too: pgvector installs its own headers next to the server's
	system_or_bail('cp', '-a', $headers, "$copy/usr/include/");

	# pg_tsdg's own extension "vector" was installed there: a server with
	# pgvector has none
	my $extensions = "$copy/usr/share/postgresql/$major/extension";
	unlink("$extensions/vector.control", glob("$extensions/vector--*+tsdg.sql"));

	my $src = PostgreSQL::Test::Utils::tempdir;
	system_or_bail('tar', 'xzf', $tarball, '-C', $src);
	my $copy_pg_config = "$copy/usr/lib/postgresql/$major/bin/pg_config";
	# OPTFLAGS empty: no -march=native, so the build runs on any machine
	for my $target ('all', 'install')
	{
		system_or_bail('make', '-s', '-C', "$src/pgvector-$version", "PG_CONFIG=$copy_pg_config",
			'OPTFLAGS=', 'with_llvm=no', $target);
	}
	return ("$copy/usr/lib/postgresql/$major", 1);
}

1;
