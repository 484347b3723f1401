// Stopping `tickler worker --exec` stops the commands it started: each runs in a process group
// of its own (so a terminal's Ctrl-C reaches only the worker), and the worker signals those
// groups itself. A real worker process, a real command that sleeps in a grandchild, real
// signals; the fake server hands out the run and takes its completion.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, beforeEach, test } from 'node:test';
import { eventually } from '../e2e/server-process.js';
import { FakeTicklerServer, leasedRun } from '../worker/fake-server.js';
import type { CompleteRequest } from '../../src/worker/wire.js';

const directory = mkdtempSync(join(tmpdir(), 'tickler-exec-stop-'));
after(() => rmSync(directory, { recursive: true, force: true }));

let server: FakeTicklerServer;
let worker: ChildProcess | undefined;
/** The commands' process groups, killed after each test so that a failing one leaves nothing behind. */
const groups: number[] = [];
beforeEach(async () => {
  server = new FakeTicklerServer();
  await server.listen();
});
afterEach(async () => {
  worker?.kill('SIGKILL');
  for (const group of groups.splice(0)) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
    }
  }
  await server.close();
});

function processGroupOf(pid: number): number {
  // /proc/PID/stat: pid (comm) state ppid pgrp ...; comm may hold spaces, so read after the last ')'.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
}

/** Alive and not a zombie (a zombie has exited; only its parent has not reaped it yet). */
function isRunning(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Starts a worker whose command leaves `sleep 600` running as a grandchild; answers the sleep's pid. */
async function workerRunningASleep(name: string, extra: string[] = []): Promise<{ sleepPid: number; exited: Promise<number | null> }> {
  const pidFile = join(directory, `${name}.pid`);
  worker = spawn(process.execPath, ['bin/tickler.js', '--url', server.url, 'worker', '--pool', 'ops', '--wait-s', '1',
    '--exec', `sleep 600 & echo $! > ${pidFile}; wait`, ...extra], {
    env: { PATH: process.env['PATH'] ?? '', TICKLER_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  worker.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = new Promise<number | null>((resolve) => worker!.on('exit', (code) => resolve(code)));
  server.offer(leasedRun(Date.now(), {}, 60));
  const sleepPid = await eventually(async () => {
    const text = existsSync(pidFile) ? readFileSync(pidFile, 'utf8').trim() : '';
    return text === '' ? undefined : Number(text);
  }, `the command to start (worker stderr: ${stderr})`, 30_000);
  assert.ok(isRunning(sleepPid));
  groups.push(processGroupOf(sleepPid));
  return { sleepPid, exited };
}

/** A bound on a wait that, before the fix, never ended: the worker waited for its command forever. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([promise, bound]).finally(() => clearTimeout(timer));
}

test('SIGTERM to the worker terminates its command and the command\'s children, reports the run and exits 0', async () => {
  const { sleepPid, exited } = await workerRunningASleep('term');
  const completed = server.next<{ body: CompleteRequest }>('complete');
  worker!.kill('SIGTERM');
  const { body } = await within(completed, 20_000, 'the completion');
  assert.equal(body.status, 'failed');
  assert.match(body.error ?? '', /killed by SIGTERM/);
  assert.equal(await within(exited, 20_000, 'the worker\'s exit'), 0);
  await eventually(async () => (isRunning(sleepPid) ? undefined : true), `sleep ${sleepPid} to end`, 10_000);
});

test('with --stop-timeout-s the first signal waits; a second one kills the commands at once and exits 1', async () => {
  const { sleepPid, exited } = await workerRunningASleep('second', ['--stop-timeout-s', '600']);
  worker!.kill('SIGTERM');
  worker!.kill('SIGINT');
  assert.equal(await within(exited, 20_000, 'the worker\'s exit'), 1);
  await eventually(async () => (isRunning(sleepPid) ? undefined : true), `sleep ${sleepPid} to end`, 10_000);
});
