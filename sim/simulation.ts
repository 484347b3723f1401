/**
 * The deterministic simulation of the whole engine (docs/TESTING.md, "simulation"): tickler's
 * real Scheduler, JobService, RunService, LeaseWaiters and SQLite store, several scheduler
 * nodes and many workers, in one process, on one VirtualClock, every choice drawn from one
 * seed. Each step is a client call, a worker's move, a fault or a heal; time then moves on,
 * and the invariants are checked. At the end every fault is healed, time advances, workers
 * drain, and everything due must be done.
 *
 * The same seed gives the same history line for line: no real timer, thread or I/O callback
 * takes part (SQLite answers synchronously, its commits are not synced, its checkpoint thread
 * never starts), and job ids, retry jitter and faults come from the seed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualClock } from '../src/clock.js';
import { TicklerError } from '../src/errors.js';
import { runIdOf, shardOf } from '../src/domain/identity.js';
import type { CompletionStatus, JobRecord } from '../src/domain/types.js';
import { assertTiming, type TimingConfig } from '../src/limits.js';
import { silentLogger } from '../src/obs/log.js';
import { Metrics } from '../src/obs/metrics.js';
import { Scheduler } from '../src/scheduler/scheduler.js';
import type { ShardPlanner } from '../src/scheduler/shard-lease-manager.js';
import { JobService } from '../src/service/job-service.js';
import { LeaseWaiters } from '../src/service/lease-waiters.js';
import { RunService } from '../src/service/run-service.js';
import type { JobCreateBody, JobPatchBody } from '../src/api/schemas.js';
import type { ExpiredLease, FencedTimer, FiredRun, LeasedRun, ShardLease, Store } from '../src/store/store.js';
import { openSqliteStore, type SqliteStore } from '../src/store/sqlite/index.js';
import { Prng } from '../chaos/prng.js';
import { NodeClock } from './node-clock.js';
import { closeInterval, openInterval, newlyOwedOccurrences, type SimJob } from './model.js';
import { Recorder, brokenStore, firingCalls, nodeStore, recordingStore, type Bug, type NodeControl } from './stores.js';

export interface SimOptions {
  seed: number;
  /** Steps before the liveness phase. */
  steps: number;
  bug?: Bug;
  /** On a temporary file instead of an in-memory database. */
  file?: boolean;
}

export interface SimResult {
  seed: number;
  history: string[];
  violations: string[];
}

const startMs = Date.parse('2026-03-01T00:00:00.000Z');

const timing: TimingConfig = {
  shardLeaseTtlMs: 6_000,
  shardLeaseRenewIntervalMs: 2_000,
  shardLeaseSafetyMarginMs: 1_500,
  loadHorizonMs: 60_000,
  loadRefreshIntervalMs: 10_000,
  reconcileIntervalMs: 10_000,
  leaseSweepIntervalMs: 1_000,
  dispatchAheadMs: 5_000,
  dispatchAheadMinTimers: 16,
  dispatchAheadTimersPerSecond: 5_000,
  finishAheadDelayMs: 2_000,
};
assertTiming(timing);

/** Largest wall-clock step of a node, either way. */
const skewMaxMs = 2_000;
/** Longest window of injected store errors or slow commits on a node. */
const faultWindowMaxMs = 5_000;
/**
 * How late an occurrence may be recorded, faults included: a dead owner's leases run out
 * (TTL) and a survivor looks at its next cycle (renew interval), a failed load waits for the
 * next refresh, a fault window ends, a skewed clock fires late by its skew, the virtual
 * batching window (500 ms), and slack.
 */
export const lateBoundMs = timing.shardLeaseTtlMs + timing.shardLeaseRenewIntervalMs + timing.loadRefreshIntervalMs +
  faultWindowMaxMs + skewMaxMs + 3_000;

/**
 * The shards the simulation uses: every job id is drawn until it lands on one, and every node
 * wants all of them, as on the embedded store (allShardsPlanner). Renewing, listing and
 * acquiring 1,024 shards every cycle of every node was most of a seed's time; a handful keeps
 * the contention and the fencing the same.
 */
const simShards = [3, 141, 592, 653, 589, 793];
const simShardSet = new Set(simShards);
const simPlanner: ShardPlanner = {
  wantedShards: () => simShards,
  surplusShards: () => [],
  isSatisfied: (heldCount) => heldCount === simShards.length,
};

const crons = ['*/2 * * * * *', '*/5 * * * * *', '*/7 * * * * *', '0,30 * * * * *', '*/15 * * * * *', '3-59/10 * * * * *'];
const overlaps = ['allow', 'forbid', 'replace', 'buffer_one'] as const;
const catchUps = ['latest', 'all', 'none'] as const;

