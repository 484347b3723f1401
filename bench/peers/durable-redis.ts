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
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

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

/** Starts of the durable Redis whose port another process took first, before giving up. */
const startTriesMax = 5;

/**
 * Starts the durable Redis on a free port. Ready once the server on that port says it is this
 * process (`INFO server`'s `process_id`): another Redis could take the port between the
 * check and the bind, and answer PING. Ours then exits saying so, and is started again on
 * another port.
 */
export async function startDurableRedis(): Promise<DurableRedis> {
  for (let tryNumber = 1; ; tryNumber++) {
    const started = await startOnFreePort();
    if (started !== 'port taken') return started;
    if (tryNumber >= startTriesMax) throw new Error(`the durable Redis found its port taken ${tryNumber} times`);
  }
}

async function startOnFreePort(): Promise<DurableRedis | 'port taken'> {
  const dir = mkdtempSync(join(tmpdir(), 'peers-redis-aof-'));
  const port = await freeLoopbackPort();
  const logPath = join(dir, 'redis.log');
  const child = spawn('redis-server', ['--bind', durableRedisHost, '--port', String(port), '--dir', dir,
    ...durableRedisSettings, '--daemonize', 'no', '--logfile', logPath], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    await stopChild(child, exited);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadlineMs = Date.now() + readyTimeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const log = existsSync(logPath) ? readFileSync(logPath, 'utf8') : '';
      await stop();
      if (/Address already in use/.test(log)) return 'port taken';
      throw new Error(`the durable Redis exited at its start: ${log.trim().split('\n').at(-1) ?? 'no log'}`);
    }
    if (await redisServerPid(durableRedisHost, port) === child.pid) return { port, stop };
    if (Date.now() > deadlineMs) {
      await stop();
      throw new Error(`the durable Redis did not answer on port ${port} within ${readyTimeoutMs} ms`);
    }
    await sleep(50);
  }
}

/** The `process_id` of the Redis answering at `host`:`port`; undefined when none answers. A raw RESP `INFO server`. */
export function redisServerPid(host: string, port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    let text = '';
    const done = (pid: number | undefined): void => {
      socket.destroy();
      resolve(pid);
    };
    socket.setTimeout(readyTimeoutMs, () => done(undefined));
    socket.on('error', () => done(undefined));
    socket.on('connect', () => socket.write('INFO server\r\n'));
    socket.on('data', (chunk) => {
      text += chunk.toString();
      const match = /process_id:(\d+)\r\n/.exec(text);
      if (match !== null) done(Number(match[1]));
      else if (!text.startsWith('$')) done(undefined); // an error or something other than Redis
    });
  });
}

async function stopChild(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
  await exited;
  clearTimeout(timer);
}
