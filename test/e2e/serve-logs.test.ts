// What `tickler serve` writes, read from a real process: every line on stdout and on stderr is
// JSON (a log collector parses them all), the readiness line included; and a run going dead is
// logged with its run id, whichever way it dies: a permanent failure, a failure with no
// attempts left, or a worker lease that runs out with none left (the lease sweeper).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { TicklerClient } from '../../src/index.js';
import { repoRoot, tempDataDir } from './server-process.js';

const startAt = '2026-11-29T00:00:00.000Z';

interface LogLine {
  msg?: string;
  url?: string;
  runId?: string;
  [field: string]: unknown;
}

function parsedLines(text: string, stream: string): LogLine[] {
  return text.split('\n').filter((line) => line !== '').map((line) => {
    try {
      return JSON.parse(line) as LogLine;
    } catch {
      throw new assert.AssertionError({ message: `a line on ${stream} is not JSON: ${line}` });
    }
  });
}

test('every line tickler serve writes is JSON, and each run going dead is logged with its run id', async () => {
  const data = tempDataDir();
  const child = spawn(process.execPath, ['bin/tickler.js', 'serve', '--port', '0', '--data-dir', data.dir, '--virtual-clock',
    '--start-at', startAt, '--log-level', 'info'], { cwd: repoRoot, env: { PATH: process.env['PATH'] ?? '' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        const ready = stdout.endsWith('\n') ? parsedLines(stdout, 'stdout').find((line) => line.url !== undefined) : undefined;
        if (ready !== undefined) resolve(ready.url!);
      });
      void exited.then((code) => reject(new Error(`tickler serve exited with ${code}:\n${stderr}`)));
    });
    const client = new TicklerClient({ baseUrl: url });
    const create = (leaseS: number) => client.createJob({ schedule: { delay_s: 1 }, pool: 'dying', retry: { max_attempts: 1 }, lease_s: leaseS });
    const [permanent, outOfAttempts, expired] = [await create(60), await create(60), await create(5)];
    await client.advanceClock(1);
    const { runs } = await client.leaseRuns({ pool: 'dying', max: 3, wait_s: 5 });
    assert.equal(runs.length, 3);
    const runOf = (jobId: string) => runs.find((run) => run.job_id === jobId)!;
    const permanentRun = runOf(permanent.job_id);
    const failedRun = runOf(outOfAttempts.job_id);
    await client.completeRun(permanentRun.run_id, { fencing_token: permanentRun.fencing_token, status: 'failed_permanent', error: 'bad input' });
    await client.completeRun(failedRun.run_id, { fencing_token: failedRun.fencing_token, status: 'failed', error: 'try later' });
    await client.advanceClock(10);
    assert.equal((await client.getRun(runOf(expired.job_id).run_id)).status, 'dead');
  } finally {
    child.kill('SIGTERM');
    assert.equal(await exited, 0, stderr);
    data.remove();
  }
  const out = parsedLines(stdout, 'stdout');
  assert.match(out[0]?.msg ?? '', /^tickler listening on http:\/\/127\.0\.0\.1:\d+ \(roles api,scheduler, node \S+\)$/);
  const logs = parsedLines(stderr, 'stderr');
  const dead = logs.filter((line) => line.msg?.startsWith('run is dead'));
  assert.deepEqual(dead.map((line) => line.msg).sort(), [
    'run is dead: failed permanently',
    'run is dead: its lease ran out with no attempts left',
    'run is dead: out of attempts',
  ]);
  for (const line of dead) assert.match(line.runId ?? '', /^[0-9a-f]{32}$/);
});
