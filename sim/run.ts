/**
 * `npm run sim -- [--seeds N] [--from S] [--seed S] [--steps K] [--jobs J] [--bug fence|next-timer] [--file] [--history]`
 *
 * Runs seeds of the deterministic simulation (sim/simulation.ts) and stops at the first that
 * breaks an invariant, printing its violations and the one-line command that replays it.
 * `--seed S` runs that one seed; `--history` prints its history, step by step. `--jobs J`
 * splits the seeds over J processes (default: one per core); `--file` puts each seed's
 * database on a temporary file instead of in memory.
 */
import { spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { replayCommand, runSeed, type SimOptions } from './simulation.js';
import type { Bug } from './stores.js';

function argument(name: string): string | undefined {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? process.argv[index + 1] : undefined;
}

function integerArgument(name: string, fallback: number): number {
  const text = argument(name);
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`--${name} needs a non-negative integer, got ${text}`);
  return value;
}

/** Runs `count` seeds from `from` in `jobs` child processes; answers the worst exit code. */
async function inParallel(from: number, count: number, jobs: number): Promise<number> {
  const share = Math.ceil(count / jobs);
  const passOn = process.argv.slice(2).filter((_, index, all) => !['--from', '--seeds', '--jobs'].includes(all[index] ?? '') &&
    !['--from', '--seeds', '--jobs'].includes(all[index - 1] ?? ''));
  const children: Promise<number>[] = [];
  for (let start = from; start < from + count; start += share) {
    const seeds = Math.min(share, from + count - start);
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1]!, ...passOn,
      '--from', String(start), '--seeds', String(seeds), '--jobs', '1'], { stdio: 'inherit' });
    children.push(new Promise((resolve) => child.on('exit', (code) => resolve(code ?? 1))));
  }
  const codes = await Promise.all(children);
  return Math.max(...codes);
}

async function main(): Promise<number> {
  const steps = integerArgument('steps', 100);
  const bug = (argument('bug') ?? 'none') as Bug;
  if (!['none', 'fence', 'next-timer'].includes(bug)) throw new Error(`--bug is fence or next-timer, got ${bug}`);
  const one = argument('seed');
  const from = one === undefined ? integerArgument('from', 1) : integerArgument('seed', 0);
  const count = one === undefined ? integerArgument('seeds', 100) : 1;
  const jobs = Math.min(count, integerArgument('jobs', availableParallelism()));
  const startedMs = performance.now();
  if (jobs > 1) {
    const code = await inParallel(from, count, jobs);
    console.log(`${count} seeds from ${from} in ${jobs} processes: ${code === 0 ? 'no violation' : 'FAILED'} ` +
      `(${((performance.now() - startedMs) / 1000).toFixed(1)} s)`);
    return code;
  }
  for (let seed = from; seed < from + count; seed++) {
    const options: SimOptions = { seed, steps, bug, file: process.argv.includes('--file') };
    const result = await runSeed(options);
    if (process.argv.includes('--history')) for (const line of result.history) console.log(line);
    if (result.violations.length > 0) {
      console.log(`seed ${seed} FAILED: ${result.violations.length} violation(s)`);
      for (const violation of result.violations.slice(0, 20)) console.log(`  ${violation}`);
      console.log(`replay: ${replayCommand(options)}`);
      return 1;
    }
    if ((seed - from + 1) % 100 === 0) {
      console.log(`${seed - from + 1} seeds passed (${((performance.now() - startedMs) / 1000).toFixed(1)} s)`);
    }
  }
  console.log(`${count} seeds from ${from}, ${steps} steps each: no violation (${((performance.now() - startedMs) / 1000).toFixed(1)} s)`);
  return 0;
}

main().then((code) => process.exit(code), (error: unknown) => {
  console.error(error);
  process.exit(2);
});
