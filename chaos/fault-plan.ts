/**
 * The faults of a chaos run, drawn from its seed before the run starts (TESTING.md "Faults"):
 * kill -9 and restart of a scheduler (half the time the owner of a busy shard, resolved when
 * the fault fires), SIGSTOP of a scheduler for 1.5–5 × the shard lease TTL, kill -9 and SIGSTOP
 * (past its lease) of a worker, kill -9 and restart of an API node (its workers' requests
 * refused meanwhile, an answer it owed lost), and a PostgreSQL restart. Pure: the same seed
 * plans the same faults.
 *
 * Faults overlap, but never so much that the cluster cannot make progress: at most one
 * scheduler, one API node (and never the last) and half the workers are faulted at once, and
 * one database restart at a time.
 */
import type { FaultKind } from './history.js';
import type { Prng } from './prng.js';

export interface PlannedFault {
  faultId: string;
  kind: FaultKind;
  /** Offset from the start of the fault phase. */
  startOffsetMs: number;
  /** How long the process stays killed or stopped; 0 for a database restart. */
  durationMs: number;
  /** A process name, `busy-owner` (the scheduler owning the busiest shards), or `postgres`. */
  target: string;
  /**
   * scheduler_stop only: stop the node between its local lease check and its write at the
   * sink (its pause-before-dispatch hook), the zombie whose stale write the sink must reject.
   */
  midDispatch?: boolean;
}

export interface FaultPlanOptions {
  faultPhaseMs: number;
  schedulers: readonly string[];
  workers: readonly string[];
  /** API nodes; with fewer than two none is killed. */
  apis?: readonly string[];
  shardLeaseTtlMs: number;
  workerLeaseMs: number;
  /** Whether the database can be restarted (a private cluster); otherwise that fault is left out. */
  postgresRestart: boolean;
  gapMsMin?: number;
  gapMsMax?: number;
}

const faultWeights: readonly (readonly [FaultKind, number])[] = [
  ['scheduler_kill', 3],
  ['scheduler_stop', 3],
  ['worker_kill', 2],
  ['worker_stop', 2],
  ['postgres_restart', 1],
  ['api_kill', 1],
];

/**
 * How long a process needs after its fault ends before it counts as settled for the next fault:
 * a node under tsx takes a few seconds to start on a loaded two-core machine.
 */
const restartAllowanceMs = 5_000;

export function planFaults(prng: Prng, options: FaultPlanOptions): PlannedFault[] {
  const gapMsMin = options.gapMsMin ?? 2_000;
  const gapMsMax = options.gapMsMax ?? 5_000;
  const busyUntilMs = new Map<string, number>();
  const faults: PlannedFault[] = [];
  const weights = faultWeights.filter(([kind]) => (kind !== 'postgres_restart' || options.postgresRestart) &&
    (kind !== 'api_kill' || (options.apis?.length ?? 0) >= 2));
  // The first fault waits one lease TTL so every node has taken its shards.
  let offsetMs = options.shardLeaseTtlMs + prng.between(gapMsMin, gapMsMax);
  let stops = 0;
  while (offsetMs < options.faultPhaseMs) {
    // The first fault is always the zombie (a scheduler stopped mid-dispatch, below): a run
    // must show the sink rejecting stale writes (TESTING.md), however short it is.
    const kind = faults.length === 0 ? 'scheduler_stop' : prng.weighted(weights);
    const fault = planOne(prng, kind, offsetMs, options, busyUntilMs, faults.length + 1);
    if (fault !== null) {
      if (fault.kind === 'scheduler_stop') makeZombieOrNot(fault, stops++, options, busyUntilMs);
      faults.push(fault);
      const busyUntil = offsetMs + fault.durationMs + restartAllowanceMs;
      const busyKey = busyKeyOf(fault.kind, fault.target);
      busyUntilMs.set(busyKey, busyUntil);
      if (fault.target !== busyKey) busyUntilMs.set(fault.target, busyUntil);
      // The zombie's write must reach the sink: no database restart while it is stopped.
      if (fault.midDispatch === true) busyUntilMs.set('postgres', Math.max(busyUntilMs.get('postgres') ?? 0, busyUntil));
    }
    offsetMs += prng.between(gapMsMin, gapMsMax);
  }
  return faults;
}

/**
 * Scheduler stops alternate, the first one mid-dispatch (a zombie), unless a database restart
 * is under way: every run exercises the sink's token fence, and the plain SIGSTOP at a random
 * instant still gets its turn. A zombie stays stopped for at least 2.5 TTLs, so that another
 * node surely holds its shards (expiry, a renew cycle, the acquire) when its write lands.
 */
function makeZombieOrNot(fault: PlannedFault, stopsBefore: number, options: FaultPlanOptions,
  busyUntilMs: ReadonlyMap<string, number>): void {
  fault.midDispatch = stopsBefore % 2 === 0 && (busyUntilMs.get('postgres') ?? -Infinity) <= fault.startOffsetMs;
  if (fault.midDispatch) fault.durationMs = Math.max(fault.durationMs, Math.round(2.5 * options.shardLeaseTtlMs));
}

/** Schedulers share one slot (at most one faulted at a time), API nodes another; each worker and the database have their own. */
function busyKeyOf(kind: FaultKind, target: string): string {
  if (kind === 'scheduler_kill' || kind === 'scheduler_stop') return 'schedulers';
  return kind === 'api_kill' ? 'apis' : target;
}

function planOne(prng: Prng, kind: FaultKind, offsetMs: number, options: FaultPlanOptions,
  busyUntilMs: Map<string, number>, sequence: number): PlannedFault | null {
  const free = (key: string): boolean => (busyUntilMs.get(key) ?? -Infinity) <= offsetMs;
  const faultId = `f${sequence}`;
  const ttlMs = options.shardLeaseTtlMs;
  switch (kind) {
    case 'scheduler_kill':
    case 'scheduler_stop': {
      if (!free('schedulers') || options.schedulers.length < 2) return null;
      const target = prng.chance(0.5) ? 'busy-owner' : prng.pick(options.schedulers);
      const durationMs = kind === 'scheduler_kill' ? prng.between(0.25, 1.5) * ttlMs : prng.between(1.5, 5) * ttlMs;
      return { faultId, kind, startOffsetMs: offsetMs, durationMs: Math.round(durationMs), target };
    }
    case 'worker_kill':
    case 'worker_stop': {
      const faulted = options.workers.filter((worker) => !free(worker)).length;
      const candidates = options.workers.filter(free);
      if (candidates.length === 0 || (faulted + 1) * 2 > options.workers.length) return null;
      const target = prng.pick(candidates);
      // A stopped worker sleeps past its lease, so its late completion must be refused.
      const durationMs = kind === 'worker_kill' ? prng.between(500, 3_000) : prng.between(1.3, 2.5) * options.workerLeaseMs;
      return { faultId, kind, startOffsetMs: offsetMs, durationMs: Math.round(durationMs), target };
    }
    case 'postgres_restart':
      if (!free('postgres')) return null;
      return { faultId, kind, startOffsetMs: offsetMs, durationMs: 0, target: 'postgres' };
    case 'api_kill': {
      const apis = options.apis ?? [];
      if (!free('apis') || apis.length < 2) return null;
      return { faultId, kind, startOffsetMs: offsetMs, durationMs: Math.round(prng.between(500, 3_000)), target: prng.pick(apis) };
    }
  }
}
