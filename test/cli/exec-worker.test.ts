// `tickler worker --exec`: real child processes through /bin/sh, driven by the real worker
// against the fake server of the worker tests. Exit codes map to outcomes; the payload
// arrives on stdin; the run's identity in the environment; an aborted run kills the child.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, beforeEach, describe, test } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { createExecHandler, RunningCommands, TailBuffer } from '../../src/cli/exec-handler.js';
import { cliExecStderrTailBytesMax } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { TicklerClient } from '../../src/worker/client.js';
import { PermanentError } from '../../src/worker/errors.js';
import { createWorker, type Worker } from '../../src/worker/worker.js';
import type { CompleteRequest } from '../../src/worker/wire.js';
import { FakeTicklerServer, leasedRun } from '../worker/fake-server.js';

const startMs = Date.parse('2026-11-29T02:00:00.000Z');
const directory = mkdtempSync(join(tmpdir(), 'tickler-exec-'));
after(() => rmSync(directory, { recursive: true, force: true }));

describe('tickler worker --exec against a server', () => {
  let server: FakeTicklerServer;
  let worker: Worker | undefined;

  beforeEach(async () => {
    server = new FakeTicklerServer();
    await server.listen();
  });

  afterEach(async () => {
    await worker?.stop({ timeoutMs: 0 });
    await server.close();
  });

  async function completionOf(command: string, payload: unknown = { n: 1 }): Promise<CompleteRequest> {
    worker = createWorker({
      client: new TicklerClient({ baseUrl: server.url }), pool: 'ops', concurrency: 1, leaseS: 60,
      handler: createExecHandler({ command, pool: 'ops', stderrSink: () => undefined, stdoutSink: () => undefined }),
      logger: silentLogger(), clock: new VirtualClock(startMs),
    });
    worker.start();
    const completed = server.next<{ body: CompleteRequest }>('complete');
    server.offer(leasedRun(startMs, { payload }, 60));
    return (await completed).body;
  }

  const cases: [command: string, status: CompleteRequest['status'], error: string | undefined][] = [
    ['exit 0', 'succeeded', undefined],
    ['echo "try later" >&2; exit 75', 'failed', 'command exited with code 75: try later'],
    ['echo "bad invoice" >&2; exit 65', 'failed_permanent', 'command exited with code 65: bad invoice'],
    ['exit 3', 'failed', 'command exited with code 3'],
    ['kill -KILL $$', 'failed', 'command killed by SIGKILL'],
  ];
  for (const [command, status, error] of cases) {
    test(`${JSON.stringify(command)} completes ${status}`, async () => {
      const body = await completionOf(command);
      assert.equal(body.status, status);
      assert.equal(body.error, error);
      assert.equal('result' in body, false);
    });
  }

  test('the payload arrives as JSON on stdin and the run in the environment', async () => {
    const output = join(directory, 'seen.txt');
    const body = await completionOf(
      `cat > ${output}; printf '\\n%s %s %s %s %s' "$TICKLER_RUN_ID" "$TICKLER_JOB_ID" "$TICKLER_ATTEMPT" ` +
      `"$TICKLER_SCHEDULED_AT" "$TICKLER_POOL" >> ${output}`,
      { invoice: 'é', lines: [1, 2] },
    );
    assert.equal(body.status, 'succeeded');
    const completion = server.completions[0]!;
    const [stdin, environment] = readFileSync(output, 'utf8').split('\n');
    assert.deepEqual(JSON.parse(stdin!), { invoice: 'é', lines: [1, 2] });
    const [runId, jobId, attempt, scheduledAt, pool] = environment!.split(' ');
    assert.equal(runId, completion.runId);
    assert.match(jobId!, /^job-/);
    assert.deepEqual([attempt, scheduledAt, pool], ['1', new Date(startMs).toISOString(), 'ops']);
  });

  test('a command that ignores stdin still completes by its exit code', async () => {
    const body = await completionOf('exit 0', { big: 'x'.repeat(200_000) });
    assert.equal(body.status, 'succeeded');
  });

  test('--exec @payload runs the payload\'s command with its shell, environment, working directory and stdin', async () => {
    const body = await completionOf('@payload', { exec: {
      command: 'printf "%s|%s|%s|" "$GREETING" "$(pwd)" "$0"; cat; echo warn >&2', shell: '/bin/bash',
      env: { GREETING: 'hello' }, cwd: directory, stdin: 'line 1\nline 2\n',
    } });
    assert.equal(body.status, 'succeeded', body.error);
    assert.deepEqual(body.result, { exit_code: 0, output_tail: `hello|${directory}|/bin/bash|line 1\nline 2\nwarn\n` });
  });

  test('--exec @payload keeps the last 4 KiB of its output in a failure', async () => {
    const noisy = await completionOf('@payload', { exec: { command: `head -c 10000 /dev/zero | tr '\\0' a; printf END; exit 3` } });
    assert.equal(noisy.status, 'failed');
    assert.ok(noisy.error!.endsWith('aaaEND'));
    assert.equal(noisy.error!.length, 'command exited with code 3: '.length + cliExecStderrTailBytesMax);
  });

  test('--exec @payload refuses a payload without a command, permanently', async () => {
    const bad = await completionOf('@payload', { command: 'not under exec' });
    assert.equal(bad.status, 'failed_permanent');
    assert.match(bad.error!, /the payload's "exec" must be an object/);
  });

  test('only the last 4 KiB of stderr are reported', async () => {
    const body = await completionOf(`head -c 10000 /dev/zero | tr '\\0' a >&2; printf END >&2; exit 1`);
    assert.equal(body.status, 'failed');
    assert.ok(body.error!.endsWith('aaaEND'));
    assert.equal(body.error!.length, 'command exited with code 1: '.length + cliExecStderrTailBytesMax);
  });
});

/** A promise and the function that resolves it (Node 20 has no Promise.withResolvers). */
function signalled(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((res) => {
    resolve = res;
  });
  return { promise, resolve };
}

describe('createExecHandler kills', () => {
  const run = leasedRun(startMs);

  test('an aborted run gets SIGTERM, and its grandchildren too', async () => {
    const controller = new AbortController();
    const started = signalled();
    const handler = createExecHandler({
      command: 'sleep 30 & echo ready >&2; wait', pool: 'ops',
      stderrSink: (chunk) => chunk.toString().includes('ready') && started.resolve(),
    });
    const outcome = Promise.resolve(handler(run, { signal: controller.signal }));
    await started.promise;
    controller.abort(new Error('lease lost'));
    await assert.rejects(outcome, /killed by SIGTERM/);
  });

  test('a payload command past its timeout_s is killed and fails, saying so', async () => {
    const clock = new VirtualClock(startMs);
    const started = signalled();
    const handler = createExecHandler({
      command: '@payload', pool: 'ops', clock, stdoutSink: (chunk) => chunk.toString().includes('ready') && started.resolve(),
    });
    const outcome = Promise.resolve(handler(leasedRun(startMs, { payload: { exec: { command: 'echo ready; sleep 30', timeout_s: 10 } } }),
      { signal: new AbortController().signal }));
    const rejected = assert.rejects(outcome, /timed out after 10 s and was killed by SIGTERM/);
    await started.promise;
    await clock.advance(9_999);
    await clock.advance(1);
    await rejected;
  });

  test('a child that ignores SIGTERM gets SIGKILL after the grace period', async () => {
    const clock = new VirtualClock(startMs);
    const controller = new AbortController();
    const started = signalled();
    let killed = false;
    const handler = createExecHandler({
      command: "trap '' TERM; echo ready >&2; sleep 30", pool: 'ops', killGraceMs: 5_000, clock,
      stderrSink: (chunk) => chunk.toString().includes('ready') && started.resolve(),
    });
    const outcome = Promise.resolve(handler(run, { signal: controller.signal })).finally(() => {
      killed = true;
    });
    // Watched from the start: the rejection can arrive while the clock is still settling.
    const rejected = assert.rejects(outcome, /killed by SIGKILL/);
    await started.promise;
    controller.abort(new Error('stopping'));
    await clock.advance(4_999);
    assert.equal(killed, false, 'SIGTERM is ignored until the grace period ends');
    await clock.advance(1);
    await rejected;
  });

  test('exit 65 rejects with a PermanentError', async () => {
    const handler = createExecHandler({ command: 'exit 65', pool: 'ops' });
    await assert.rejects(Promise.resolve(handler(run, { signal: new AbortController().signal })), PermanentError);
  });
});

test('each command\'s outcome is logged with its run id, and RunningCommands holds it while it runs', async () => {
  const logged: { level: string; details: Record<string, unknown>; message: string }[] = [];
  const logger = {
    info: (details: object, message: string) => logged.push({ level: 'info', details: details as Record<string, unknown>, message }),
    warn: (details: object, message: string) => logged.push({ level: 'warn', details: details as Record<string, unknown>, message }),
  };
  const running = new RunningCommands();
  const signal = new AbortController().signal;
  const [succeeds, retries, dies] = [leasedRun(startMs), leasedRun(startMs), leasedRun(startMs)];
  const handlerOf = (command: string) => createExecHandler({ command, pool: 'ops', logger, running, stderrSink: () => undefined });
  const first = Promise.resolve(handlerOf('exit 0')(succeeds, { signal }));
  assert.equal(running.size, 1);
  await first;
  assert.equal(running.size, 0);
  await assert.rejects(Promise.resolve(handlerOf('exit 75')(retries, { signal })));
  await assert.rejects(Promise.resolve(handlerOf('exit 65')(dies, { signal })));
  assert.deepEqual(logged.map(({ level, details, message }) => [level, details['runId'], details['outcome'], details['exitCode'], message]), [
    ['info', succeeds.run_id, 'succeeded', 0, 'command succeeded'],
    ['warn', retries.run_id, 'failed', 75, 'command failed'],
    ['warn', dies.run_id, 'failed_permanent', 65, 'command failed permanently'],
  ]);
  assert.equal(logged[1]?.details['jobId'], retries.job_id);
});

test('TailBuffer keeps exactly the last bytes', () => {
  const tail = new TailBuffer(5);
  for (const piece of ['ab', 'cd', 'efg', 'h']) tail.push(Buffer.from(piece));
  assert.equal(tail.text(), 'defgh');
  const short = new TailBuffer(5);
  short.push(Buffer.from('xy'));
  assert.equal(short.text(), 'xy');
});
