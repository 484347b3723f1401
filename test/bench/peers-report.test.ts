import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chartFooter, handWrittenPart, renderReport } from '../../bench/peers/report.js';
import { figure, type ResultsFile, type WorkloadRun } from '../../bench/peers/results.js';
import { throughputWorkload } from '../../bench/peers/workloads/timing.js';

const intel = '2 × Intel(R) Xeon(R) Processor, 24 GiB, Node 20.20.2, linux';
const epyc = '2 × AMD EPYC, 24 GiB, Node 20.20.2, linux';

function run(system: WorkloadRun['system'], rate: number, machine: string | undefined): WorkloadRun {
  return {
    workload: 'W3', system, settings: 's', startedAt: '2026-12-03T12:00:00.000Z', durationMs: 1_000,
    figures: [figure('handled_per_s', 'handled/s', rate, 'jobs/s', 'higher', 'rate')],
    notes: [], ...(machine === undefined ? {} : { machine }),
  };
}

function results(runs: WorkloadRun[]): ResultsFile {
  return {
    startedAt: '2026-12-01T00:00:00.000Z', finishedAt: '2026-12-03T13:00:00.000Z', command: 'npm run bench:peers', machine: intel,
    quick: false, runs,
  };
}

test('a report whose runs all ran on the last machine names it once', () => {
  const report = renderReport(results([run('tickler-sqlite', 20_000, intel), run('bullmq', 25_000, intel)]), [throughputWorkload], '');
  assert.match(report, /Measured 2026-12-03 on 2 × Intel\(R\) Xeon\(R\) Processor/);
  assert.doesNotMatch(report, /- bullmq: on /);
});

test('a report whose runs ran on different machines, or did not say, names each run\'s machine', () => {
  const report = renderReport(results([run('tickler-sqlite', 20_000, intel), run('bullmq', 25_000, epyc), run('graphile-worker', 18_000, undefined)]),
    [throughputWorkload], '');
  assert.match(report, /Measured up to 2026-12-03 on more than one machine/);
  assert.match(report, /the last invocation ran on 2 × Intel/);
  assert.match(report, /- tickler-sqlite: on 2 × Intel/);
  assert.match(report, /- bullmq: on 2 × AMD EPYC/);
  assert.doesNotMatch(report, /- graphile-worker: on /);
});

test('a chart\'s footer dates and names the machine of its own runs, not the last invocation\'s', () => {
  const at = (startedAt: string, one: WorkloadRun): WorkloadRun => ({ ...one, startedAt });
  assert.equal(chartFooter('W3', [run('tickler-sqlite', 1, intel), run('bullmq', 1, intel)]),
    `2026-12-03 · ${intel} · npm run bench:peers -- --workload W3 --system all`);
  assert.equal(chartFooter('W3', [at('2026-11-29T10:00:00.000Z', run('bullmq', 1, undefined)), at('2026-12-01T10:00:00.000Z', run('pg-boss', 1, undefined))]),
    '2026-11-29 to 2026-12-01 · machine not recorded · npm run bench:peers -- --workload W3 --system all');
  assert.match(chartFooter('W3', [run('tickler-sqlite', 1, intel), run('bullmq', 1, epyc)]), /^2026-12-03 · more than one machine · /);
});

test('the hand-written part of a report survives its rewrite word for word', () => {
  const handWritten = '## What the figures say\n\nW3 on PostgreSQL: not met, and why.';
  const report = renderReport(results([run('tickler-sqlite', 20_000, intel)]), [throughputWorkload], handWritten);
  assert.equal(handWrittenPart(report), handWritten);
  assert.equal(renderReport(results([run('tickler-sqlite', 20_000, intel)]), [throughputWorkload], handWrittenPart(report)), report);
  assert.equal(handWrittenPart('# a report written before the markers'), '');
});
