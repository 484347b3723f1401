// The benchmark harness cannot rot: `bench/run.ts --quick` runs every benchmark with tiny
// counts against real `tickler serve` processes and must produce well-formed figures. Speed
// is not asserted (benchmarks are never timed tests, TESTING.md); that the harness drove the
// server, measured every figure and judged no target in quick mode, is.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { benchmarks } from '../../bench/benchmarks.js';
import { verdictOf } from '../../bench/report.js';
import { profileSummaryOf } from '../../bench/profile.js';
import { summarise } from '../../bench/latency.js';
import { sumMetric } from '../../bench/server-process.js';
import { dailyCronAt } from '../../bench/bench-cron-herd.js';
import { postgresUnavailableReason } from '../../bench/peers/services.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');

interface JudgedFigure { label: string; value: number | null; unit: string; verdict: string }
interface JudgedResult { name: string; error: string | null; quick: boolean; figures: JudgedFigure[]; command: string }

function runBench(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    // The repository's own CLI, whatever the caller's environment points the bench at.
    const env = { ...process.env };
    delete env['TICKLER_BENCH_CLI'];
    const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'bench', 'run.ts'), ...args],
      { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    child.on('error', reject);
    child.on('exit', (code) => resolvePromise({ code, stdout, stderr }));
  });
}

test('every benchmark runs in --quick mode and answers well-formed figures', { timeout: 900_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-bench-smoke-'));
  // The cluster benchmarks need PostgreSQL; without it they are left out, and said so.
  const postgresMissing = await postgresUnavailableReason();
  if (postgresMissing !== undefined) t.diagnostic(`cluster benchmarks skipped: ${postgresMissing}`);
  const expected = benchmarks.filter((benchmark) => postgresMissing === undefined || !benchmark.name.startsWith('cluster-'));
  try {
    const jsonPath = join(dir, 'results.json');
    const outcome = await runBench(['--quick', '--json', jsonPath,
      ...(postgresMissing === undefined ? [] : ['--only', expected.map((benchmark) => benchmark.name).join(',')])]);
    assert.equal(outcome.code, 0, `bench exited ${outcome.code}:\n${outcome.stderr.slice(-4_000)}`);
    const report = JSON.parse(readFileSync(jsonPath, 'utf8')) as { machine: { nproc: number; node: string }; results: JudgedResult[] };
    assert.ok(report.machine.nproc >= 1);
    assert.equal(report.machine.node, process.version);
    assert.deepEqual(report.results.map((result) => result.name), expected.map((benchmark) => benchmark.name));
    for (const result of report.results) {
      assert.equal(result.error, null, `${result.name} failed: ${result.error}`);
      assert.equal(result.quick, true);
      assert.match(result.command, new RegExp(`--only ${result.name} --quick`));
      assert.ok(result.figures.length > 0, `${result.name} measured nothing`);
      for (const figure of result.figures) {
        assert.ok(figure.label.length > 0 && figure.unit.length > 0, `${result.name}: unnamed figure`);
        assert.equal(typeof figure.value, 'number', `${result.name}: "${figure.label}" was not measured`);
        assert.ok(Number.isFinite(figure.value), `${result.name}: "${figure.label}" is ${figure.value}`);
        assert.equal(figure.verdict, 'n/a', 'quick runs judge no target');
      }
      assert.match(outcome.stdout, new RegExp(`### ${result.name}: `), `${result.name} missing from the markdown`);
    }
    // The harness really drove the servers: work was created, dispatched and read back.
    const figureOf = (name: string, label: string): number => {
      const figure = report.results.find((result) => result.name === name)?.figures.find((entry) => entry.label.startsWith(label));
      assert.ok(figure !== undefined, `${name}: no figure "${label}"`);
      return figure.value as number;
    };
    assert.ok(figureOf('create', 'POST /v1/jobs:batch') > 0);
    assert.ok(figureOf('precision', 'runs in the ledger') > 0);
    assert.ok(figureOf('herd', 'runs in the ledger') > 0);
    assert.ok(figureOf('idle', 'runs handled') > 0);
    assert.ok(figureOf('memory', 'RSS, 10 pending, fresh process') > 10, 'an RSS in MB');
    if (postgresMissing === undefined) {
      assert.ok(figureOf('cluster-throughput', 'runs succeeded (ledger)') > 0);
      assert.ok(figureOf('cluster-throughput', 'end to end: succeeded') > 0);
      assert.ok(figureOf('cluster-precision', 'runs in the ledger') > 0);
      assert.equal(figureOf('cluster-failover', 'runs not dispatched'), 0, 'a killed owner\'s timers fire elsewhere');
      assert.ok(figureOf('cluster-failover', 'kill -9 → its shards fire again') > 0);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('targets are judged from the measurement, never typed in', () => {
  const target = { comparison: '<=' as const, value: 100 };
  assert.equal(verdictOf({ label: 'p99', value: 99, unit: 'ms', target }, false), 'pass');
  assert.equal(verdictOf({ label: 'p99', value: 101, unit: 'ms', target }, false), 'miss');
  assert.equal(verdictOf({ label: 'p99', value: null, unit: 'ms', target }, false), 'n/a');
  assert.equal(verdictOf({ label: 'p99', value: 101, unit: 'ms', target }, true), 'n/a');
  assert.equal(verdictOf({ label: 'rate', value: 49_999, unit: '/s', target: { comparison: '>=', value: 50_000 } }, false), 'miss');
});

test('latency summaries keep early samples apart and the exact maximum', () => {
  const summary = summarise([5, 1, -3, 250.5, 2]);
  assert.equal(summary.count, 4);
  assert.equal(summary.earlyCount, 1);
  assert.equal(summary.maxMs, 250.5);
  assert.ok(summary.p50Ms !== null && summary.p50Ms >= 1 && summary.p50Ms <= 5);
  assert.equal(summarise([]).p99Ms, null);
});

test('no latency quantile is reported above the exact maximum (a bucket edge may lie above it)', () => {
  // 10 ms recorded as 10,000 us falls in a bucket whose edge the histogram reports as 10.007 ms.
  const summary = summarise(Array.from({ length: 100 }, () => 10));
  assert.equal(summary.maxMs, 10);
  assert.equal(summary.p99Ms, 10);
  assert.equal(summary.p50Ms, 10);
});

test('metric sums add every label set of one name and no other name', () => {
  const text = [
    '# TYPE tickler_dispatches_total counter',
    'tickler_dispatches_total{status="ready"} 7',
    'tickler_dispatches_total{status="skipped_overlap"} 2',
    'tickler_dispatches_total_other 100',
  ].join('\n');
  assert.equal(sumMetric(text, 'tickler_dispatches_total'), 9);
});

test('profile summaries count self time per frame and leave idle out of the frames', () => {
  const frame = (id: number, functionName: string) => ({ id, callFrame: { functionName, url: '', lineNumber: 0 } });
  const summary = profileSummaryOf({
    nodes: [frame(1, '(idle)'), frame(2, 'dispatchOne'), frame(3, 'leaseRuns')],
    samples: [1, 2, 2, 3],
    timeDeltas: [1_000, 2_000, 3_000, 500],
  });
  assert.equal(summary.totalMs, 6.5);
  assert.equal(summary.idleMs, 1);
  assert.deepEqual(summary.topFrames.map((entry) => [entry.frame, entry.selfMs]), [['dispatchOne ', 5], ['leaseRuns ', 0.5]]);
});

test('the real-time cron herd uses the daily shape for one UTC second', () => {
  assert.equal(dailyCronAt(Date.parse('2026-11-29T23:05:07.000Z')), '7 5 23 * * *');
});
