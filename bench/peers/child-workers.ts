/**
 * Spawns `worker-child.ts` for a peer and turns its output lines into handler starts in the
 * harness, so a workload can kill -9 the process that fires jobs and start another.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot, rssBytesOf } from '../server-process.js';
import type { AttachInfo, HandlerStart, SystemName } from './types.js';

const readyTimeoutMs = 60_000;
const stderrKeptChars = 4_000;

export interface ChildWorkers {
  readonly pid: number;
  rssBytes(): number;
  kill(): Promise<void>;
  stop(): Promise<void>;
  stderrTail(): string;
}

export async function startChildWorkers(system: SystemName, attached: AttachInfo, onStart: HandlerStart): Promise<ChildWorkers> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'bench', 'peers', 'worker-child.ts'), system, JSON.stringify(attached)],
    { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-stderrKeptChars);
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  await readLines(child, onStart, exited, () => stderr);
  return {
    pid: child.pid!,
    rssBytes: () => rssBytesOf(child.pid!),
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
    stderrTail: () => stderr,
  };
}

/** Resolves at `ready`; every later line is a handler start. */
function readLines(child: ChildProcess, onStart: HandlerStart, exited: Promise<void>, stderr: () => string): Promise<void> {
  return new Promise((resolve, reject) => {
    let pending = '';
    const timeout = setTimeout(() => reject(new Error(`worker child not ready within ${readyTimeoutMs} ms:\n${stderr()}`)), readyTimeoutMs);
    void exited.then(() => {
      clearTimeout(timeout);
      reject(new Error(`worker child exited before it was ready:\n${stderr()}`));
    });
    child.stdout!.on('data', (chunk: Buffer) => {
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop()!;
      for (const line of lines) {
        if (line === 'ready') {
          clearTimeout(timeout);
          resolve();
          continue;
        }
        const [index, dueAtMs, handledAtMs] = line.split(' ').map(Number);
        onStart({ index: index!, dueAtMs: dueAtMs!, handledAtMs: handledAtMs! });
      }
    });
  });
}
