// Real `tickler serve` and `tickler worker` processes meeting what waiting cannot heal: a data
// directory another server holds, a database from a newer build, a bad flag, a refused API
// key. Each ends the process at once with a non-zero code and one line on stderr. What can
// heal (no server listening yet) is retried until it does. The guard timeouts only keep a
// broken build from hanging the run; nothing here asserts on how long anything took.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { schemaVersion } from '../../src/store/sqlite/schema.js';
import { TicklerClient } from '../../src/worker/client.js';
import { cliPath, eventually, repoRoot, runCli, startServerProcess, tempDataDir } from '../e2e/server-process.js';

const guardMs = 60_000;

type Outcome = Awaited<ReturnType<typeof runCli>>;

/** Runs the CLI to its exit (killed after `guardMs`, answering code null). */
function tickler(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Outcome> {
  return runCli(args, env, undefined, guardMs);
}

/** Asserts stderr is exactly one line and answers it. */
function oneLine(outcome: Outcome): string {
  const lines = outcome.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one line on stderr, got:\n${outcome.stderr}`);
  return lines[0]!;
}

async function freePort(): Promise<number> {
  const probe = createServer();
  probe.listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

test('a second serve on a held data dir exits non-zero at once, with one line naming the holder\'s pid', async () => {
  const data = tempDataDir();
  const first = await startServerProcess({ dataDir: data.dir });
  try {
    const second = await tickler(['serve', '--port', '0', '--data-dir', data.dir]);
    assert.equal(second.code, 1);
    const line = oneLine(second);
    assert.match(line, new RegExp(`^tickler: data directory \\S+ is in use by process ${first.child.pid} \\(started [^)]+\\): `));
    assert.match(line, /stop that process, or start this one with another --data-dir/);
    assert.equal(second.stdout, '', 'it never listened');
    assert.equal(await fetch(`${first.url}/healthz`).then((answer) => answer.status), 200, 'the first one still serves');
  } finally {
    assert.equal(await first.stop(), 0);
    data.remove();
  }
});

test('serve on a database a newer build wrote exits 1 with one line, and leaves the data dir unlocked', async () => {
  const data = tempDataDir();
  try {
    const db = new Database(join(data.dir, 'tickler.db'));
    db.pragma(`user_version = ${schemaVersion + 1}`);
    db.close();
    const outcome = await tickler(['serve', '--port', '0', '--data-dir', data.dir]);
    assert.equal(outcome.code, 1);
    assert.match(oneLine(outcome), new RegExp(`^tickler: the database \\S+tickler\\.db has schema version ${schemaVersion + 1}, ` +
      `newer than this build understands \\(${schemaVersion}\\): a newer tickler wrote it; run that version or a later one on it$`));
    assert.ok(!readdirSync(data.dir).includes('tickler.lock'), 'the lock was released');
  } finally {
    data.remove();
  }
});

test('a bad flag exits 2 with one line, whatever commander or tickler found wrong', async () => {
  for (const args of [['serve', '--no-such-flag'], ['worker', '--pool', 'p'], ['serve', '--port', 'seventy']]) {
    const outcome = await tickler(args);
    assert.equal(outcome.code, 2, args.join(' '));
    assert.match(oneLine(outcome), /^tickler: (unknown option '--no-such-flag'|required option '--exec <command>' not specified|port must be)/);
  }
});

test('a worker whose API key the server refuses exits 1 with one line saying what to do', async () => {
  const data = tempDataDir();
  const server = await startServerProcess({ dataDir: data.dir, env: { TICKLER_API_KEYS: 'team-a=the-right-key' } });
  try {
    const worker = await tickler(['--url', server.url, '--api-key', 'a-wrong-key', 'worker', '--pool', 'p', '--exec', 'true']);
    assert.equal(worker.code, 1);
    assert.equal(oneLine(worker), 'tickler: lease requests for pool "p" are refused (401 unauthorized: unknown API key); ' +
      'repeating them cannot help, so the worker stops: give it an API key the server accepts ' +
      '(tickler worker: --api-key or TICKLER_API_KEY)');
  } finally {
    await server.stop();
    data.remove();
  }
});

test('a worker started before its server keeps retrying, runs the job once the server listens, and says so', async () => {
  const port = await freePort();
  const worker = spawn(process.execPath, ['--import', 'tsx', cliPath, '--url', `http://127.0.0.1:${port}`, 'worker', '--pool', 'p',
    '--exec', 'cat > /dev/null; echo "ran $TICKLER_JOB_ID"'], {
    cwd: repoRoot, env: { ...process.env, TICKLER_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  worker.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
  worker.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = once(worker, 'exit').then(([code]) => code as number | null);
  const data = tempDataDir();
  try {
    await eventually(async () => (stderr.includes('lease requests fail; retrying with backoff') ? true : undefined),
      'the worker\'s first failure');
    const server = await startServerProcess({ dataDir: data.dir, args: ['--port', String(port)] });
    try {
      const job = await new TicklerClient({ baseUrl: server.url }).createJob({ schedule: { at: new Date().toISOString() }, pool: 'p' });
      await eventually(async () => (stdout.includes(`ran ${job.job_id}`) ? true : undefined), 'the job\'s command');
      await eventually(async () => (stderr.includes('lease requests succeed again') ? true : undefined), 'the recovery line');
      worker.kill('SIGTERM');
      assert.equal(await exited, 0, 'SIGTERM stops it cleanly');
    } finally {
      await server.stop();
    }
  } finally {
    worker.kill('SIGKILL');
    data.remove();
  }
});
