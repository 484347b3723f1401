import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { once } from 'node:events';
import net from 'node:net';
import { addClusterProcesses, countersIn, portTaken, startNode, timingEnv } from '../../chaos/cluster.js';
import { planFaults, type FaultPlanOptions, type PlannedFault } from '../../chaos/fault-plan.js';
import { parseHistory } from '../../chaos/history.js';
import { Prng } from '../../chaos/prng.js';
import { HistoryRecorder } from '../../chaos/recorder.js';
import { checkingRunTag, ForeignAnswerError, type ForeignAnswer } from '../../chaos/run-tag.js';
import { StartFailure, Supervisor, type UnexpectedExit } from '../../chaos/supervisor.js';
import { timingDefaults } from '../../src/limits.js';
import { planWorkload, workloadDefaults } from '../../chaos/workload.js';

const faultOptions: FaultPlanOptions = {
  faultPhaseMs: 600_000,
  schedulers: ['scheduler-1', 'scheduler-2', 'scheduler-3'],
  workers: ['worker-1', 'worker-2', 'worker-3', 'worker-4'],
  apis: ['api-1', 'api-2'],
  shardLeaseTtlMs: 2_000,
  workerLeaseMs: 5_000,
  postgresRestart: true,
};

function overlapping(faults: PlannedFault[], predicate: (fault: PlannedFault) => boolean): number {
  const selected = faults.filter(predicate);
  let most = 0;
  for (const fault of selected) {
    const at = fault.startOffsetMs;
    most = Math.max(most, selected.filter((other) => other.startOffsetMs <= at && at < other.startOffsetMs + other.durationMs).length);
  }
  return most;
}

