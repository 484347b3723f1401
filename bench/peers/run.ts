/**
 * `npm run bench:peers -- --workload W2 --system bullmq` (or `--workload all --system all`):
 * tickler side by side with BullMQ, graphile-worker and pg-boss. Full runs write
 * bench/peers/results/latest.json, docs/benchmarks-peers.md (keeping its hand-written part) and
 * docs/img/peers-W*.svg; `--quick` runs tiny counts into a
 * results file of its own and writes no docs unless `--docs-dir` says where; so does a run
 * given a `--results` file of its own.
 * Exits 1 when any run failed (a skipped system is not a failure).
 */
import { resolve } from 'node:path';
import { Command } from 'commander';
import { repoRoot } from '../server-process.js';
import { runHarness, writeDocs } from './harness.js';
import { workloadIds } from './results.js';
import { systemNames, type SystemName } from './types.js';
import { workloads } from './workloads/index.js';

const program = new Command()
  .name('bench:peers')
  .option('--workload <ids>', `comma-separated of ${workloadIds.join(', ')}, or all`, 'all')
  .option('--system <names>', `comma-separated of ${systemNames.join(', ')}, or all`, 'all')
  .option('--quick', 'tiny counts (the smoke test)', false)
  .option('--scale <fraction>', 'multiply the issue\'s job counts (e.g. 0.1 for a rehearsal)', '1')
  .option('--rounds <n>', 'run every system n times, interleaved, and report the median (the machine\'s speed drifts)', '1')
  .option('--cpu-prof', 'profile tickler\'s server; top frames go to the notes, profiles to artifacts/peers-profiles', false)
  .option('--results <file>', 'results JSON (accumulates runs by workload and system); writes no docs unless --docs-dir is given')
  .option('--docs-dir <dir>', 'where the report and charts go (default docs/ for full runs, none for --quick)')
  .option('--no-progress', 'no progress lines on stderr')
  .option('--report-only', 'rewrite the report and charts from the results file, running nothing', false)
  .parse();

const options = program.opts<{
  workload: string; system: string; quick: boolean; scale: string; rounds: string; cpuProf: boolean; results?: string; docsDir?: string; progress: boolean;
  reportOnly: boolean;
}>();
const scale = Number(options.scale);
if (!(scale > 0 && scale <= 10)) program.error('--scale must be a number in (0, 10]');
const rounds = Number(options.rounds);
if (!(Number.isInteger(rounds) && rounds >= 1 && rounds <= 9)) program.error('--rounds must be a whole number from 1 to 9');

function pick<T extends string>(value: string, known: readonly T[], what: string): T[] {
  if (value === 'all') return [...known];
  const picked = value.split(',').map((item) => item.trim());
  for (const item of picked) if (!known.includes(item as T)) program.error(`unknown ${what} ${item}: use ${known.join(', ')} or all`);
  return picked as T[];
}

const workloadsChosen = pick(options.workload, workloadIds, 'workload');
const available = workloads.filter((workload) => workloadsChosen.includes(workload.id));
const missing = workloadsChosen.filter((id) => !workloads.some((workload) => workload.id === id));
if (missing.length > 0 && options.workload !== 'all') program.error(`not implemented yet: ${missing.join(', ')}`);
const systems: SystemName[] = pick(options.system, systemNames, 'system');

// Scaled-down runs join the full ones (each run records its scale, and the report shows it).
const resultsName = options.quick ? 'quick' : 'latest';
const harnessOptions = {
  workloads: available,
  allWorkloads: workloads,
  systems,
  quick: options.quick,
  scale,
  cpuProfile: options.cpuProf,
  resultsPath: resolve(options.results ?? `${repoRoot}/bench/peers/results/${resultsName}.json`),
  // Only full-size runs into the default results file write the docs, unless told where: a run
  // into a --results file of its own (an A/B between trees, say) must not overwrite the report.
  docsDir: options.docsDir !== undefined ? resolve(options.docsDir)
    : resultsName === 'latest' && options.results === undefined ? `${repoRoot}/docs` : undefined,
  command: `npm run bench:peers -- ${process.argv.slice(2).join(' ')}`.trim(),
  progress: options.progress,
  rounds,
};
if (options.reportOnly) {
  writeDocs(harnessOptions);
  process.exit(0);
}
const results = await runHarness(harnessOptions);
const failed = results.runs.filter((run) => run.error !== undefined && !run.error.startsWith('skipped:')
  && available.some((workload) => workload.id === run.workload) && systems.includes(run.system));
// Exit rather than wait for the event loop to drain: a peer library may keep timers or pollers
// alive after its stop() (pg-boss with many queues did), and the results are written by now.
process.exit(failed.length > 0 ? 1 : 0);