interface SimNode extends NodeControl {
  id: string;
  clock: NodeClock;
  scheduler: Scheduler;
  generation: number;
  thawWaiters: (() => void)[];
  /** A zombie that thaws right after another node is granted one of the shards it held. */
  thawOnTakeover: boolean;
}

interface SimWorker {
  name: string;
  held: LeasedRun[];
}

class Simulation {
  readonly history: string[] = [];
  private readonly clock = new VirtualClock(startMs);
  private readonly random: Prng;
  private readonly faultRandom: Prng;
  private readonly recorder: Recorder;
  private readonly nodes: SimNode[] = [];
  private readonly workers: SimWorker[] = [];
  /** Runs held by workers that vanished; they may come back and complete them. */
  private readonly ghosts: LeasedRun[] = [];
  private readonly jobs: SimJob[] = [];
  private readonly byId = new Map<string, SimJob>();
  private store!: SqliteStore;
  private shared!: Store;
  private apiStore!: Store;
  private jobService!: JobService;
  private runService!: RunService;
  private leaseWaiters!: LeaseWaiters;
  private nodeCounter = 0;
  /** The API node's store faults: job and worker calls fail as its windows say (it never freezes or crashes). */
  private readonly api: NodeControl;
  /** The id the last create was given, to find its job when the create's answer was lost. */
  private lastJobId = '';
  private step = 0;
  private readonly dispatchAheadMinTimers: number;

  constructor(private readonly options: SimOptions) {
    const root = new Prng(options.seed);
    this.random = root.fork('steps');
    this.faultRandom = root.fork('faults');
    this.recorder = new Recorder(() => `step ${this.step} t=${this.clock.nowMs() - startMs}`);
    this.recorder.onGrant = (leases) => this.thawAfterTakeover(leases);
    this.api = {
      name: 'api', dead: false, frozen: false, freezeAtNextDispatch: false, onFrozenAtDispatch: () => undefined,
      thawed: () => Promise.resolve(), errorUntilMs: 0, errorChance: 0, slowUntilMs: 0, slowChance: 0, slowMsMax: 1,
      random: this.faultRandom.fork('api'), note: () => undefined, nowMs: () => this.clock.nowMs(),
      // The driver awaits API calls without moving time: a slow answer there would never come.
      sleep: () => Promise.resolve(), subscriptions: [],
    };
    // Half the seeds write one-shot runs ahead of their time, whatever their number.
    this.dispatchAheadMinTimers = this.random.chance(0.5) ? 1 : timing.dispatchAheadMinTimers;
  }

  private log(text: string): void {
    this.history.push(`${this.step} t=${this.clock.nowMs() - startMs} ${text}`);
  }

  async run(dir: string | null): Promise<SimResult> {
    const idRandom = new Prng(this.options.seed).fork('ids');
    const jitterRandom = new Prng(this.options.seed).fork('jitter');
    this.store = await openSqliteStore({
      path: dir === null ? ':memory:' : join(dir, 'tickler.db'), synchronous: 'NORMAL', random: () => jitterRandom.next(),
      checkpointIntervalMs: Number.POSITIVE_INFINITY, logger: silentLogger(),
    });
    try {
      this.shared = recordingStore(brokenStore(this.store, this.options.bug ?? 'none'), this.recorder);
      this.apiStore = nodeStore(this.shared, this.api);
      const metrics = new Metrics();
      this.jobService = new JobService({
        store: this.apiStore, clock: this.clock, metrics, cronToleranceDefaultS: 0, payloadBytesMax: 65_536,
        newJobId: (nowMs) => {
          for (;;) {
            const jobId = `j_${Math.floor(nowMs).toString(16).padStart(12, '0')}${hex32(idRandom)}${hex32(idRandom)}`;
            if (!simShardSet.has(shardOf(jobId))) continue;
            this.lastJobId = jobId;
            return jobId;
          }
        },
      });
      this.runService = new RunService({ store: this.apiStore, clock: this.clock, metrics, resultBytesMax: 65_536, logger: silentLogger() });
      this.leaseWaiters = new LeaseWaiters(this.apiStore, this.clock, silentLogger());
      const nodeCount = this.random.integer(2, 4);
      for (let index = 0; index < nodeCount; index++) this.startNode(`node-${String.fromCharCode(97 + index)}`);
      const workerCount = this.random.integer(2, 5);
      for (let index = 0; index < workerCount; index++) this.workers.push({ name: `w${index + 1}`, held: [] });
      this.log(`start nodes=${nodeCount} workers=${workerCount} aheadMin=${this.dispatchAheadMinTimers} bug=${this.options.bug ?? 'none'}`);
      await this.advance(500);
      for (this.step = 1; this.step <= this.options.steps; this.step++) {
        await this.oneStep();
        await this.advance(this.random.integer(0, 1_500));
        await this.check(false);
        if (this.recorder.violations.length > 0) break;
      }
      if (this.recorder.violations.length === 0) await this.liveness();
      const counts = this.recorder.counts;
      this.log(`end jobs=${this.jobs.length} dispatched=${counts.dispatched} staleDispatches=${counts.staleDispatches} ` +
        `leases=${counts.leases} completions=${counts.completions} staleCompletions=${counts.staleCompletions} ` +
        `violations=${this.recorder.violations.length}`);
      return { seed: this.options.seed, history: this.history, violations: this.recorder.violations };
    } finally {
      for (const node of this.nodes) this.crash(node, false);
      this.leaseWaiters?.close();
      await this.store.close();
    }
  }

