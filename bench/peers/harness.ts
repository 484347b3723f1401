/**
 * Runs the chosen workloads against the chosen systems, one after another in this process:
 * each (workload, system) pair gets a fresh adapter (a fresh database, queue or data
 * directory), so no run sees another's jobs. Results accumulate in a JSON file keyed by
 * (workload, system), and the report and charts are rewritten from it after every run.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { chartFileName, renderReport } from './report.js';
import { Progress } from './progress.js';
import type { ResultsFile, WorkloadRun } from './results.js';
import { renderWorkloadChart } from './svg-chart.js';
import { makeAdapter, unavailableReason } from './systems/index.js';
import type { SystemName } from './types.js';
import type { Workload } from './workloads/common.js';

export interface HarnessOptions {
  workloads: readonly Workload[];
  /** Every workload known, for the report's order. */
  allWorkloads: readonly Workload[];
  systems: readonly SystemName[];
  quick: boolean;
  resultsPath: string;
  /** Where `benchmarks-peers.md` and `img/` go; undefined writes no docs. */
  docsDir: string | undefined;
  findingsPath: string;
  command: string;
  progress: boolean;
}

export function machineDescription(): string {
  const cpuList = cpus();
  return `${cpuList.length} × ${cpuList[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, ` +
    `Node ${process.versions.node}, ${process.platform}`;
}

export async function runHarness(options: HarnessOptions): Promise<ResultsFile> {
  const results = loadResults(options);
  for (const workload of options.workloads) {
    for (const system of options.systems) {
      const run = await runOne(workload, system, options);
      results.runs = results.runs.filter((other) => !(other.workload === run.workload && other.system === run.system));
      results.runs.push(run);
      results.finishedAt = new Date().toISOString();
      saveResults(options, results);
    }
  }
  return results;
}

async function runOne(workload: Workload, system: SystemName, options: HarnessOptions): Promise<WorkloadRun> {
  const label = `${workload.id} ${system}`;
  const progress = new Progress(label, options.progress);
  const startedAt = new Date().toISOString();
  const startedMs = performance.now();
  const adapter = makeAdapter(system);
  const run: WorkloadRun = { workload: workload.id, system, settings: adapter.settings, figures: [], notes: [], startedAt, durationMs: 0 };
  const reason = await unavailableReason(system);
  if (reason !== undefined) {
    run.error = `skipped: ${reason}`;
    progress.note(run.error);
    return run;
  }
  progress.note('starting');
  let started = false;
  try {
    await adapter.start();
    started = true;
    const outcome = await workload.run({ adapter, quick: options.quick, progress });
    run.figures = outcome.figures;
    run.notes = outcome.notes;
  } catch (error) {
    run.error = (error as Error).stack ?? String(error);
    progress.note(`failed: ${run.error}`);
  } finally {
    progress.done();
    if (started || system.startsWith('tickler')) {
      try {
        await adapter.stop();
      } catch (error) {
        run.notes.push(`stopping failed: ${(error as Error).message}`);
      }
    }
  }
  run.durationMs = Math.round(performance.now() - startedMs);
  progress.note(`done in ${(run.durationMs / 1_000).toFixed(1)} s: ${run.figures.map((item) => `${item.key}=${item.value}`).join(' ')}`);
  return run;
}

function loadResults(options: HarnessOptions): ResultsFile {
  const now = new Date().toISOString();
  const fresh: ResultsFile = { startedAt: now, finishedAt: now, command: options.command, machine: machineDescription(), quick: options.quick, runs: [] };
  if (!existsSync(options.resultsPath)) return fresh;
  const previous = JSON.parse(readFileSync(options.resultsPath, 'utf8')) as ResultsFile;
  // Quick and full figures never mix in one file.
  return previous.quick === options.quick ? { ...previous, command: options.command, machine: fresh.machine } : fresh;
}

function saveResults(options: HarnessOptions, results: ResultsFile): void {
  mkdirSync(dirname(options.resultsPath), { recursive: true });
  writeFileSync(options.resultsPath, `${JSON.stringify(results, null, 2)}\n`);
  if (options.docsDir === undefined) return;
  const findings = existsSync(options.findingsPath) ? readFileSync(options.findingsPath, 'utf8') : '';
  mkdirSync(join(options.docsDir, 'img'), { recursive: true });
  writeFileSync(join(options.docsDir, 'benchmarks-peers.md'), renderReport(results, options.allWorkloads, findings));
  for (const workload of options.allWorkloads) {
    const runs = results.runs.filter((run) => run.workload === workload.id && run.error === undefined);
    if (runs.length === 0) continue;
    const header = {
      title: `${workload.id} ${workload.title}: ${workload.description}`,
      footer: `${results.finishedAt.slice(0, 10)} · ${results.machine} · ${results.command}`,
    };
    writeFileSync(join(options.docsDir, 'img', chartFileName(workload.id)), renderWorkloadChart(header, runs));
  }
}
