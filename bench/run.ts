/**
 * `npm run bench` (tsx bench/run.ts): runs the benchmarks of bench/benchmarks.ts one after the
 * other, each against its own real `tickler serve` process, and prints their figures as the
 * markdown that goes into docs/benchmarks.md.
 *
 *   --only NAME[,NAME]  run only these (names: see --list)
 *   --quick             tiny counts, for the smoke test; targets are not judged
 *   --cpu-prof          run the servers under node --cpu-prof and print their top frames
 *   --json FILE         also write the results as JSON
 *   --markdown FILE     also write the markdown to FILE
 *   --list              print the benchmark names and exit
 *   --size NAME=N       a benchmark's size setting (repeatable; e.g. fairness: --size ready=20000)
 *   NAME ...            as --only NAME,...
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { benchmarks } from './benchmarks.js';
import type { BenchContext, Benchmark } from './context.js';
import { isoOf, wallClock } from './load.js';
import { machineInfo, markdownOfMachine, markdownOfResult, markdownOfSummary, verdictOf, type RecordedResult } from './report.js';
import { repoRoot } from './server-process.js';

interface RunOptions {
  only: string[] | null;
  quick: boolean;
  cpuProfile: boolean;
  jsonPath: string | null;
  markdownPath: string | null;
  sizes: Record<string, number>;
}

function parseOptions(argv: string[]): RunOptions | 'list' {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      only: { type: 'string' },
      quick: { type: 'boolean', default: false },
      'cpu-prof': { type: 'boolean', default: false },
      json: { type: 'string' },
      markdown: { type: 'string' },
      list: { type: 'boolean', default: false },
      size: { type: 'string', multiple: true },
    },
    strict: true,
    allowPositionals: true,
  });
  if (values.list === true) return 'list';
  const named = [...(values.only === undefined ? [] : values.only.split(',')), ...positionals].map((name) => name.trim()).filter(Boolean);
  const only = named.length === 0 ? null : named;
  const sizes: Record<string, number> = {};
  for (const setting of values.size ?? []) {
    const [name, value] = setting.split('=');
    if (name === undefined || value === undefined || !Number.isFinite(Number(value))) throw new Error(`--size takes NAME=N, not ${setting}`);
    sizes[name] = Number(value);
  }
  for (const name of only ?? []) {
    if (!benchmarks.some((benchmark) => benchmark.name === name)) {
      throw new Error(`unknown benchmark ${name}; known: ${benchmarks.map((benchmark) => benchmark.name).join(', ')}`);
    }
  }
  return {
    only,
    quick: values.quick === true,
    cpuProfile: values['cpu-prof'] === true,
    jsonPath: values.json ?? null,
    markdownPath: values.markdown ?? null,
    sizes,
  };
}

function commandOf(name: string, options: RunOptions): string {
  return ['npm run bench --', '--only', name, ...(options.quick ? ['--quick'] : []), ...(options.cpuProfile ? ['--cpu-prof'] : []),
    ...Object.entries(options.sizes).map(([size, value]) => `--size ${size}=${value}`)].join(' ');
}

async function runOne(benchmark: Benchmark, options: RunOptions, runStamp: string): Promise<RecordedResult> {
  const cleanups: (() => Promise<void> | void)[] = [];
  const log = (message: string): void => {
    process.stderr.write(`[${isoOf(wallClock.nowMs())}] ${message}\n`);
  };
  const context: BenchContext = {
    quick: options.quick,
    cpuProfile: options.cpuProfile,
    sizes: options.sizes,
    log,
    tempDir: (prefix) => {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      return dir;
    },
    profileDir: (label) => {
      const dir = join(repoRoot, 'artifacts', 'bench-profiles', runStamp, label);
      mkdirSync(dir, { recursive: true });
      return dir;
    },
    defer: (cleanup) => {
      cleanups.push(cleanup);
    },
  };
  const startedAt = isoOf(wallClock.nowMs());
  const loadAverageAtStart = loadavg()[0]!;
  const startedMs = performance.now();
  log(`${benchmark.name}: starting`);
  let recorded: RecordedResult;
  try {
    const result = await benchmark.run(context);
    recorded = {
      ...result, command: commandOf(benchmark.name, options), startedAt, wallSeconds: 0,
      loadAverageAtStart, loadAverageAtEnd: 0, quick: options.quick, error: null,
    };
  } catch (error) {
    log(`${benchmark.name}: failed: ${(error as Error).stack ?? String(error)}`);
    recorded = {
      name: benchmark.name, title: benchmark.title, parameters: {}, figures: [], notes: [],
      command: commandOf(benchmark.name, options), startedAt, wallSeconds: 0,
      loadAverageAtStart, loadAverageAtEnd: 0, quick: options.quick, error: (error as Error).message,
    };
  }
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      log(`${benchmark.name}: cleanup failed: ${(error as Error).message}`);
    }
  }
  recorded.wallSeconds = (performance.now() - startedMs) / 1_000;
  recorded.loadAverageAtEnd = loadavg()[0]!;
  log(`${benchmark.name}: done in ${recorded.wallSeconds.toFixed(1)} s`);
  return recorded;
}

const usage = `Usage: npm run bench -- [--only NAME[,NAME]] [--quick] [--cpu-prof] [--json FILE] [--markdown FILE] [--list]
  --only NAME[,NAME]  run only these (names: see --list)
  --quick             tiny counts, for the smoke test; targets are not judged
  --cpu-prof          run the servers under node --cpu-prof and print their top frames
  --json FILE         also write the results as JSON
  --markdown FILE     also write the markdown to FILE
  --list              print the benchmark names and exit
  --size NAME=N       a benchmark's size setting (repeatable; e.g. fairness: --size ready=20000)
  NAME ...            as --only NAME,...
`;

async function main(): Promise<number> {
  if (process.argv.slice(2).some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(usage);
    return 0;
  }
  const options = parseOptions(process.argv.slice(2));
  if (options === 'list') {
    for (const benchmark of benchmarks) process.stdout.write(`${benchmark.name}\t${benchmark.title}\n`);
    return 0;
  }
  const selected = options.only === null ? benchmarks : benchmarks.filter((benchmark) => options.only!.includes(benchmark.name));
  const machine = machineInfo(isoOf(wallClock.nowMs()));
  const runStamp = machine.date.replace(/[:.]/g, '-');
  const results: RecordedResult[] = [];
  for (const benchmark of selected) results.push(await runOne(benchmark, options, runStamp));
  const markdown = [markdownOfMachine(machine), markdownOfSummary(results), ...results.map(markdownOfResult)].join('\n\n') + '\n';
  process.stdout.write(markdown);
  if (options.markdownPath !== null) writeFileSync(options.markdownPath, markdown);
  if (options.jsonPath !== null) {
    const judged = results.map((result) => ({
      ...result,
      figures: result.figures.map((figure) => ({ ...figure, verdict: verdictOf(figure, result.quick) })),
    }));
    writeFileSync(options.jsonPath, JSON.stringify({ machine, results: judged }, null, 2) + '\n');
  }
  // Exit 1 only when the harness broke; a missed target is a finding, reported in the figures.
  return results.some((result) => result.error !== null) ? 1 : 0;
}

main().then((code) => {
  process.exitCode = code;
}, (error: unknown) => {
  process.stderr.write(`bench: ${(error as Error).stack ?? String(error)}\n`);
  process.exitCode = 2;
});
