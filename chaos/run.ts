/**
 * The chaos test (docs/chaos.md): real processes on PostgreSQL — 3 scheduler nodes, 2 API nodes, 4
 * workers, the last `--direct-workers` (1) of them straight to PostgreSQL — a seeded workload, faults every few seconds drawn from the same seed, then heal,
 * drain, dump the ledger and run the history checker. Exits 0 only when the history is valid
 * and every node behaved (no exit of its own, a clean stop on SIGTERM); 1 on a violation; 2
 * when the harness itself failed. History, report and every process's log land in the
 * artifacts directory.
 *
 * A run keeps to itself, so that two on one machine cannot meet: a private PostgreSQL cluster
 * of its own (database.ts), free ports of its own for its nodes (ports.ts, cluster.ts), a run
 * tag that its nodes name on every answer and its clients check (run-tag.ts), and an
 * artifacts directory no other live run holds. A node that cannot be started, or an answer
 * from outside the run, is named as the cause in the checker's verdict.
 *
 * Usage: npm run chaos -- --seconds 120 --seed N [--pg-url postgres://...] [--artifacts DIR]
 *        [--keep-db] [--lag-bound-ms 1000] [--no-faults] [--dispatch-ahead-min-timers 256]
 *        [--lease-ahead-ms 0] [--worker-lease-s 5] [--direct-workers 1]
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync, appendFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { SystemClock } from '../src/clock.js';
import { timingDefaults, type TimingConfig } from '../src/limits.js';
import { TicklerClient } from '../src/worker/client.js';
import { addClusterProcesses, busiestOwner, sampleCounters, shardsOf, startNode, type ClusterLayout } from './cluster.js';
import { prepareDatabase } from './database.js';
import { describeError, WorkloadDriver } from './driver.js';
import { FaultInjector } from './fault-injector.js';
import { planFaults } from './fault-plan.js';
import { checkHistory } from './history-checker.js';
import { mergeHistories, parseHistory } from './history.js';
import { dumpDispatchTokens, dumpLedger } from './ledger-dump.js';
import { Prng } from './prng.js';
import { HistoryRecorder } from './recorder.js';
import { formatReport } from './report.js';
import { runFetch } from './run-tag.js';
import { expandSchedule } from './schedule-expander.js';
import { pidAlive, StartFailure, Supervisor } from './supervisor.js';
import { planWorkload, workloadDefaults } from './workload.js';

/** TESTING.md "Faults": shard lease 2 s; the worker lease is API.md's minimum, 5 s. */
export const chaosTiming: TimingConfig = {
  shardLeaseTtlMs: 2_000,
  shardLeaseRenewIntervalMs: 600,
  shardLeaseSafetyMarginMs: 500,
  loadHorizonMs: 60_000,
  loadRefreshIntervalMs: 5_000,
  reconcileIntervalMs: 5_000,
  leaseSweepIntervalMs: 250,
  dispatchAheadMs: 2_000,
  dispatchAheadMinTimers: 256,
  dispatchAheadTimersPerSecond: timingDefaults.dispatchAheadTimersPerSecond,
  finishAheadDelayMs: 2_000,
};
/** The workers' lease by default: API.md's minimum, so a lease expires soon after its worker dies. */
const workerLeaseSDefault = 5;
/** Inside a fault window a fire may be late by one lease TTL plus 2 s of loading. */
const faultLagBoundMs = chaosTiming.shardLeaseTtlMs + 2_000;
const drainMsMax = 60_000;
const nodeStopTimeoutMs = 10_000;
/** Chaos workers; `--direct-workers` of them speak straight to PostgreSQL. */
const workerCount = 4;

interface RunArguments {
  seconds: number;
  seed: number;
  pgUrl: string | undefined;
  artifactsDir: string;
  keepDb: boolean;
  lagBoundMs: number;
  /** A baseline run: the same workload, no faults. */
  noFaults: boolean;
  /**
   * The scheduler nodes' herd size for writing one-shot runs ahead (TimingConfig
   * `dispatchAheadMinTimers`); 1 sends every one-shot timer through the two stages, so
   * cancels racing the fire time meet runs already written.
   */
  dispatchAheadMinTimers: number;
  /**
   * The workers' `leaseAheadMs`: runs written ahead are leased that long before their time
   * and held; the checker then judges a dispatch by its handler's start and lets a cancel
   * acknowledged within that window of the fire race it.
   */
  leaseAheadMs: number;
  /**
   * The workers' `lease_s`. Past 15 s, a lease granted by an API node killed before its
   * answer went out is cut (to `lease_s / 3` + 5 s, src/scheduler/orphaned-leases.ts) rather
   * than waited out; at the default 5 s the cut would end later than the lease.
   */
  workerLeaseS: number;
  /** Of the four workers, how many speak straight to PostgreSQL (`openPostgresWorkerApi`); the rest go through the API nodes. */
  directWorkers: number;
}