  // Nodes ----------------------------------------------------------------------------------

  private startNode(id: string): SimNode {
    const generation = ++this.nodeCounter;
    const clock = new NodeClock(this.clock, (error) => this.recorder.violation(`node ${id}: a timer callback threw: ${describe(error)}`));
    const node: SimNode = {
      id, name: id, clock, generation, dead: false, frozen: false, freezeAtNextDispatch: false,
      errorUntilMs: 0, errorChance: 0, slowUntilMs: 0, slowChance: 0, slowMsMax: 1,
      random: this.faultRandom.fork(`${id}-${generation}`), subscriptions: [], thawWaiters: [], thawOnTakeover: false,
      scheduler: undefined as unknown as Scheduler,
      onFrozenAtDispatch: () => {
        const forMs = this.faultRandom.integer(timing.shardLeaseTtlMs * 1.5, timing.shardLeaseTtlMs * 3);
        // Half the zombies wake the moment another node has taken one of their shards: their
        // dispatch then races the new owner's first one, the case the fence is for.
        node.thawOnTakeover = this.faultRandom.chance(0.5);
        this.log(`${id} frozen at a dispatch for ${node.thawOnTakeover ? 'until a takeover' : `${forMs} ms`} (zombie)`);
        this.freeze(node, forMs);
      },
      thawed: () => new Promise<void>((resolve) => node.thawWaiters.push(resolve)),
      note: (call, args, result) => this.noteNodeCall(id, call, args, result),
      nowMs: () => this.clock.nowMs(),
      sleep: (ms) => new Promise<void>((resolve) => this.clock.setTimer(this.clock.nowMs() + ms, resolve)),
    };
    node.scheduler = new Scheduler({
      store: nodeStore(this.shared, node), clock, nodeId: id, timing: { ...timing, dispatchAheadMinTimers: this.dispatchAheadMinTimers },
      metrics: new Metrics(), logger: silentLogger(), fullReloadEveryRefreshes: 10, planner: simPlanner,
    });
    node.scheduler.start().catch((error: unknown) => this.recorder.violation(`node ${id} failed to start: ${describe(error)}`));
    this.nodes.push(node);
    return node;
  }

  private freeze(node: SimNode, forMs: number): void {
    node.frozen = true;
    node.clock.freeze();
    this.clock.setTimer(this.clock.nowMs() + forMs, () => this.thaw(node));
  }

  private thawAfterTakeover(leases: readonly ShardLease[]): void {
    for (const node of this.nodes) {
      if (!node.frozen || !node.thawOnTakeover) continue;
      const owned = new Set(node.scheduler.leases.ownedShards());
      if (!leases.some((lease) => lease.nodeId !== node.id && owned.has(lease.shard))) continue;
      node.thawOnTakeover = false;
      this.log(`${node.id} sees ${leases[0]!.nodeId} take its shards`);
      this.thaw(node);
    }
  }

  private thaw(node: SimNode): void {
    if (!node.frozen) return;
    node.frozen = false;
    node.clock.thaw();
    for (const resolve of node.thawWaiters.splice(0)) resolve();
    if (!node.dead) this.log(`${node.id} thawed`);
  }

  private crash(node: SimNode, log = true): void {
    if (node.dead) return;
    node.dead = true;
    node.clock.kill();
    for (const unsubscribe of node.subscriptions.splice(0)) unsubscribe();
    this.thaw(node);
    const index = this.nodes.indexOf(node);
    if (index >= 0) this.nodes.splice(index, 1);
    if (log) this.log(`${node.id} crashed`);
  }

