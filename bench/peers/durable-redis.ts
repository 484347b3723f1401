/**
 * A Redis of the harness's own for `bullmq-aof`: a `redis-server` process on a free loopback
 * port that appends every write to its AOF and fsyncs it before answering (`appendonly yes`,
 * `appendfsync always`, no snapshots), in a temporary directory removed when it stops. That
 * is the durability tickler promises (DESIGN.md invariant 5: an acknowledged create survives
 * `kill -9`, tickler answering after its commit's fsync), which the machine's shared Redis,
 * started with `--appendonly no --save ""`, does not give: a create it acknowledged is gone
 * if it dies.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { redisPingFailure } from './services.js';

export const durableRedisHost = '127.0.0.1';
const readyTimeoutMs = 10_000;
const stopTimeoutMs = 10_000;

/** The settings that make this Redis durable, as passed to `redis-server`, and in words. */
const durableRedisSettings = ['--appendonly', 'yes', '--appendfsync', 'always', '--save', ''] as const;
export const durableRedisDescription = 'appendonly yes, appendfsync always, no RDB snapshots';

export interface DurableRedis {
  readonly port: number;
  stop(): Promise<void>;
}

/** Undefined when `redis-server` can be started here; otherwise why not. */
export function durableRedisUnavailableReason(): string | undefined {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined) return `redis-server cannot be started (${probe.error.message})`;
  return probe.status === 0 ? undefined : `redis-server --version exited ${probe.status}`;
}

async function freeLoopbackPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, durableRedisHost, resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port from a loopback listener');
  return address.port;
}

export async function startDurableRedis(): Promise<DurableRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'peers-redis-aof-'));
  const port = await freeLoopbackPort();
  const child = spawn('redis-server', ['--bind', durableRedisHost, '--port', String(port), '--dir', dir,
    ...durableRedisSettings, '--daemonize', 'no', '--logfile', join(dir, 'redis.log')], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    await stopChild(child, exited);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadlineMs = Date.now() + readyTimeoutMs;
  let failure = await redisPingFailure(durableRedisHost, port);
  while (failure !== undefined) {
    if (child.exitCode !== null || Date.now() > deadlineMs) {
      await stop();
      throw new Error(`the durable Redis did not start: ${failure}`);
    }
    await sleep(50);
    failure = await redisPingFailure(durableRedisHost, port);
  }
  return { port, stop };
}

async function stopChild(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
  await exited;
  clearTimeout(timer);
}
