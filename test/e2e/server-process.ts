// Starts a real `tickler serve` process for end-to-end tests and stops it with real signals.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const repoRoot = resolve(import.meta.dirname, '..', '..');
export const cliPath = join(repoRoot, 'src', 'cli', 'main.ts');

export interface ServerProcess {
  url: string;
  child: ChildProcess;
  dataDir: string;
  /** Everything the process wrote to stderr so far (logs), for failure messages. */
  stderr(): string;
  /** SIGTERM and wait; answers the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL and wait. */
  kill(): Promise<void>;
}

export function tempDataDir(prefix = 'tickler-e2e-'): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Runs the CLI with arguments; resolves with its exit code and output. With `killAfterMs`, a
 * process still running then is killed (code null): a guard against a hang, not a timing check.
 */
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}, stdin?: string, killAfterMs?: number):
  Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', cliPath, ...args], {
      cwd: repoRoot, env: { ...process.env, TICKLER_LOG_LEVEL: 'warn', ...env }, stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    const guard = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolvePromise({ code, stdout, stderr });
    });
    child.stdin.end(stdin ?? '');
  });
}

export async function startServerProcess(options: {
  dataDir: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
}): Promise<ServerProcess> {
  const child = spawn(process.execPath,
    ['--import', 'tsx', cliPath, 'serve', '--port', '0', '--data-dir', options.dataDir, ...(options.args ?? [])],
    { cwd: repoRoot, env: { ...process.env, TICKLER_LOG_LEVEL: 'warn', ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = new Promise<number | null>((resolvePromise) => child.on('exit', (code) => resolvePromise(code)));
  const url = await new Promise<string>((resolvePromise, reject) => {
    let stdout = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /"msg":"tickler listening on ([^"\s]+)[ "]/.exec(stdout);
      if (match !== null) resolvePromise(match[1]!);
    });
    void exited.then((code) => reject(new Error(`tickler serve exited with ${code} before listening:\n${stderr}`)));
  });
  return {
    url,
    child,
    dataDir: options.dataDir,
    stderr: () => stderr,
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

/** Polls `check` until it answers a value (not undefined); for waiting on another process. */
export async function eventually<T>(check: () => Promise<T | undefined>, what: string, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolvePromise) => setTimeout(resolvePromise, 25));
  }
}