  private noteNodeCall(id: string, call: string, args: readonly unknown[], result: unknown): void {
    if (firingCalls.has(call)) {
      const items = args[0] as readonly FencedTimer[];
      const results = result as readonly { kind: string; runs?: FiredRun[] }[];
      const stage = call === 'dispatch' ? 'whole' : call === 'writeRunsAhead' ? 'ahead' : 'finish';
      const text = items.map((item, index) => {
        const answer = results[index]!;
        const runs = (answer.runs ?? []).map((run) => `@${run.runId.slice(0, 6)}=${run.status}`).join('');
        return `${this.nameOf(item.jobId)}/${stage}/${item.shardToken}:${answer.kind}${runs}`;
      });
      this.log(`${id} dispatch ${text.join(' ')}`);
    } else if (call === 'acquireShardLeases') {
      const granted = result as readonly ShardLease[];
      if (granted.length > 0) this.log(`${id} granted ${granted.map((lease) => `${lease.shard}:${lease.token}`).join(' ')}`);
    } else if (call === 'renewShardLeases') {
      const held = args[1] as readonly ShardLease[];
      const renewed = result as readonly ShardLease[];
      if (renewed.length < held.length) this.log(`${id} renewed ${renewed.length} of ${held.length} shard leases`);
    } else if (call === 'expireRunLeases') {
      const expired = result as readonly ExpiredLease[];
      if (expired.length > 0) this.log(`${id} expired ${expired.map((run) => `${run.runId.slice(0, 6)}->${run.toStatus}`).join(' ')}`);
    }
  }

  private liveNodes(): SimNode[] {
    return this.nodes.filter((node) => !node.dead);
  }

  /** Nodes down (frozen) or about to be (a zombie armed): at most one at a time. */
  private someNodeDown(): boolean {
    return this.nodes.some((node) => node.frozen || node.freezeAtNextDispatch) || this.pendingRestarts > 0;
  }

  private pendingRestarts = 0;

  // Steps ----------------------------------------------------------------------------------

  private async oneStep(): Promise<void> {
    const action = this.random.weighted<string>([
      ['create', 14], ['patch', 3], ['cancel', 3], ['pause', 3], ['resume', 3], ['trigger', 2],
      ['lease', 16], ['heartbeat', 5], ['complete', 16], ['vanish', 1], ['ghost', 2],
      ['crash', 1], ['zombie', 1], ['freeze', 1], ['skew', 1.5], ['errors', 1.5], ['slow', 1.5], ['api-errors', 1], ['wait', 8],
    ]);
    switch (action) {
      case 'create': return this.create();
      case 'patch': return this.patch();
      case 'cancel': return this.jobCall('cancel', (job) => this.jobService.cancel('t1', job.jobId));
      case 'pause': return this.jobCall('pause', (job) => this.jobService.pause('t1', job.jobId), true);
      case 'resume': return this.jobCall('resume', (job) => this.jobService.resume('t1', job.jobId), true);
      case 'trigger': return this.jobCall('trigger', async (job) => {
        await this.jobService.trigger('t1', job.jobId);
        return null;
      });
      case 'lease': return this.lease(this.random.pick(this.workers));
      case 'heartbeat': return this.heartbeat(this.random.pick(this.workers));
      case 'complete': return this.complete(this.random.pick(this.workers));
      case 'vanish': return this.vanish(this.random.pick(this.workers));
      case 'ghost': return this.ghost();
      case 'crash': return this.crashStep();
      case 'zombie': return this.zombieStep(true);
      case 'freeze': return this.zombieStep(false);
      case 'skew': return this.skewStep();
      case 'errors': return this.faultWindow('errors');
      case 'slow': return this.faultWindow('slow');
      case 'api-errors': return this.faultWindow('api-errors');
      default: return this.log('wait');
    }
  }

