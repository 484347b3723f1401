// Smoke run of the side-by-side harness (bench:peers) with tiny counts, so it cannot rot: the
// real command, as a process, against tickler-sqlite and the first peer whose service
// answers; the results file must hold well-formed, correct runs for both. Never a timing test.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { ResultsFile } from '../../bench/peers/results.js';
import { unavailableReason } from '../../bench/peers/systems/index.js';
import { workerConcurrency, type SystemName } from '../../bench/peers/types.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const smokeTimeoutMs = 60_000;
const workloadsSmoked = ['W2', 'W3'] as const;

async function firstReachablePeer(): Promise<SystemName | undefined> {
  for (const peer of ['bullmq', 'graphile-worker', 'pg-boss'] as const) {
    if (await unavailableReason(peer) === undefined) return peer;
  }
  return undefined;
}

function runHarness(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/peers/run.ts', ...args],
      { cwd: repoRoot, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on('error', reject);
    child.on('exit', (code) => resolvePromise({ code, stderr }));
  });
}

/**
 * `--quick` runs of `workloads` on one system into a results file of their own; answers the
 * runs, or null (the test skipped) where the system's service is not here.
 */
async function quickRunsOf(t: TestContext, system: SystemName, workloads: string): Promise<ResultsFile['runs'] | null> {
  const unavailable = await unavailableReason(system);
  if (unavailable !== undefined) {
    t.skip(unavailable);
    return null;
  }
  const dir = mkdtempSync(join(tmpdir(), `peers-smoke-${system}-`));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const resultsPath = join(dir, 'results.json');
  const { code, stderr } = await runHarness(['--quick', '--workload', workloads, '--system', system, '--results', resultsPath,
    '--no-progress']);
  assert.equal(code, 0, stderr.slice(-4_000));
  return (JSON.parse(readFileSync(resultsPath, 'utf8')) as ResultsFile).runs;
}

test('the peers harness produces well-formed results for tickler-sqlite and a reachable peer', { timeout: smokeTimeoutMs }, async (t) => {
  const peer = await firstReachablePeer();
  if (peer === undefined) t.diagnostic('no peer service reachable (Redis, PostgreSQL): smoking tickler-sqlite alone');
  const systems: SystemName[] = peer === undefined ? ['tickler-sqlite'] : ['tickler-sqlite', peer];
  const dir = mkdtempSync(join(tmpdir(), 'peers-smoke-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const resultsPath = join(dir, 'results.json');
  const docsDir = join(dir, 'docs');

  const { code, stderr } = await runHarness(['--quick', '--workload', workloadsSmoked.join(','), '--system', systems.join(','),
    '--results', resultsPath, '--docs-dir', docsDir, '--no-progress']);

  assert.equal(code, 0, stderr.slice(-4_000));
  const results = JSON.parse(readFileSync(resultsPath, 'utf8')) as ResultsFile;
  assert.equal(results.quick, true);
  for (const workload of workloadsSmoked) {
    for (const system of systems) {
      const run = results.runs.find((candidate) => candidate.workload === workload && candidate.system === system);
      assert.ok(run !== undefined, `no ${workload} run for ${system}`);
      assert.equal(run.error, undefined, `${workload} ${system} failed: ${run.error}`);
      assert.ok(run.settings.length > 0);
      assert.ok(run.figures.length >= 3, `${workload} ${system} has too few figures`);
      for (const item of run.figures) {
        assert.ok(item.value !== null && Number.isFinite(item.value), `${workload} ${system} ${item.key} = ${item.value}`);
        if (item.better === 'zero') assert.equal(item.value, 0, `${workload} ${system}: ${item.label} must be 0`);
      }
      const valueOf = (key: string): number => run.figures.find((item) => item.key === key)!.value!;
      if (workload === 'W2') {
        assert.ok(valueOf('lag_p50') <= valueOf('lag_p99') && valueOf('lag_p99') <= valueOf('lag_max'), 'lag quantiles out of order');
      } else {
        assert.ok(valueOf('handled_per_s') > 0);
        // The machine did some work handling the jobs: a meter reading the wrong /proc/stat fields answers 0.
        assert.ok(valueOf('handled_cpu') > 0, `${system}: machine CPU per 1,000 handled = ${valueOf('handled_cpu')}`);
      }
    }
  }
  const report = readFileSync(join(docsDir, 'benchmarks-peers.md'), 'utf8');
  assert.match(report, /## W2 precision/);
  assert.match(readFileSync(join(docsDir, 'img', 'peers-W2.svg'), 'utf8'), /^<svg [^>]+>[\s\S]*tickler-sqlite[\s\S]*<\/svg>\n$/);
});

// BullMQ's own behaviour across the kill is measured, not promised: a job active in the killed
// worker is taken back only by stall detection (every 30 s), which the quick run's drain may not
// wait for (most likely what CI at c8f16c2 saw: one job not handled). Only the killed worker's
// slots may be missing or repeated; a harness whose workers did not reach this Redis would lose
// all 300.
test('bullmq-aof runs on a Redis of its own, which its child workers attach to, across a worker kill -9', { timeout: smokeTimeoutMs }, async (t) => {
  const runs = await quickRunsOf(t, 'bullmq-aof', 'W8');
  if (runs === null) return;
  const run = runs.find((candidate) => candidate.workload === 'W8' && candidate.system === 'bullmq-aof');
  assert.ok(run !== undefined, 'no W8 run for bullmq-aof');
  assert.equal(run.error, undefined, `W8 bullmq-aof failed: ${run.error}`);
  assert.match(run.settings, /appendfsync always/);
  const valueOf = (key: string): number | null | undefined => run.figures.find((item) => item.key === key)?.value;
  for (const key of ['not_fired', 'duplicates']) {
    const value = valueOf(key);
    assert.ok(Number.isInteger(value) && value! >= 0 && value! <= workerConcurrency,
      `${key} = ${value}: at most the killed worker's ${workerConcurrency} slots`);
  }
  assert.ok((valueOf('resume_ms') ?? 0) > 0, 'the workers resumed after the restart');
});

test('tickler-postgres-direct drains W3 and survives W8 (quick) with workers straight to PostgreSQL, in child processes for W8',
  { timeout: smokeTimeoutMs }, async (t) => {
    const runs = await quickRunsOf(t, 'tickler-postgres-direct', 'W3,W8');
    if (runs === null) return;
    for (const workload of ['W3', 'W8'] as const) {
      const run: ResultsFile['runs'][number] | undefined =
        runs.find((candidate) => candidate.workload === workload && candidate.system === 'tickler-postgres-direct');
      assert.ok(run !== undefined, `no ${workload} run for tickler-postgres-direct`);
      assert.equal(run.error, undefined, `${workload} failed: ${run.error}`);
      assert.match(run.settings, /straight to PostgreSQL/);
      const valueOf = (key: string): number | null | undefined => run.figures.find((item) => item.key === key)?.value;
      assert.equal(valueOf('not_fired'), 0, `${workload}: every job handled`);
      assert.equal(valueOf('duplicates'), 0, `${workload}: none handled twice`);
      if (workload === 'W3') assert.ok((valueOf('handled_per_s') ?? 0) > 0, 'W3 measured a rate');
      else assert.ok((valueOf('resume_ms') ?? 0) > 0, 'W8: the workers resumed after the restart');
    }
  });
