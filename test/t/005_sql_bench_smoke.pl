# The SQL benchmark suite (bench/run.sh) at a tiny size against a server of
# its own: the exact scan must find exactly the numpy ground truth (so COPY,
# ids and the brute force agree), the tsdg index must reach recall@10 0.9 at
# ef 64, and the JSON, table and plots must be written.
use strict;
use warnings FATAL => 'all';
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use TsdgTest;

my $node = tsdg_node('sql_bench', conf => ['max_connections = 200']);
my $out = PostgreSQL::Test::Utils::tempdir . '/sql_bench_smoke';

$node->command_ok(
	[
		'bash', source_file('bench/run.sh'), '--dbname', 'postgres', '--out', $out,
		'--rows', 4000, '--dim', 32, '--intrinsic-dim', 8, '--queries', 100,
		'--exact-queries', 30, '--clients', '1,2', '--ef', '10,64',
		'--seconds', 1, '--exact-seconds', 1
	],
	'the benchmark suite runs');

my $runs = decode_json(slurp_file("$out/results.json"))->{runs};
my @exact = grep { $_->{method} eq 'exact scan' } @$runs;
my @tsdg = grep { $_->{method} eq 'tsdg' } @$runs;
is(scalar @exact, 2, 'two exact scan points');
is(scalar @tsdg, 4, 'four tsdg points');
is(join(',', grep { $_ != 1 } map { $_->{recall} } @exact),
	'', 'the exact scan agrees with the ground truth');
my ($best) = sort { $b <=> $a } map { $_->{recall} } @tsdg;
cmp_ok($best, '>=', 0.9, 'tsdg recall@10 at ef 64');
is(scalar(grep { $_->{qps} <= 0 || $_->{transactions} <= 0 } @exact, @tsdg),
	0, 'every pgbench point ran queries');
for my $name ('results.md', 'recall_qps.png', 'build.png')
{
	cmp_ok(-s "$out/$name" // 0, '>=', 100, "$name written");
}

done_testing();