function parseArguments(argv: string[]): RunArguments {
  const { values } = parseArgs({ args: argv, options: {
    seconds: { type: 'string', default: '120' }, seed: { type: 'string', default: '1' }, 'pg-url': { type: 'string' },
    artifacts: { type: 'string' }, 'keep-db': { type: 'boolean', default: false },
    'lag-bound-ms': { type: 'string', default: '1000' },
    'no-faults': { type: 'boolean', default: false },
    'dispatch-ahead-min-timers': { type: 'string', default: String(chaosTiming.dispatchAheadMinTimers) },
    'lease-ahead-ms': { type: 'string', default: '0' },
    'worker-lease-s': { type: 'string', default: String(workerLeaseSDefault) },
    'direct-workers': { type: 'string', default: '1' },
  } });
  const integer = (text: string, name: string): number => {
    const value = Number(text);
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`--${name} must be a non-negative integer`);
    return value;
  };
  const atMost = (value: number, maximum: number, name: string): number => {
    if (value > maximum) throw new Error(`--${name} must be at most ${maximum}`);
    return value;
  };
  const atLeast = (value: number, minimum: number, name: string): number => {
    if (value < minimum) throw new Error(`--${name} must be at least ${minimum}`);
    return value;
  };
  const seed = integer(values.seed, 'seed');
  return {
    seconds: integer(values.seconds, 'seconds'), seed, pgUrl: values['pg-url'],
    artifactsDir: resolve(values.artifacts ?? `artifacts/chaos-${seed}`), keepDb: values['keep-db'],
    lagBoundMs: integer(values['lag-bound-ms'], 'lag-bound-ms'),
    noFaults: values['no-faults'],
    dispatchAheadMinTimers: integer(values['dispatch-ahead-min-timers'], 'dispatch-ahead-min-timers'),
    leaseAheadMs: integer(values['lease-ahead-ms'], 'lease-ahead-ms'),
    workerLeaseS: atLeast(integer(values['worker-lease-s'], 'worker-lease-s'), workerLeaseSDefault, 'worker-lease-s'),
    directWorkers: atMost(integer(values['direct-workers'], 'direct-workers'), workerCount, 'direct-workers'),
  };
}

function delay(ms: number): Promise<void> {
  return new Promise((resolveDelay) => setTimeout(resolveDelay, ms));
}

const usage = `Usage: npm run chaos -- --seconds 120 --seed N [--pg-url postgres://...] [--artifacts DIR]
       [--keep-db] [--lag-bound-ms 1000] [--no-faults] [--dispatch-ahead-min-timers 256]
       [--lease-ahead-ms 0] [--worker-lease-s 5] [--direct-workers 1]
Exits 0 when the history is valid, 1 on a violation, 2 when the harness failed (docs/chaos.md).
`;

/**
 * Takes the artifacts directory for this run: a live run holding it (its pid in `DIR.lock`) is
 * a refusal, not a directory emptied under it. Answers the release.
 */
