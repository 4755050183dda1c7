# What the TAP tests in test/t share: a node configured as pg_tsdg needs it,
# the GPU worker's readiness, and the paths of the support files.
package TsdgTest;

use strict;
use warnings FATAL => 'all';
use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT =
  qw(tsdg_node worker_node wait_for_worker worker_status support_file source_file numpy_python random_vector_sql
  write_subspace_clusters copy_clustered_rows);

my $support_dir = dirname(File::Spec->rel2abs(__FILE__));
my $source_dir = dirname(dirname($support_dir));

# The path of a file in test/support.
sub support_file
{
	my ($name) = @_;
	return "$support_dir/$name";
}

# The path of a file of the source tree, from its root.
sub source_file
{
	my ($path) = @_;
	return "$source_dir/$path";
}

# A Python that can import numpy: clustered_vectors.py needs it, and the
# first python3 on PATH may be one without it.
sub numpy_python
{
	for my $candidate ('/usr/bin/python3', 'python3')
	{
		return $candidate
		  if system("$candidate -c 'import numpy' >/dev/null 2>&1") == 0;
	}
	return 'python3';
}

# Writes to $path (id, vector) lines of hard data from subspace_clusters.py:
# $rows rows of $dims dimensions in $clusters clusters, each on its own
# random 16-dim subspace, at $spread, drawn from $seed.
sub write_subspace_clusters
{
	my ($path, $rows, $dims, $clusters, $spread, $seed) = @_;
	my $generator = support_file('subspace_clusters.py');
	system(numpy_python() . " $generator $rows $dims $clusters $spread $seed > $path") == 0
	  or die "subspace_clusters.py failed for $path";
	return;
}

# COPYs into $table of $node's postgres database $count rows of
# clustered_vectors.py's data of $dims dimensions drawn with $seed, their ids
# numbered from $first.
sub copy_clustered_rows
{
	my ($node, $table, $first, $count, $dims, $seed) = @_;
	my $rows = '';
	IPC::Run::run([ numpy_python(), support_file('clustered_vectors.py'), $count, $dims, $seed ], '>', \$rows)
	  or die "clustered_vectors.py failed";
	$rows =~ s/^(\d+)\t/($1 - 1 + $first) . "\t"/gme;
	IPC::Run::run(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', "COPY $table FROM STDIN" ],
		'<', \$rows)
	  or die "COPY into $table failed";
	return;
}

# SQL for a random vector of $dims components in [0, 1), one per row: the
# WHERE on the outer column makes PostgreSQL draw it again for each row.
sub random_vector_sql
{
	my ($dims, $column) = @_;
	return "(SELECT array_agg(random()::real) FROM generate_series(1, $dims) WHERE $column > 0)::vector";
}

# A started node with pg_tsdg in shared_preload_libraries (unless
# TSDG_TAP_PRELOAD=0: a stock server, where each session loads the library
# and there is no GPU worker), WAL as a replica needs it (the crash tests
# replay it) and room for large builds' WAL. Options: conf => [more
# postgresql.conf lines], allows_streaming => 1 for a primary.
sub tsdg_node
{
	my ($name, %opts) = @_;
	my $preload = ($ENV{TSDG_TAP_PRELOAD} // 1) ? 'pg_tsdg' : '';
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $opts{allows_streaming} // 0);
	# allows_streaming shrinks shared_buffers and max_connections to run
	# many nodes at once; index builds and merges want the defaults
	$node->append_conf('postgresql.conf',
		join("\n",
			"shared_preload_libraries = '$preload'",
			"wal_level = replica",
			"max_wal_size = 4GB",
			"shared_buffers = 128MB",
			"max_connections = 100",
			@{ $opts{conf} // [] }));
	$node->start;
	return $node;
}

# A node whose GPU worker runs on the backend TSDG_WORKER_BACKEND names (by
# default the core's CPU backend, so that any machine runs the worker tests),
# with autovacuum off and the worker's LOG lines in the server log, which
# holds no statements: the tests look for the worker's lines in it. @conf are
# more postgresql.conf lines. The extension is created in database postgres.
sub worker_node
{
	my ($name, @conf) = @_;
	my $backend = $ENV{TSDG_WORKER_BACKEND} // 'cpu';
	my $node = tsdg_node(
		$name,
		conf => [
			"autovacuum = off", "tsdg.worker_backend = $backend",
			"log_min_messages = log", "log_statement = none", @conf
		]);
	$node->safe_psql('postgres', 'CREATE EXTENSION pg_tsdg CASCADE');
	return $node;
}

# Waits until the node's GPU worker is ready. A worker that found no GPU, or
# a server without the worker, skips the whole test: it cannot run there.
sub wait_for_worker
{
	my ($node) = @_;
	$node->poll_query_until('postgres',
		"SELECT state IN ('ready', 'no gpu', 'not preloaded') FROM tsdg_gpu_status()")
	  or die 'the GPU worker is not ready: '
	  . $node->safe_psql('postgres', 'SELECT state FROM tsdg_gpu_status()');
	my $state = $node->safe_psql('postgres', 'SELECT state FROM tsdg_gpu_status()');
	if ($state eq 'no gpu')
	{
		my $backend = $ENV{TSDG_WORKER_BACKEND} // 'cpu';
		plan skip_all => "no GPU for tsdg.worker_backend = $backend";
	}
	plan skip_all => 'no GPU worker without shared_preload_libraries'
	  if $state eq 'not preloaded';
	return;
}

# A column of tsdg_gpu_status() on the node.
sub worker_status
{
	my ($node, $column) = @_;
	return $node->safe_psql('postgres', "SELECT $column FROM tsdg_gpu_status()");
}

1;