/** The kernel's state letter of a process, once it shows `wanted` (signals arrive asynchronously) or after 2 s. */
async function settledProcessState(pid: number, wanted: string): Promise<string> {
  let state = '';
  for (let tries = 0; tries < 200; tries++) {
    state = readFileSync(`/proc/${pid}/stat`, 'utf8').split(' ')[2] ?? '';
    if (state === wanted) return state;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return state;
}

void describe('seeded generator', () => {
  void it('repeats its sequence for a seed and differs across seeds', () => {
    const draw = (seed: number): number[] => {
      const prng = new Prng(seed);
      return Array.from({ length: 8 }, () => prng.nextUint32());
    };
    assert.deepEqual(draw(42), draw(42));
    assert.notDeepEqual(draw(42), draw(43));
  });

  void it('keeps integers, picks and weights within their ranges', () => {
    const prng = new Prng(7);
    const seen = new Set<number>();
    for (let index = 0; index < 2_000; index++) {
      const value = prng.integer(2, 6);
      assert.ok(value >= 2 && value <= 6 && Number.isInteger(value));
      seen.add(value);
      assert.equal(prng.weighted([['only', 1], ['never', 0]]), 'only');
    }
    assert.deepEqual([...seen].sort(), [2, 3, 4, 5, 6]);
  });
});

void describe('fault plan', () => {
  const faults = planFaults(new Prng(11).fork('faults'), faultOptions);

  void it('is the same for the same seed', () => {
    assert.deepEqual(planFaults(new Prng(11).fork('faults'), faultOptions), faults);
  });

  void it('injects every kind every few seconds, after the first lease TTL', () => {
    assert.deepEqual([...new Set(faults.map((fault) => fault.kind))].sort(),
      ['api_kill', 'postgres_restart', 'scheduler_kill', 'scheduler_stop', 'worker_kill', 'worker_stop']);
    assert.ok((faults[0] as PlannedFault).startOffsetMs >= faultOptions.shardLeaseTtlMs);
    assert.ok(faults.length >= faultOptions.faultPhaseMs / 10_000, `${faults.length} faults in 10 minutes`);
    assert.ok(faults.some((fault) => fault.target === 'busy-owner'));
  });

  void it('stops schedulers for 1.5 to 5 lease TTLs and workers past their lease', () => {
    for (const fault of faults.filter((candidate) => candidate.kind === 'scheduler_stop')) {
      assert.ok(fault.durationMs >= 3_000 && fault.durationMs <= 10_000, `${fault.durationMs} ms`);
    }
    for (const fault of faults.filter((candidate) => candidate.kind === 'worker_stop')) {
      assert.ok(fault.durationMs > faultOptions.workerLeaseMs, `${fault.durationMs} ms`);
    }
  });

  void it('never faults two schedulers, two API nodes, or more than half the workers, at once', () => {
    assert.equal(overlapping(faults, (fault) => fault.kind.startsWith('scheduler')), 1);
    assert.equal(overlapping(faults, (fault) => fault.kind === 'api_kill'), 1);
    assert.ok(overlapping(faults, (fault) => fault.kind.startsWith('worker')) <= 2);
  });

  void it('kills no API node where there is only one', () => {
    const single = planFaults(new Prng(11).fork('faults'), { ...faultOptions, apis: ['api-1'] });
    assert.ok(single.length > 0);
    assert.ok(single.every((fault) => fault.kind !== 'api_kill'));
  });

  void it('leaves the restart out where the database is not ours', () => {
    const shared = planFaults(new Prng(11).fork('faults'), { ...faultOptions, postgresRestart: false });
    assert.ok(shared.length > 0);
    assert.ok(shared.every((fault) => fault.kind !== 'postgres_restart'));
  });
});

void describe('workload plan', () => {
  const plan = planWorkload(new Prng(5), { ...workloadDefaults, faultPhaseMs: 60_000 });

  void it('is the same for the same seed', () => {
    assert.deepEqual(planWorkload(new Prng(5), { ...workloadDefaults, faultPhaseMs: 60_000 }), plan);
  });

  void it('mixes recurring jobs, one-shots due over the run and cancels racing their fire time', () => {
    const recurring = plan.creates.filter((create) => 'cron' in create.schedule);
    assert.equal(recurring.length, workloadDefaults.recurringJobs);
    const oneShots = plan.creates.filter((create) => 'dueOffsetMs' in create.schedule);
    assert.equal(oneShots.length, 60 * workloadDefaults.oneShotsPerSecond);
    const dueByCreate = new Map(oneShots.map((create) => [create.createId, (create.schedule as { dueOffsetMs: number }).dueOffsetMs]));
    const racing = plan.controls.filter((control) => dueByCreate.has(control.createId));
    assert.ok(racing.length > 0);
    for (const control of racing) {
      assert.ok(Math.abs(control.sendOffsetMs - (dueByCreate.get(control.createId) as number)) <= workloadDefaults.cancelRaceMs);
    }
    assert.ok(new Set(plan.creates.map((create) => create.behaviour)).size >= 4, 'handlers fail and outlive their lease too');
  });

  void it('sends every tenth one-shot due at once, for the create to dispatch; the others 1.5-12 s ahead', () => {
    const oneShots = plan.creates.filter((create) => 'dueOffsetMs' in create.schedule);
    const leadOf = (create: (typeof oneShots)[number]): number =>
      (create.schedule as { dueOffsetMs: number }).dueOffsetMs - create.sendOffsetMs;
    const dueAtSend = oneShots.filter((create) => leadOf(create) === 0);
    assert.equal(dueAtSend.length, oneShots.length / workloadDefaults.dueAtCreateEvery);
    assert.ok(oneShots.filter((create) => leadOf(create) !== 0)
      .every((create) => leadOf(create) >= workloadDefaults.dueAfterMsMin && leadOf(create) <= workloadDefaults.dueAfterMsMax));
  });
});

void describe('history recorder', () => {
  const directory = mkdtempSync(join(tmpdir(), 'chaos-recorder-'));
  after(() => rmSync(directory, { recursive: true, force: true }));

  void it('writes one JSON line per event, stamped with the given clock', () => {
    const path = join(directory, 'history.jsonl');
    const recorder = new HistoryRecorder(path, () => 1_000);
    recorder.record({ type: 'phase', phase: 'faults' });
    recorder.record({ type: 'phase', phase: 'drain', atMs: 2_000 });
    recorder.close();
    assert.deepEqual(parseHistory(readFileSync(path, 'utf8')), [
      { type: 'phase', phase: 'faults', atMs: 1_000 },
      { type: 'phase', phase: 'drain', atMs: 2_000 },
    ]);
    assert.throws(() => recorder.record({ type: 'phase', phase: 'late' }), /closed/);
  });
});

void describe('cluster helpers', () => {
  void it('reads counters summed over their labels', () => {
    const text = [
      '# HELP tickler_dispatch_rejected_stale_token_total x',
      'tickler_dispatch_rejected_stale_token_total{shard="1"} 2',
      'tickler_dispatch_rejected_stale_token_total{shard="2"} 3',
      'tickler_shard_ownership_changes_total 7',
      'tickler_unrelated_total 9',
    ].join('\n');
    assert.deepEqual([...countersIn(text)], [['tickler_dispatch_rejected_stale_token_total', 5],
      ['tickler_shard_ownership_changes_total', 7]]);
  });

  void it('names timing variables the way the serve command reads them', () => {
    assert.equal(timingEnv({ shardLeaseTtlMs: 2_000 } as never)['TICKLER_SHARD_LEASE_TTL_MS'], '2000');
  });
});

void describe('process supervisor', () => {
  const directory = mkdtempSync(join(tmpdir(), 'chaos-supervisor-'));
  const exits: UnexpectedExit[] = [];
  let exitWaiter: (() => void) | undefined;
  const supervisor = new Supervisor((exit) => {
    exits.push(exit);
    exitWaiter?.();
  });
  after(async () => {
    await supervisor.terminateAll(2_000);
    rmSync(directory, { recursive: true, force: true });
  });
  const script = "process.on('SIGTERM', () => process.exit(0)); setInterval(() => {}, 1000); console.log('up');";

  void it('kills, restarts, stops and continues a real process', async () => {
    const managed = supervisor.add({ name: 'sleeper', command: process.execPath, args: ['-e', script],
      logPath: join(directory, 'sleeper.log'), readyLogText: 'up' });
    await managed.start();
    assert.equal(managed.state, 'running');
    const firstPid = managed.pid;
    await managed.kill();
    assert.equal(managed.state, 'down');
    await managed.start();
    assert.equal(managed.incarnation, 2);
    assert.notEqual(managed.pid, firstPid);
    managed.pause();
    assert.equal(managed.state, 'stopped');
    assert.equal(await settledProcessState(managed.pid as number, 'T'), 'T');
    managed.resume();
    assert.equal(managed.state, 'running');
    assert.deepEqual(await managed.terminate(2_000), { graceful: true });
    assert.deepEqual(exits, [], 'exits the supervisor caused are not unexpected');
  });

  void it('notices a process that exits on its own', async () => {
    const managed = supervisor.add({ name: 'quitter', command: process.execPath,
      // It quits when told to by someone other than the supervisor.
      args: ['-e', "process.on('SIGUSR2', () => process.exit(3)); setInterval(() => {}, 1000); console.log('up')"],
      logPath: join(directory, 'quitter.log'), readyLogText: 'up' });
    const exited = new Promise<void>((resolve) => {
      exitWaiter = resolve;
    });
    await managed.start();
    process.kill(managed.pid as number, 'SIGUSR2');
    await exited;
    assert.equal(managed.state, 'down');
    assert.deepEqual(exits, [{ name: 'quitter', incarnation: 1, code: 3, signal: null }]);
  });

  void it('fails the start of a process that exits before it is ready, with its own last words, not as an exit of its own', async () => {
    const managed = supervisor.add({ name: 'refused', command: process.execPath,
      args: ['-e', "console.log('starting'); console.error('tickler: cannot listen on 127.0.0.1:1: no'); process.exit(1)"],
      logPath: join(directory, 'refused.log'), readyLogText: 'up' });
    const before = exits.length;
    await assert.rejects(managed.start(), (error: unknown) => error instanceof StartFailure && error.exited
      && error.reason === 'tickler: cannot listen on 127.0.0.1:1: no' && /exited before it was ready \(code 1\)/.test(error.message));
    assert.equal(managed.state, 'down');
    assert.equal(exits.length, before, 'the failed start is its caller\'s to judge');
  });
});

void describe('a node of a run and its port', () => {
  const directory = mkdtempSync(join(tmpdir(), 'chaos-node-port-'));
  const supervisor = new Supervisor();
  const held: net.Server[] = [];
  after(async () => {
    await supervisor.terminateAll(10_000);
    await Promise.all(held.map((server) => new Promise((resolve) => server.close(resolve))));
    rmSync(directory, { recursive: true, force: true });
  });
  const hold = async (port: number): Promise<void> => {
    const server = net.createServer();
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    held.push(server);
  };
  const portOf = (url: string | undefined): number => Number(new URL(url as string).port);

  void it('moves a first start off a port another process took, names its run on answers, and fails a restart loudly there', async () => {
    // One scheduler node, on SQLite: the port handling is the same for every node of a run.
    const layout = await addClusterProcesses(supervisor, { storeUrl: `sqlite:${join(directory, 'tickler.db')}`, runTag: 'run-a',
      artifactsDir: directory, timing: timingDefaults, workerLeaseS: 5, workerLeaseAheadMs: 0, schedulerCount: 1, apiCount: 0,
      workerCount: 0, directWorkerCount: 0, repoDir: resolve(import.meta.dirname, '..', '..') });
    const drawn = portOf(layout.urls.get('scheduler-1'));
    assert.ok(drawn < 32_768, `port ${drawn} is below the ephemeral range`);
    await hold(drawn);
    const logged: string[] = [];
    await startNode(supervisor, layout, 'scheduler-1', (message) => logged.push(message));
    const url = layout.urls.get('scheduler-1') as string;
    assert.notEqual(portOf(url), drawn);
    assert.match(logged.join('\n'), new RegExp(`cannot listen on 127\\.0\\.0\\.1:${drawn}: address already in use`));

    assert.equal((await checkingRunTag('run-a', () => assert.fail('its own node'))(`${url}/healthz`)).status, 200);
    const foreign: ForeignAnswer[] = [];
    await assert.rejects(checkingRunTag('run-b', (answer) => foreign.push(answer))(`${url}/healthz`), ForeignAnswerError);
    assert.deepEqual(foreign, [{ url: `${url}/healthz`, tag: 'run-a' }]);

    const managed = supervisor.get('scheduler-1');
    await managed.kill();
    await hold(portOf(url));
    await assert.rejects(managed.start(), (error: unknown) => error instanceof StartFailure && portTaken(error)
      && error.reason === `tickler: cannot listen on 127.0.0.1:${portOf(url)}: address already in use (EADDRINUSE)`);
    assert.deepEqual(supervisor.unexpectedExits, []);
  });
});