  private async create(): Promise<void> {
    const recurring = this.random.chance(0.5);
    const nowMs = this.clock.nowMs();
    const body: JobCreateBody = {
      pool: 'default',
      schedule: recurring
        ? { cron: this.random.pick(crons), tz: 'UTC' }
        : { at: new Date(nowMs + this.random.integer(-5_000, 40_000)).toISOString() },
      tolerance_s: this.random.pick([0, 0, 1, 3]),
      overlap: this.random.pick(overlaps),
      catch_up: this.random.pick(catchUps),
      retry: { max_attempts: this.random.integer(1, 4), base_s: 1, max_s: 4 },
      lease_s: this.random.integer(5, 15),
      payload: { n: this.jobs.length + 1 },
    };
    let created: JobRecord | null;
    let answer = 'ok';
    this.lastJobId = '';
    try {
      const [result] = await this.jobService.create('t1', [{ body, rawText: '' }]);
      if (result === undefined || result.kind === 'error') {
        this.log(`create ${JSON.stringify(body.schedule)} -> ${result?.kind === 'error' ? result.error.code : 'nothing'}`);
        return;
      }
      created = result.job;
    } catch (error) {
      // The answer was lost: the store says whether the job was created.
      answer = codeOf(error);
      created = await this.store.getJob(null, this.lastJobId);
    }
    if (created === null) return this.log(`create ${JSON.stringify(body.schedule)} -> ${answer}, not created`);
    const job: SimJob = {
      name: `J${this.jobs.length + 1}`, jobId: created.jobId, recurring, state: created.state === 'done' ? 'done' : 'active',
      intervals: [], quiet: [],
    };
    openInterval(job, nowMs, created.spec);
    this.jobs.push(job);
    this.byId.set(job.jobId, job);
    this.log(`create ${job.name} ${job.jobId} ${JSON.stringify(body.schedule)} overlap=${body.overlap} catch_up=${body.catch_up} ` +
      `tol=${body.tolerance_s} -> ${answer} ${created.state} shard=${created.shard}`);
  }

  private pickJob(recurringOnly = false): SimJob | null {
    const candidates = this.jobs.filter((job) => job.state !== 'cancelled' && (!recurringOnly || job.recurring));
    return candidates.length === 0 ? null : this.random.pick(candidates);
  }

  private async patch(): Promise<void> {
    const job = this.pickJob();
    if (job === null) return this.log('patch: no job');
    const patch: JobPatchBody = this.random.chance(0.5)
      ? { payload: { patched: this.step } }
      : job.recurring
        ? { schedule: { cron: this.random.pick(crons), tz: 'UTC' } }
        : { schedule: { at: new Date(this.clock.nowMs() + this.random.integer(-3_000, 30_000)).toISOString() } };
    const nowMs = this.clock.nowMs();
    const before = await this.store.getJob(null, job.jobId);
    let record: JobRecord | null;
    let answer = 'ok';
    try {
      record = await this.jobService.patch('t1', job.jobId, patch);
    } catch (error) {
      answer = codeOf(error);
      // Refused, or its answer lost: the store says whether the spec changed.
      const after = await this.store.getJob(null, job.jobId);
      record = after !== null && before !== null && JSON.stringify(after.spec) !== JSON.stringify(before.spec) ? after : null;
    }
    // A paused job owes nothing until its resume, which opens an interval with the spec as patched.
    if (record !== null && job.state === 'active') {
      closeInterval(job, nowMs);
      openInterval(job, nowMs, record.spec);
    }
    this.log(`patch ${job.name} ${JSON.stringify(patch)} -> ${answer}${answer !== 'ok' && record !== null ? ' (applied)' : ''}`);
  }

  private async jobCall(name: 'cancel' | 'pause' | 'resume' | 'trigger', call: (job: SimJob) => Promise<JobRecord | null>,
    recurringOnly = false): Promise<void> {
    const job = this.pickJob(recurringOnly);
    if (job === null) return this.log(`${name}: no job`);
    const nowMs = this.clock.nowMs();
    const before = await this.store.getJob(null, job.jobId);
    const startSeq = ++this.recorder.seq;
    let record: JobRecord | null = null;
    let answer = 'ok';
    try {
      record = await call(job);
    } catch (error) {
      answer = codeOf(error);
      // Refused, or its answer lost: the store says whether it happened.
      const after = await this.store.getJob(null, job.jobId);
      const wanted = { cancel: 'cancelled', pause: 'paused', resume: 'active', trigger: null }[name];
      if (after !== null && before !== null && wanted !== null && after.state === wanted && before.state !== wanted) record = after;
      else return this.log(`${name} ${job.name} -> ${answer}`);
    }
    const endSeq = ++this.recorder.seq;
    if (name === 'cancel') {
      closeInterval(job, nowMs);
      job.state = 'cancelled';
      job.quiet.push({ kind: 'cancelled', afterSeq: endSeq, untilSeq: Infinity });
    } else if (name === 'pause') {
      closeInterval(job, nowMs);
      job.state = 'paused';
      job.quiet.push({ kind: 'paused', afterSeq: endSeq, untilSeq: Infinity });
    } else if (name === 'resume' && record !== null) {
      openInterval(job, nowMs, record.spec);
      job.state = 'active';
      const quiet = job.quiet.at(-1);
      if (quiet?.kind === 'paused') quiet.untilSeq = startSeq;
    }
    this.log(`${name} ${job.name} -> ${answer}${answer === 'ok' ? '' : ' (applied)'}`);
  }

