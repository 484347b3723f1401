/**
 * The "Side by side" report: a table per workload (system, settings, figures, the headline
 * figure as a ratio against tickler) and its chart, written from the accumulated results so
 * a rerun of one workload updates its section and keeps the others. The hand-written part
 * (where tickler stands and why) sits between two marker lines in the report itself and is
 * carried over verbatim when the report is rewritten.
 */
import { goalsTable } from './goals.js';
import type { PeerFigure, ResultsFile, WorkloadId, WorkloadRun } from './results.js';
import { formatValue } from './svg-chart.js';
import { systemNames, type SystemName } from './types.js';
import type { Workload } from './workloads/common.js';

export function chartFileName(workload: WorkloadId): string {
  return `peers-${workload}.svg`;
}

/** The hand-written part of docs/benchmarks-peers.md lies between these two lines. */
export const handWrittenStart = '<!-- hand-written: kept as it is when the harness rewrites this file -->';
export const handWrittenEnd = '<!-- end of the hand-written part -->';

/** The hand-written part of a report `renderReport` wrote, or '' when it has none. */
export function handWrittenPart(report: string): string {
  const start = report.indexOf(handWrittenStart);
  const end = report.indexOf(handWrittenEnd);
  return start < 0 || end < start ? '' : report.slice(start + handWrittenStart.length, end).trim();
}

export function renderReport(results: ResultsFile, workloads: readonly Workload[], handWritten: string): string {
  const lines: string[] = [
    '# Side by side: tickler, BullMQ, graphile-worker and pg-boss',
    '',
    measuredOn(results),
    'Command: `npm run bench:peers -- --workload all --system all` (or one workload or system at a time,',
    '`npm run bench:peers -- --workload W2 --system bullmq`); the figures below come from one or more such invocations',
    `(the last: \`${results.command}\`), each run's start time, revision and load in \`bench/peers/results/latest.json\`.`,
    'Every system runs in the same invocation, one after another, with the same job count, payload (`{"i", "due"}`) and',
    'worker concurrency (50). Lag is handler start − due time, both read from the same wall clock in the harness process',
    '(tickler\'s workers are SDK workers in that process, pulling from a real `tickler serve` process over HTTP).',
    '',
    '## Goals',
    '',
    ...goalsTable(results.runs),
    '',
    handWrittenStart,
    '',
    handWritten.trim(),
    '',
    handWrittenEnd,
    '',
    '## How each system was configured',
    '',
    '| system | settings |',
    '| --- | --- |',
  ];
  const settings = new Map<SystemName, string>();
  for (const run of results.runs) settings.set(run.system, run.settings);
  for (const system of systemNames) if (settings.has(system)) lines.push(`| ${system} | ${settings.get(system)!} |`);
  for (const workload of workloads) {
    const runs = orderedRuns(results.runs.filter((run) => run.workload === workload.id));
    if (runs.length === 0) continue;
    lines.push('', `## ${workload.id} ${workload.title}`, '', `${workload.description}.`, '', ...workloadTable(workload, runs));
    const notes = runs.flatMap((run) => [
      ...(run.scale === undefined ? [] : [`**counts scaled by ${run.scale}** (\`--scale ${run.scale}\`)`]),
      ...(run.system.startsWith('tickler') && run.revision !== undefined ? [`measured at ${run.revision}`] : []),
      ...(run.machine !== undefined && !oneMachine(results) ? [`on ${run.machine}`] : []),
      ...run.notes,
      ...(run.error === undefined ? [] : [`failed: ${firstLine(run.error)}`]),
    ].map((note) => `- ${run.system}: ${note}`));
    if (notes.length > 0) lines.push('', ...notes);
    lines.push('', `![${workload.id} ${workload.title}](img/${chartFileName(workload.id)})`);
  }
  lines.push('');
  return lines.join('\n');
}

/**
 * A chart's footer: when its runs were measured (the first and last start dates) and on what
 * machine, as far as the runs recorded it; the results file's own date and machine are the
 * last invocation's, which may not have run this workload at all.
 */
export function chartFooter(workload: WorkloadId, runs: readonly WorkloadRun[]): string {
  const dates = runs.map((run) => run.startedAt.slice(0, 10)).sort();
  const first = dates[0] ?? '';
  const last = dates.at(-1) ?? '';
  const machines = new Set(runs.map((run) => run.machine ?? 'machine not recorded'));
  const machine = machines.size === 1 ? [...machines][0]! : 'more than one machine';
  return `${first === last ? last : `${first} to ${last}`} · ${machine} · npm run bench:peers -- --workload ${workload} --system all`;
}

/** Whether every run recorded the same machine as the file's (the last invocation's). */
function oneMachine(results: ResultsFile): boolean {
  return results.runs.every((run) => run.machine === results.machine);
}

function measuredOn(results: ResultsFile): string {
  const date = results.finishedAt.slice(0, 10);
  if (oneMachine(results)) return `Measured ${date} on ${results.machine}.`;
  return `Measured up to ${date} on more than one machine (the machine and its speed change from day to day): each run's notes ` +
    `name its machine where it recorded one (runs from before 2026-12-03 did not); the last invocation ran on ${results.machine}.`;
}

function orderedRuns(runs: WorkloadRun[]): WorkloadRun[] {
  return [...runs].sort((left, right) => systemNames.indexOf(left.system) - systemNames.indexOf(right.system));
}

function workloadTable(workload: Workload, runs: WorkloadRun[]): string[] {
  const keys: { key: string; label: string; unit: string }[] = [];
  for (const run of runs) {
    for (const item of run.figures) if (!keys.some((known) => known.key === item.key)) keys.push(item);
  }
  const headline = keys.find((known) => known.key === workload.headlineKey);
  const references = (['tickler-sqlite', 'tickler-postgres', 'tickler-postgres-direct'] as const).filter((name) => runs.some((run) => run.system === name));
  const header = ['system', ...keys.map((known) => `${known.label} (${known.unit})`),
    ...references.map((name) => `${headline?.label ?? workload.headlineKey}: system ÷ ${name}`)];
  const rows = runs.map((run) => [
    run.system,
    ...keys.map((known) => cell(run.figures.find((item) => item.key === known.key))),
    ...references.map((name) => ratioCell(run, runs.find((other) => other.system === name)!, workload.headlineKey)),
  ]);
  return [`| ${header.join(' | ')} |`, `| ${header.map(() => '---').join(' | ')} |`, ...rows.map((row) => `| ${row.join(' | ')} |`)];
}

function cell(item: PeerFigure | undefined): string {
  if (item === undefined || item.value === null) return 'n/a';
  const shown = formatValue(item.value);
  return item.better === 'zero' && item.value !== 0 ? `**${shown}**` : shown;
}

function ratioCell(run: WorkloadRun, reference: WorkloadRun, key: string): string {
  const value = run.figures.find((item) => item.key === key)?.value ?? null;
  const referenceValue = reference.figures.find((item) => item.key === key)?.value ?? null;
  if (value === null || referenceValue === null || referenceValue === 0) return 'n/a';
  const ratio = value / referenceValue;
  // Two significant digits: ratios here span from thousandths to thousands.
  return `${ratio >= 100 ? Math.round(ratio).toLocaleString('en-US') : Number(ratio.toPrecision(2)).toString()}×`;
}

function firstLine(text: string): string {
  const lines = text.split('\n');
  return lines.length <= 2 ? text : `${lines.slice(0, 2).join(' ')} …`;
}