function claimArtifacts(dir: string): () => void {
  const lockPath = `${dir}.lock`;
  mkdirSync(dirname(lockPath), { recursive: true });
  for (;;) {
    try {
      writeFileSync(lockPath, String(process.pid), { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number(readFileSync(lockPath, 'utf8').trim());
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && pidAlive(holder)) {
        throw new Error(`${dir} holds the artifacts of the chaos run with pid ${holder}, still running; give --artifacts another`);
      }
      unlinkSync(lockPath); // left by a run that is gone
    }
  }
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return () => rmSync(lockPath, { force: true });
}

async function main(): Promise<number> {
  if (process.argv.slice(2).some((arg) => arg === '--help' || arg === '-h')) {
    process.stdout.write(usage);
    return 0;
  }
  const args = parseArguments(process.argv.slice(2));
  const clock = new SystemClock();
  const startedAtMs = clock.nowMs();
  const releaseArtifacts = claimArtifacts(args.artifactsDir);
  const log = (message: string): void => {
    const line = `[chaos +${((clock.nowMs() - startedAtMs) / 1_000).toFixed(1)}s] ${message}`;
    process.stdout.write(`${line}\n`);
    appendFileSync(join(args.artifactsDir, 'harness.log'), `${line}\n`);
  };
  const recorder = new HistoryRecorder(join(args.artifactsDir, 'harness.jsonl'), () => clock.nowMs());
  // Unique on the machine: the same seed run twice at once gets two tags (and two databases).
  const runTag = `chaos${args.seed}-${startedAtMs.toString(36)}-${process.pid.toString(36)}${randomBytes(3).toString('hex')}`;
  log(`run ${runTag}`);
  try {
    const database = await prepareDatabase({ name: runTag.replace(/-/g, '_'), serverUrl: args.pgUrl, log });
    log(`database ${database.url}${database.note === null ? '' : ` (${database.note})`}`);
    const supervisor = new Supervisor((exit) => {
      log(`${exit.name} (incarnation ${exit.incarnation}) exited on its own: code ${exit.code}, signal ${exit.signal}`);
      recorder.record({ type: 'phase', phase: `unexpected_exit:${exit.name}` });
    });
    try {
      const repoDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
      const layout = await addClusterProcesses(supervisor, { storeUrl: database.url, runTag,
        artifactsDir: args.artifactsDir,
        timing: { ...chaosTiming, dispatchAheadMinTimers: args.dispatchAheadMinTimers }, workerLeaseS: args.workerLeaseS, schedulerCount: 3, apiCount: 2, workerCount, directWorkerCount: args.directWorkers,
        workerLeaseAheadMs: args.leaseAheadMs, repoDir });
      return await runPhases(args, { clock, log, recorder, supervisor, layout, database, runTag });
    } finally {
      const stubborn = await supervisor.terminateAll(nodeStopTimeoutMs);
      if (stubborn.length > 0) log(`killed after ${nodeStopTimeoutMs} ms without exiting: ${stubborn.join(', ')}`);
      if (args.keepDb) log(database.keep());
      else await database.drop().catch((error: unknown) => log(`could not drop the database: ${describeError(error)}`));
    }
  } finally {
    recorder.close();
    releaseArtifacts();
  }
}

/** A node's first start; one that fails is recorded (`node_start_failed`) and fails the run. */
async function startFirst(context: Pick<Context, 'supervisor' | 'layout' | 'recorder' | 'log'>, name: string): Promise<void> {
  try {
    await startNode(context.supervisor, context.layout, name, context.log);
  } catch (error) {
    const reason = error instanceof StartFailure ? error.reason : describeError(error);
    context.recorder.record({ type: 'node_start_failed', process: name, reason });
    throw new Error(`${name} could not be started: ${reason}`, { cause: error });
  }
}

type Context = {
  clock: SystemClock;
  log: (message: string) => void;
  recorder: HistoryRecorder;
  supervisor: Supervisor;
  layout: ClusterLayout;
  database: Awaited<ReturnType<typeof prepareDatabase>>;
  runTag: string;
};

async function runPhases(args: RunArguments, context: Context): Promise<number> {
  const { clock, log, recorder, supervisor, layout, database } = context;
  log(`starting ${layout.schedulers.length} schedulers, ${layout.apis.length} API nodes, ${layout.workers.length} workers`);
  for (const group of [layout.schedulers, layout.apis, layout.workers]) {
    await Promise.all(group.map((name) => startFirst(context, name)));
  }
  log(`nodes: ${[...layout.urls].map(([name, url]) => `${name} ${url}`).join(', ')}`);
  // Shards are taken within a lease TTL of the nodes starting.
  await delay(chaosTiming.shardLeaseTtlMs);

  const prng = new Prng(args.seed);
  const faultPhaseMs = args.seconds * 1_000;
  const workload = planWorkload(prng.fork('workload'), { ...workloadDefaults, faultPhaseMs });
  const faults = args.noFaults ? [] : planFaults(prng.fork('faults'), { faultPhaseMs, schedulers: layout.schedulers, workers: layout.workers,
    apis: layout.apis,
    shardLeaseTtlMs: chaosTiming.shardLeaseTtlMs, workerLeaseMs: args.workerLeaseS * 1_000,
    postgresRestart: database.restart !== null });
  writeFileSync(join(args.artifactsDir, 'plan.json'), JSON.stringify({ seed: args.seed, workload, faults }, null, 1));
  log(`plan: ${workload.creates.length} creates, ${workload.controls.length} cancels/pauses, ${faults.length} faults`);

  const apiUrls = layout.apis.map((name) => layout.urls.get(name) as string);
  const driver = new WorkloadDriver({ apiUrls, recorder, clock, runTag: context.runTag });
  const injector = new FaultInjector({ supervisor, database, recorder, clock, schedulers: layout.schedulers, log,
    busiestOwner: (running) => busiestOwner(database.url, shardsOf(driver.jobIds.values()), running) });
  const phaseStartMs = clock.nowMs() + 200;
  recorder.record({ type: 'phase', phase: 'faults' });
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      await sampleCounters(supervisor, layout, recorder);
      await delay(1_000);
    }
  })();
  await Promise.all([driver.play(workload, phaseStartMs), injector.play(faults, phaseStartMs)]);

  recorder.record({ type: 'phase', phase: 'heal' });
  await heal(supervisor, injector, log);
  const unresolved = await driver.resolveUnknownCreates(5);
  if (unresolved > 0) log(`${unresolved} creates stayed unknown after heal`);
  const healedAtMs = clock.nowMs();
  const expectUntilMs = Math.max(healedAtMs, phaseStartMs + workload.lastDueOffsetMs) + 1_000;
  recorder.record({ type: 'phase', phase: 'drain' });
  const harnessFetch = runFetch(context.runTag, recorder, 'harness');
  await drain(new TicklerClient({ baseUrl: apiUrls[0] as string, fetch: harnessFetch }), clock, expectUntilMs, log);

  // Workers stop first, so that the ledger dump sees every lease a worker recorded.
  await Promise.all(layout.workers.map((name) => supervisor.get(name).terminate(nodeStopTimeoutMs)));
  sampling = false;
  await sampler;
  await sampleCounters(supervisor, layout, recorder);
  const drainEndMs = clock.nowMs();
  recorder.record({ type: 'phase', phase: 'ledger' });
  // A failed dump still gets a verdict: what made it fail (an answer from outside the run, say) is in the history.
  let dumpFailure: string | null = null;
  const dumped = await dumpLedger(new TicklerClient({ baseUrl: apiUrls[0] as string, fetch: harnessFetch }), recorder,
    driver.jobIds.values()).catch((error: unknown) => {
    dumpFailure = `the ledger dump failed: ${describeError(error)}`;
    log(dumpFailure);
    return { runs: 0, jobs: 0 };
  });
  const tokenEvents = await dumpDispatchTokens(database.url, recorder);
  log(`ledger: ${dumped.runs} runs, ${dumped.jobs} jobs, ${tokenEvents} dispatch tokens; faults applied ${injector.applied.length}, `
    + `skipped ${injector.skipped.length}`);
  const stubborn = await supervisor.terminateAll(nodeStopTimeoutMs);

  const history = mergeHistories(readdirSync(args.artifactsDir).filter((name) => name.endsWith('.jsonl'))
    .map((name) => parseHistory(readFileSync(join(args.artifactsDir, name), 'utf8'))));
  writeFileSync(join(args.artifactsDir, 'history.jsonl'), history.map((event) => JSON.stringify(event)).join('\n'));
  const report = checkHistory(history, { lagBoundMs: args.lagBoundMs, faultLagBoundMs, expectUntilMs, drainEndMs,
    expandSchedule, requireStaleRejected: !args.noFaults, leaseAheadMs: args.leaseAheadMs });
  writeFileSync(join(args.artifactsDir, 'report.json'), JSON.stringify(report, null, 1));
  process.stdout.write(`${formatReport(report)}\n`);
  const nodeFindings = [
    ...supervisor.unexpectedExits.map((exit) => `${exit.name} exited on its own (code ${exit.code}, signal ${exit.signal})`),
    ...stubborn.map((name) => `${name} did not stop within ${nodeStopTimeoutMs} ms of SIGTERM`),
    ...injector.failures,
    ...(dumpFailure === null ? [] : [dumpFailure]),
  ];
  for (const finding of nodeFindings) log(`node finding: ${finding}`);
  if (database.note !== null) log(`note: ${database.note}`);
  log(`artifacts in ${args.artifactsDir}`);
  return report.valid && nodeFindings.length === 0 ? 0 : 1;
}

