/**
 * Runs the chosen workloads against the chosen systems, one after another in this process:
 * each (workload, system) pair gets a fresh adapter (a fresh database, queue or data
 * directory), so no run sees another's jobs. Results accumulate in a JSON file keyed by
 * (workload, system), and the report and charts are rewritten from it after every run.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { profileSummaryOf } from '../profile.js';
import { repoRoot } from '../server-process.js';
import { chartFileName, chartFooter, handWrittenPart, renderReport } from './report.js';
import { Progress } from './progress.js';
import type { ResultsFile, WorkloadRun } from './results.js';
import { combineRounds } from './rounds.js';
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
  scale: number;
  /** Profile tickler's server (`node --cpu-prof`) and put its top frames in the run's notes. */
  cpuProfile: boolean;
  resultsPath: string;
  /** Where `benchmarks-peers.md` and `img/` go; undefined writes no docs. */
  docsDir: string | undefined;
  command: string;
  progress: boolean;
  /** Each system runs once per round, interleaved; the row is the rounds' median (rounds.ts). */
  rounds: number;
}

/** The commit measured, and whether the engine's sources had uncommitted changes (engineers share one tree). */
export function sourceRevision(): string {
  const git = (args: string[]): string => execFileSync('git', args, { cwd: repoRoot, encoding: 'utf8' }).trim();
  const dirty = git(['status', '--porcelain', '--', 'src']) !== '';
  return `${git(['rev-parse', '--short', 'HEAD'])}${dirty ? ' + uncommitted changes in src/' : ''}`;
}

export function machineDescription(): string {
  const cpuList = cpus();
  return `${cpuList.length} × ${cpuList[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, ` +
    `Node ${process.versions.node}, ${process.platform}`;
}

export async function runHarness(options: HarnessOptions): Promise<ResultsFile> {
  const results = loadResults(options);
  for (const workload of options.workloads) {
    const rounds = new Map<SystemName, WorkloadRun[]>(options.systems.map((system) => [system, []]));
    for (let round = 0; round < options.rounds; round++) {
      // Every other round in reverse, so no system always runs right after the same neighbour.
      const order = round % 2 === 0 ? options.systems : [...options.systems].reverse();
      for (const system of order) {
        const done = rounds.get(system)!;
        done.push(await runOne(workload, system, options));
        const run = combineRounds(done);
        results.runs = results.runs.filter((other) => !(other.workload === run.workload && other.system === run.system));
        results.runs.push(run);
        results.finishedAt = new Date().toISOString();
        saveResults(options, results);
      }
    }
  }
  return results;
}

async function runOne(workload: Workload, system: SystemName, options: HarnessOptions): Promise<WorkloadRun> {
  const label = `${workload.id} ${system}`;
  const progress = new Progress(label, options.progress);
  const startedAt = new Date().toISOString();
  const startedMs = performance.now();
  const profileDir = options.cpuProfile && system.startsWith('tickler')
    ? join(repoRoot, 'artifacts', 'peers-profiles', `${startedAt.replace(/[:.]/g, '-')}-${workload.id}-${system}`)
    : undefined;
  const adapter = makeAdapter(system, profileDir === undefined ? {} : { cpuProfileDir: profileDir });
  const run: WorkloadRun = {
    workload: workload.id, system, settings: adapter.settings, figures: [], notes: [], startedAt, durationMs: 0, revision: sourceRevision(),
    machine: machineDescription(),
    ...(options.scale === 1 || options.quick ? {} : { scale: options.scale }),
  };
  const reason = await unavailableReason(system);
  if (reason !== undefined) {
    run.error = `skipped: ${reason}`;
    progress.note(run.error);
    return run;
  }
  const loadBefore = loadavg()[0]!;
  progress.note(`starting (load average ${loadBefore.toFixed(1)})`);
  let started = false;
  try {
    await adapter.start();
    started = true;
    const outcome = await workload.run({ adapter, quick: options.quick, scale: options.scale, progress });
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
  // The machine is shared: a run that competed for its two cores says so beside its figures.
  run.notes.push(`load average ${loadBefore.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end (${cpus().length} cores)`);
  if (profileDir !== undefined) run.notes.push(...profileNotes(profileDir));
  run.durationMs = Math.round(performance.now() - startedMs);
  progress.note(`done in ${(run.durationMs / 1_000).toFixed(1)} s: ${run.figures.map((item) => `${item.key}=${item.value}`).join(' ')}`);
  return run;
}

/** The top self-time frames of the server's main-thread profiles (thread 0; the others are tsx's loader). */
function profileNotes(dir: string): string[] {
  if (!existsSync(dir)) return [`no CPU profile in ${relative(repoRoot, dir)}`];
  const files = readdirSync(dir).filter((name) => /\.\d+\.0\.\d+\.cpuprofile$/.test(name));
  return files.map((name) => {
    const summary = profileSummaryOf(JSON.parse(readFileSync(join(dir, name), 'utf8')) as Parameters<typeof profileSummaryOf>[0]);
    const busyMs = Math.max(1, summary.totalMs - summary.idleMs);
    const share = (ms: number): string => `${((ms / busyMs) * 100).toFixed(1)} %`;
    return `server CPU profile \`${relative(repoRoot, join(dir, name))}\`: ${(busyMs / 1_000).toFixed(1)} s busy of ` +
      `${(summary.totalMs / 1_000).toFixed(1)} s; top self time ${summary.topFrames.slice(0, 8).map((entry) => `\`${entry.frame}\` ${share(entry.selfMs)}`).join(', ')}; ` +
      `by file ${summary.topFiles.map((entry) => `\`${entry.file}\` ${share(entry.selfMs)}`).join(', ')}`;
  });
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
  writeDocs(options, results);
}

/** Rewrites the report and charts from `results`, keeping the report's hand-written part; `--report-only` calls it alone. */
export function writeDocs(options: HarnessOptions,
  results: ResultsFile = JSON.parse(readFileSync(options.resultsPath, 'utf8')) as ResultsFile): void {
  if (options.docsDir === undefined) return;
  const reportPath = join(options.docsDir, 'benchmarks-peers.md');
  const handWritten = existsSync(reportPath) ? handWrittenPart(readFileSync(reportPath, 'utf8')) : '';
  mkdirSync(join(options.docsDir, 'img'), { recursive: true });
  writeFileSync(reportPath, renderReport(results, options.allWorkloads, handWritten));
  for (const workload of options.allWorkloads) {
    const runs = results.runs.filter((run) => run.workload === workload.id && run.error === undefined);
    if (runs.length === 0) continue;
    const header = {
      title: `${workload.id} ${workload.title}: ${workload.description}`,
      footer: chartFooter(workload.id, runs),
    };
    writeFileSync(join(options.docsDir, 'img', chartFileName(workload.id)), renderWorkloadChart(header, runs));
  }
}
