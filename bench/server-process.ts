/**
 * A real `tickler serve` process for a benchmark: spawned on a temp data directory, ready
 * when it prints its JSON line "tickler listening on URL", measured from outside (RSS from /proc, counters
 * from /metrics) and stopped with real signals (SIGTERM, or SIGKILL for the restart test).
 *
 * It starts what a user's `npm start` starts: bin/tickler.js, which runs the build in dist/
 * when it is fresh and the sources through tsx otherwise (`npm run bench:peers` builds first).
 * The CLI path can be overridden with TICKLER_BENCH_CLI (a script taking the same `serve`
 * flags; a `.ts` path runs through tsx) so the harness can be exercised against another tree.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TicklerClient } from '../src/worker/client.js';

export const repoRoot = resolve(import.meta.dirname, '..');
const cliPathDefault = join(repoRoot, 'bin', 'tickler.js');
const stderrKeptBytesMax = 64 * 1_024;
const listenTimeoutMs = 120_000;

export interface ServerStartOptions {
  dataDir: string;
  args?: string[];
  env?: Record<string, string>;
  /** Directory for `node --cpu-prof`; the profile is written when the process exits normally. */
  cpuProfileDir?: string;
}

export interface BenchServer {
  readonly url: string;
  readonly pid: number;
  readonly dataDir: string;
  readonly client: TicklerClient;
  /** Monotonic time (performance.now()) at spawn and when it printed its URL. */
  readonly spawnedAtMonotonicMs: number;
  readonly listeningAtMonotonicMs: number;
  rssBytes(): number;
  stderrTail(): string;
  /** SIGTERM, then waits for the exit; answers the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL (kill -9), then waits for the exit. */
  kill(): Promise<void>;
}

export function makeTempDir(prefix: string): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export async function startBenchServer(options: ServerStartOptions): Promise<BenchServer> {
  const cliPath = process.env['TICKLER_BENCH_CLI'] ?? cliPathDefault;
  const nodeFlags = cliPath.endsWith('.ts') ? ['--import', 'tsx'] : [];
  if (options.cpuProfileDir !== undefined) {
    mkdirSync(options.cpuProfileDir, { recursive: true });
    nodeFlags.push('--cpu-prof', `--cpu-prof-dir=${options.cpuProfileDir}`);
  }
  const spawnedAtMonotonicMs = performance.now();
  const child = spawn(process.execPath,
    [...nodeFlags, cliPath, 'serve', '--port', '0', '--data-dir', options.dataDir, ...(options.args ?? [])],
    { cwd: repoRoot, env: { ...process.env, TICKLER_LOG_LEVEL: 'warn', ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-stderrKeptBytesMax);
  });
  const exited = new Promise<number | null>((resolvePromise) => child.on('exit', (code) => resolvePromise(code)));
  const url = await waitForUrl(child, exited, () => stderr);
  const listeningAtMonotonicMs = performance.now();
  const pid = child.pid!;
  return {
    url,
    pid,
    dataDir: options.dataDir,
    client: new TicklerClient({ baseUrl: url, requestTimeoutMs: 600_000 }),
    spawnedAtMonotonicMs,
    listeningAtMonotonicMs,
    rssBytes: () => rssBytesOf(pid),
    stderrTail: () => stderr.slice(-4_000),
    stop: async () => {
      child.kill('SIGTERM');
      return exited;
    },
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

function waitForUrl(child: ChildProcess, exited: Promise<number | null>, stderr: () => string): Promise<string> {
  return new Promise<string>((resolvePromise, reject) => {
    let stdout = '';
    const timeout = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tickler serve printed no URL within ${listenTimeoutMs} ms:\n${stderr()}`));
    }, listenTimeoutMs);
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /"msg":"tickler listening on ([^"\s]+)[ "]/.exec(stdout);
      if (match !== null) {
        clearTimeout(timeout);
        resolvePromise(match[1]!);
      }
    });
    void exited.then((code) => {
      clearTimeout(timeout);
      reject(new Error(`tickler serve exited with ${code} before listening:\n${stderr()}`));
    });
  });
}

/** Resident set size from /proc (Linux): VmRSS is in kB. */
export function rssBytesOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(status);
  if (match === null) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]) * 1_024;
}

/** Sums every series of a Prometheus counter or gauge in /metrics text (all label sets). */
export function sumMetric(metricsText: string, name: string): number {
  let total = 0;
  for (const line of metricsText.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== ' ' && rest[0] !== '{') continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) total += value;
  }
  return total;
}

export async function dispatchedCount(server: BenchServer): Promise<number> {
  return sumMetric(await server.client.metrics(), 'tickler_dispatches_total');
}

export function cpuProfilesIn(dir: string): string[] {
  return readdirSync(dir).filter((name) => name.endsWith('.cpuprofile')).map((name) => join(dir, name));
}