/** Brings every process back: stopped ones continued, dead ones restarted. */
async function heal(supervisor: Supervisor, injector: FaultInjector, log: (message: string) => void): Promise<void> {
  for (const managed of supervisor.processes.values()) {
    if (managed.state === 'stopped') managed.resume();
    if (managed.state === 'down') {
      log(`heal: restarting ${managed.spec.name}`);
      await injector.restart(managed);
    }
  }
}

/**
 * Waits until every run due by `expectUntilMs` has settled (none ready, running or waiting
 * for a retry), at least one fault bound past it and at most `drainMsMax`.
 */
async function drain(client: TicklerClient, clock: SystemClock, expectUntilMs: number,
  log: (message: string) => void): Promise<void> {
  const earliestMs = expectUntilMs + faultLagBoundMs + 2_000;
  const latestMs = expectUntilMs + drainMsMax;
  const until = new Date(expectUntilMs).toISOString();
  for (;;) {
    const nowMs = clock.nowMs();
    if (nowMs >= latestMs) {
      log('drain: still unsettled runs at the drain limit');
      return;
    }
    if (nowMs >= earliestMs) {
      try {
        const pages = await Promise.all((['ready', 'running', 'retry_wait'] as const).map((status) =>
          client.listRuns({ status, until, limit: 1 })));
        if (pages.every((page) => page.items.length === 0)) return;
      } catch (error) {
        log(`drain: cannot list runs (${describeError(error)}); waiting`);
      }
    }
    await delay(500);
  }
}

main().then((code) => {
  process.exit(code);
}, (error: unknown) => {
  process.stderr.write(`chaos harness failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
  process.exit(2);
});