  private async lease(worker: SimWorker): Promise<void> {
    const aheadMs = this.random.chance(0.2) ? this.random.integer(1, 5_000) : 0;
    let runs: LeasedRun[];
    try {
      runs = await this.leaseWaiters.lease({
        scope: 't1', pool: 'default', max: this.random.integer(1, 4), leaseMs: null, workerId: worker.name, aheadMs, waitMs: 0,
      });
    } catch (error) {
      // A lease whose answer was lost: its runs come back when their leases expire.
      return this.log(`${worker.name} lease ahead=${aheadMs} -> ${codeOf(error)}`);
    }
    worker.held.push(...runs);
    this.noteDeadlines(runs);
    this.log(`${worker.name} lease ahead=${aheadMs} -> ${runs.map((run) => `${this.nameOf(run.jobId)}@${run.scheduledAtMs - startMs}#${run.attempt}`).join(',') || 'none'}`);
  }

  private noteDeadlines(runs: readonly LeasedRun[]): void {
    if (runs.length === 0) return;
    const atMs = Math.min(...runs.map((run) => run.leaseExpiresAtMs));
    // Each node's sweeper hears of the deadline, as a `tickler serve` process's own does (observe-run-deadlines.ts).
    for (const node of this.liveNodes()) node.scheduler.noteRunDeadline(atMs);
  }

  private async heartbeat(worker: SimWorker): Promise<void> {
    if (worker.held.length === 0) return this.log(`${worker.name} heartbeat: nothing held`);
    const run = this.random.pick(worker.held);
    try {
      const untilMs = await this.runService.heartbeat('t1', run.runId, run.fencingToken);
      run.leaseExpiresAtMs = untilMs;
      this.noteDeadlines([run]);
      this.log(`${worker.name} heartbeat ${this.nameOf(run.jobId)}@${run.scheduledAtMs - startMs} -> ok`);
    } catch (error) {
      worker.held.splice(worker.held.indexOf(run), 1);
      this.log(`${worker.name} heartbeat ${this.nameOf(run.jobId)}@${run.scheduledAtMs - startMs} -> ${codeOf(error)}`);
    }
  }

  private async complete(worker: SimWorker, status?: CompletionStatus): Promise<void> {
    const startable = worker.held.filter((run) => run.readyAtMs <= this.clock.nowMs());
    if (startable.length === 0) return this.log(`${worker.name} complete: nothing startable`);
    const run = this.random.pick(startable);
    worker.held.splice(worker.held.indexOf(run), 1);
    await this.completeRun(worker.name, run, status ?? this.random.weighted<CompletionStatus>([
      ['succeeded', 8], ['failed', 1.5], ['failed_permanent', 0.5],
    ]));
  }

  private async completeRun(who: string, run: LeasedRun, status: CompletionStatus): Promise<void> {
    try {
      const record = await this.runService.complete('t1', run.runId, {
        fencingToken: run.fencingToken, status, error: status === 'succeeded' ? null : 'simulated failure', result: null,
      });
      this.log(`${who} complete ${this.nameOf(run.jobId)}@${run.scheduledAtMs - startMs} ${status} -> ${record.status}`);
    } catch (error) {
      this.log(`${who} complete ${this.nameOf(run.jobId)}@${run.scheduledAtMs - startMs} ${status} -> ${codeOf(error)}`);
    }
  }

  private vanish(worker: SimWorker): void {
    this.ghosts.push(...worker.held.splice(0));
    this.log(`${worker.name} vanished (its runs' leases will expire)`);
  }

  private async ghost(): Promise<void> {
    if (this.ghosts.length === 0) return this.log('ghost: none');
    const run = this.ghosts.splice(this.random.integer(0, this.ghosts.length - 1), 1)[0]!;
    await this.completeRun('ghost', run, 'succeeded');
  }

  private crashStep(): void {
    const live = this.liveNodes();
    if (this.someNodeDown() || live.length < 2) return this.log('crash: refused (a node is down already)');
    const node = this.random.pick(live);
    this.crash(node);
    const afterMs = this.faultRandom.integer(1_000, 20_000);
    const sameId = this.faultRandom.chance(0.5);
    this.pendingRestarts++;
    this.clock.setTimer(this.clock.nowMs() + afterMs, () => {
      this.pendingRestarts--;
      const id = sameId ? node.id : `${node.id}${node.generation}`;
      this.startNode(id);
      this.log(`${id} restarted`);
    });
  }

  private zombieStep(atDispatch: boolean): void {
    const live = this.liveNodes();
    if (this.someNodeDown() || live.length < 2) return this.log('zombie: refused (a node is down already)');
    // The node owning shards is the interesting one: it is the one that dispatches.
    const owners = live.filter((node) => node.scheduler.status().shardsOwned > 0);
    const node = this.random.pick(owners.length > 0 ? owners : live);
    if (atDispatch) {
      node.freezeAtNextDispatch = true;
      this.log(`${node.id} will freeze at its next dispatch`);
    } else {
      const forMs = this.faultRandom.integer(timing.shardLeaseTtlMs * 1.5, timing.shardLeaseTtlMs * 3);
      this.freeze(node, forMs);
      this.log(`${node.id} frozen for ${forMs} ms`);
    }
  }

  private skewStep(): void {
    const node = this.random.pick(this.liveNodes());
    const stepMs = this.faultRandom.integer(-skewMaxMs, skewMaxMs);
    node.clock.offsetMs = Math.max(-skewMaxMs, Math.min(skewMaxMs, node.clock.offsetMs + stepMs));
    this.log(`${node.id} clock stepped ${stepMs} ms (offset ${node.clock.offsetMs})`);
  }

  private faultWindow(kind: 'errors' | 'slow' | 'api-errors'): void {
    const node: NodeControl = kind === 'api-errors' ? this.api : this.random.pick(this.liveNodes());
    const untilMs = this.clock.nowMs() + this.faultRandom.integer(500, faultWindowMaxMs);
    if (kind !== 'slow') {
      node.errorUntilMs = untilMs;
      node.errorChance = this.faultRandom.between(0.1, 0.6);
    } else {
      node.slowUntilMs = untilMs;
      node.slowChance = this.faultRandom.between(0.2, 0.8);
      node.slowMsMax = this.faultRandom.integer(10, 1_500);
    }
    this.log(`${node.name} ${kind} until t=${untilMs - startMs}`);
  }

  // Time and checks ------------------------------------------------------------------------

  private async advance(ms: number): Promise<void> {
    await this.clock.advance(ms);
    // Work started by the last timers finishes before anything is checked.
    for (let round = 0; round < 8; round++) await new Promise<void>((resolve) => setImmediate(resolve));
  }

  private nameOf(jobId: string): string {
    return this.byId.get(jobId)?.name ?? jobId;
  }

  private async check(final: boolean): Promise<void> {
    const nowMs = this.clock.nowMs();
    // Every active recurring job has its next timer.
    const withoutTimer = await this.store.findJobsWithoutTimer(10);
    for (const job of withoutTimer) {
      this.recorder.violation(`active recurring job ${this.nameOf(job.jobId)} (${job.jobId}) has no pending timer`);
    }
    // A paused or cancelled job fires nothing.
    for (const firing of this.recorder.firings.splice(0)) {
      const job = this.byId.get(firing.jobId);
      const quiet = job?.quiet.find((window) => window.afterSeq < firing.startSeq && firing.endSeq < window.untilSeq);
      if (quiet !== undefined) {
        this.recorder.violation(`job ${job!.name} fired run ${firing.runId} while ${quiet.kind}`);
      }
    }
    // Every due occurrence recorded: fired within its bound, or skipped with a reason.
    for (const job of this.jobs) {
      for (const interval of job.intervals) {
        for (const scheduledAtMs of newlyOwedOccurrences(interval, lateBoundMs, nowMs)) {
          const run = await this.store.getRun(null, runIdOf(job.jobId, scheduledAtMs));
          const at = new Date(scheduledAtMs).toISOString();
          if (run === null) {
            this.recorder.violation(`job ${job.name} (${job.jobId}) has no run for its occurrence ${at}, due by ${lateBoundMs} ms ago`);
          } else if (run.status.startsWith('skipped') && run.lastError === null) {
            this.recorder.violation(`run ${run.runId} of job ${job.name} is ${run.status} with no reason`);
          } else if (!run.status.startsWith('skipped') && run.status !== 'cancelled' &&
            (run.dispatchedAtMs === null || run.dispatchedAtMs > run.fireAtMs + lateBoundMs)) {
            this.recorder.violation(`run ${run.runId} of job ${job.name} (${at}) dispatched at ${run.dispatchedAtMs}, ` +
              `over ${lateBoundMs} ms after its fire time ${run.fireAtMs}`);
          }
        }
      }
    }
    if (final) {
      // At most one run per (job, scheduled_at), across dispatches, creates and triggers.
      const seen = new Set<string>();
      for (let cursor: string | undefined, first = true; first || cursor !== undefined; first = false) {
        const page = await this.store.listRuns({ team: null, limit: 1_000, ...(cursor === undefined ? {} : { cursor }) });
        for (const run of page.items) {
          const key = `${run.jobId} ${run.scheduledAtMs}`;
          if (seen.has(key)) this.recorder.violation(`job ${this.nameOf(run.jobId)} has two runs scheduled at ${run.scheduledAtMs - startMs}`);
          seen.add(key);
        }
        cursor = page.nextCursor ?? undefined;
      }
      // Everything due is done: no run ready, running or waiting to retry since before the bound.
      for (const status of ['ready', 'running', 'retry_wait'] as const) {
        const page = await this.store.listRuns({ team: null, status, limit: 1_000 });
        for (const run of page.items) {
          const sinceMs = Math.max(run.readyAtMs ?? run.fireAtMs, run.fireAtMs);
          if (sinceMs <= nowMs - lateBoundMs) {
            this.recorder.violation(`run ${run.runId} of job ${this.nameOf(run.jobId)} is still ${status} since ${sinceMs - startMs}`);
          }
        }
      }
    }
  }

  /** Heal every fault, advance, let workers drain; then everything due must be done. */
  private async liveness(): Promise<void> {
    this.step = this.options.steps + 1;
    for (const node of this.nodes) {
      node.errorUntilMs = 0;
      node.slowUntilMs = 0;
      node.freezeAtNextDispatch = false;
      node.clock.offsetMs = 0;
      this.thaw(node);
    }
    this.api.errorUntilMs = 0;
    this.log('heal');
    // Restarts still pending come due in its first 20 s; what was owed before then is owed by its end.
    const drainMs = lateBoundMs + 20_000;
    for (let elapsed = 0; elapsed < drainMs; elapsed += 1_000) {
      await this.drainRound();
      await this.advance(1_000);
      for (const node of this.nodes) {
        node.clock.offsetMs = 0;
        this.thaw(node);
      }
    }
    await this.drainRound();
    this.log('drained');
    await this.check(true);
  }

  /**
   * Workers complete what they hold and lease more, again and again in this instant, until a
   * lease finds nothing: a queue a job's overlap policy keeps one run at a time (a `forbid`
   * backlog) drains at the speed of its workers, not one run per tick.
   */
  private async drainRound(): Promise<void> {
    for (let round = 0; round < 500; round++) {
      let leased = 0;
      for (const worker of this.workers) {
        for (const run of worker.held.splice(0)) {
          if (run.readyAtMs <= this.clock.nowMs()) await this.completeRun(worker.name, run, 'succeeded');
          else worker.held.push(run);
        }
        const runs = await this.leaseWaiters.lease({
          scope: 't1', pool: 'default', max: 10, leaseMs: null, workerId: worker.name, aheadMs: 0, waitMs: 0,
        }).catch(() => []);
        worker.held.push(...runs);
        this.noteDeadlines(runs);
        leased += runs.length;
      }
      if (leased === 0) return;
    }
  }
}

function hex32(random: Prng): string {
  return random.nextUint32().toString(16).padStart(8, '0');
}

function codeOf(error: unknown): string {
  if (error instanceof TicklerError) return error.code;
  return `threw ${describe(error)}`;
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** Runs one seed on an in-memory database, or a temporary file of its own (removed afterwards). */
export async function runSeed(options: SimOptions): Promise<SimResult> {
  const dir = options.file === true ? mkdtempSync(join(tmpdir(), 'tickler-sim-')) : null;
  const simulation = new Simulation(options);
  const onRejection = (reason: unknown): void => {
    simulation.history.push(`unhandled rejection: ${describe(reason)}`);
  };
  process.on('unhandledRejection', onRejection);
  try {
    const result = await simulation.run(dir);
    const unhandled = result.history.filter((line) => line.startsWith('unhandled rejection'));
    return { ...result, violations: [...result.violations, ...unhandled] };
  } finally {
    process.off('unhandledRejection', onRejection);
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  }
}

/** The one-line command that replays a seed. */
export function replayCommand(options: SimOptions): string {
  const bug = options.bug !== undefined && options.bug !== 'none' ? ` --bug ${options.bug}` : '';
  return `npm run sim -- --seed ${options.seed} --steps ${options.steps}${bug}${options.file === true ? ' --file' : ''}`;
}
