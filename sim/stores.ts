/**
 * Store wrappers of the simulation (STYLE.md §2: fault injection wraps the Store interface):
 *
 * - `recordingStore` sits in front of the real store for every caller. It numbers each call's
 *   start and end on one sequence, so that "B started after A was answered" is exact, and
 *   checks as the answers come: no dispatch accepted under a shard token below one granted
 *   before it started, no heartbeat or completion accepted under a run token older than one
 *   leased before it started, tokens that only grow, no occurrence inserted twice.
 * - `nodeStore` is one scheduler node's view: its calls wait while the node is frozen, never
 *   return once it has crashed, and fail or take their time as its faults say.
 * - `brokenStore` is a deliberately broken store for the tests that prove the simulator can
 *   catch a bug: it lets stale shard tokens through, or drops recurring jobs' next timers.
 *   Only the simulator builds it; the real stores have no such switch.
 */
import { TicklerError } from '../src/errors.js';
import type { FencedTimer, FiredRun, FiringRefused, LeasedRun, ShardLease, Store } from '../src/store/store.js';
import type { Prng } from '../chaos/prng.js';

export type Bug = 'none' | 'fence' | 'next-timer';

/** A fired (not skipped) run, as a dispatch answered it. */
export interface Firing {
  jobId: string;
  runId: string;
  startSeq: number;
  endSeq: number;
}

export class Recorder {
  seq = 0;
  readonly violations: string[] = [];
  /** Per shard: every token granted, with the sequence number its grant was answered at. */
  private readonly shardGrants = new Map<number, { token: bigint; endSeq: number }[]>();
  private readonly runTokens = new Map<string, { token: bigint; endSeq: number }[]>();
  private readonly inserted = new Set<string>();
  readonly firings: Firing[] = [];
  /** Counters the history prints: what the faults made the system do. */
  readonly counts = { dispatched: 0, staleDispatches: 0, staleCompletions: 0, completions: 0, leases: 0 };

  /** Told of every shard lease granted (the simulation thaws a zombie right after a takeover). */
  onGrant: (leases: readonly ShardLease[]) => void = () => undefined;

  constructor(private readonly describeTime: () => string) {}

  violation(text: string): void {
    this.violations.push(`${this.describeTime()} ${text}`);
  }

  noteGrants(leases: readonly ShardLease[], endSeq: number): void {
    for (const lease of leases) {
      const token = BigInt(lease.token);
      const grants = this.shardGrants.get(lease.shard) ?? [];
      const last = grants.at(-1);
      if (last !== undefined && token <= last.token) {
        this.violation(`shard ${lease.shard} granted token ${token}, not above ${last.token} granted before`);
      }
      grants.push({ token, endSeq });
      this.shardGrants.set(lease.shard, grants);
    }
    if (leases.length > 0) this.onGrant(leases);
  }

  /** Any firing operation's answers: `dispatch`, `writeRunsAhead` or `finishAhead`. */
  checkDispatch(items: readonly FencedTimer[], results: readonly (FiringRefused | { kind: string; runs?: FiredRun[] })[],
    startSeq: number, endSeq: number): void {
    items.forEach((item, index) => {
      const result = results[index];
      if (result === undefined) return;
      if (result.kind === 'stale_token') this.counts.staleDispatches++;
      if (result.kind === 'stale_token' || result.kind === 'timer_gone') return;
      this.counts.dispatched++;
      const token = BigInt(item.shardToken);
      const newer = (this.shardGrants.get(item.shard) ?? []).find((grant) => grant.token > token && grant.endSeq < startSeq);
      if (newer !== undefined) {
        this.violation(`dispatch of timer ${item.timerId} (job ${item.jobId}) accepted under shard ${item.shard} token ${token}, ` +
          `though token ${newer.token} was granted before it started`);
      }
      for (const run of 'runs' in result ? result.runs ?? [] : []) {
        if (run.inserted) {
          if (this.inserted.has(run.runId)) this.violation(`run ${run.runId} of job ${item.jobId} inserted twice`);
          this.inserted.add(run.runId);
        }
        if (run.inserted && !run.status.startsWith('skipped')) {
          this.firings.push({ jobId: item.jobId, runId: run.runId, startSeq, endSeq });
        }
      }
    });
  }

  noteRunLeases(runs: readonly LeasedRun[], endSeq: number): void {
    for (const run of runs) {
      this.counts.leases++;
      const token = BigInt(run.fencingToken);
      const tokens = this.runTokens.get(run.runId) ?? [];
      const last = tokens.at(-1);
      if (last !== undefined && token <= last.token) {
        this.violation(`run ${run.runId} leased with token ${token}, not above ${last.token} leased before`);
      }
      tokens.push({ token, endSeq });
      this.runTokens.set(run.runId, tokens);
    }
  }

  checkRunWrite(call: string, runId: string, fencingToken: string, accepted: boolean, startSeq: number): void {
    if (!accepted) {
      this.counts.staleCompletions++;
      return;
    }
    if (call === 'complete') this.counts.completions++;
    let token: bigint;
    try {
      token = BigInt(fencingToken);
    } catch {
      this.violation(`${call} of run ${runId} accepted with the malformed token ${JSON.stringify(fencingToken)}`);
      return;
    }
    const newer = (this.runTokens.get(runId) ?? []).find((lease) => lease.token > token && lease.endSeq < startSeq);
    if (newer !== undefined) {
      this.violation(`${call} of run ${runId} accepted under token ${token}, though token ${newer.token} was leased before it started`);
    }
  }
}

export function recordingStore(inner: Store, recorder: Recorder): Store {
  const overrides: Partial<Store> = {
    acquireShardLeases: async (...args) => {
      const granted = await inner.acquireShardLeases(...args);
      recorder.noteGrants(granted, ++recorder.seq);
      return granted;
    },
    dispatch: checkedFiring(recorder, (items, nowMs) => inner.dispatch(items, nowMs)),
    writeRunsAhead: checkedFiring(recorder, (items, nowMs) => inner.writeRunsAhead(items, nowMs)),
    finishAhead: checkedFiring(recorder, (items, nowMs) => inner.finishAhead(items, nowMs)),
    leaseRuns: async (request) => {
      const runs = await inner.leaseRuns(request);
      recorder.noteRunLeases(runs, ++recorder.seq);
      return runs;
    },
    heartbeatRun: async (team, runId, token, nowMs) => {
      const startSeq = ++recorder.seq;
      const outcome = await inner.heartbeatRun(team, runId, token, nowMs);
      recorder.checkRunWrite('heartbeat', runId, token, outcome.kind === 'extended', startSeq);
      return outcome;
    },
    completeRun: async (request) => {
      const startSeq = ++recorder.seq;
      const outcome = await inner.completeRun(request);
      recorder.checkRunWrite('complete', request.runId, request.fencingToken,
        outcome.kind === 'completed' || outcome.kind === 'accepted', startSeq);
      return outcome;
    },
  };
  return withOverrides(inner, overrides);
}

/** A firing operation whose answers the recorder checks, numbered on its sequence. */
function checkedFiring<Item extends FencedTimer, Result extends FiringRefused | { kind: string; runs?: FiredRun[] }>(
  recorder: Recorder, fire: (items: readonly Item[], nowMs: number) => Promise<Result[]>,
): (items: readonly Item[], nowMs: number) => Promise<Result[]> {
  return async (items, nowMs) => {
    const startSeq = ++recorder.seq;
    const results = await fire(items, nowMs);
    recorder.checkDispatch(items, results, startSeq, ++recorder.seq);
    return results;
  };
}

/** What a node's faults are now; the simulation changes them between steps. */
export interface NodeControl {
  readonly name: string;
  dead: boolean;
  frozen: boolean;
  /** Freeze at the next firing call (any of `firingCalls`), between its lease check and the store: the zombie. */
  freezeAtNextDispatch: boolean;
  /** Called when the node freezes itself at a dispatch. */
  onFrozenAtDispatch(): void;
  /** Resolves when the node thaws. */
  thawed(): Promise<void>;
  errorUntilMs: number;
  errorChance: number;
  slowUntilMs: number;
  slowChance: number;
  slowMsMax: number;
  readonly random: Prng;
  nowMs(): number;
  sleep(ms: number): Promise<void>;
  /** Writes a line of the history: what the node's dispatches and lease grants were answered. */
  note(call: string, args: readonly unknown[], result: unknown): void;
  /** Listeners registered by the node; unsubscribed when it crashes. */
  readonly subscriptions: (() => void)[];
}

const never = new Promise<never>(() => undefined);

/** The store operations that fire timers, each fenced by a shard token. */
export const firingCalls: ReadonlySet<string> = new Set(['dispatch', 'writeRunsAhead', 'finishAhead']);

export function nodeStore(inner: Store, node: NodeControl): Store {
  async function call<T>(name: string, body: () => Promise<T>): Promise<T> {
    if (node.dead) return never;
    while (node.frozen) await node.thawed();
    if (firingCalls.has(name) && node.freezeAtNextDispatch) {
      node.freezeAtNextDispatch = false;
      node.onFrozenAtDispatch();
      while (node.frozen) await node.thawed();
    }
    if (node.dead) return never;
    const now = node.nowMs();
    if (now < node.slowUntilMs && node.random.chance(node.slowChance)) await node.sleep(node.random.integer(1, node.slowMsMax));
    let failAfter = false;
    if (now < node.errorUntilMs && node.random.chance(node.errorChance)) {
      // Half the time before the store (nothing written), half after (written, the answer lost).
      if (node.random.chance(0.5)) throw injected(name);
      failAfter = true;
    }
    const result = await body();
    if (now < node.slowUntilMs && node.random.chance(node.slowChance)) await node.sleep(node.random.integer(1, node.slowMsMax));
    if (node.dead) return never;
    while (node.frozen) await node.thawed();
    if (failAfter) throw injected(name);
    return result;
  }
  const subscribe = <L extends (...args: never[]) => void>(register: (listener: L) => () => void) =>
    (listener: L): (() => void) => {
      const wrapped = ((...args: Parameters<L>) => {
        if (node.dead) return;
        if (!node.frozen) listener(...args);
        else void node.thawed().then(() => { if (!node.dead) listener(...args); });
      }) as L;
      const unsubscribe = register(wrapped);
      node.subscriptions.push(unsubscribe);
      return unsubscribe;
    };
  return new Proxy(inner, {
    get(target, property) {
      if (property === 'onRunsReady') return subscribe(inner.onRunsReady.bind(inner));
      if (property === 'onNearTimers') return subscribe(inner.onNearTimers.bind(inner));
      if (property === 'onNearTimersMissed') return subscribe(inner.onNearTimersMissed.bind(inner));
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function' || property === 'setParkedWaiters') return value;
      const method = value as (...args: unknown[]) => Promise<unknown>;
      return (...args: unknown[]) => call(String(property), async () => {
        const result = await method.apply(target, args);
        node.note(String(property), args, result);
        return result;
      });
    },
  });
}

function injected(call: string): TicklerError {
  return new TicklerError('unavailable', `injected store error in ${call}`);
}

export function brokenStore(inner: Store, bug: Bug): Store {
  if (bug === 'none') return inner;
  const highest = new Map<number, string>();
  return withOverrides(inner, {
    acquireShardLeases: async (...args) => {
      const granted = await inner.acquireShardLeases(...args);
      for (const lease of granted) highest.set(lease.shard, lease.token);
      return granted;
    },
    dispatch: (items, nowMs) => inner.dispatch(items.map((item) => {
      // The broken fence: every token passes as the newest granted for its shard.
      if (bug === 'fence') return { ...item, shardToken: highest.get(item.shard) ?? item.shardToken };
      // The skipped next-timer write: a recurring job's chain ends at its first firing.
      return { ...item, nextTimer: null };
    }), nowMs),
    // A one-shot's runs written ahead and finished: only the fence is broken for them.
    writeRunsAhead: (items, nowMs) => inner.writeRunsAhead(bug === 'fence'
      ? items.map((item) => ({ ...item, shardToken: highest.get(item.shard) ?? item.shardToken })) : items, nowMs),
    finishAhead: (items, nowMs) => inner.finishAhead(bug === 'fence'
      ? items.map((item) => ({ ...item, shardToken: highest.get(item.shard) ?? item.shardToken })) : items, nowMs),
  });
}

function withOverrides(inner: Store, overrides: Partial<Store>): Store {
  return new Proxy(inner, {
    get(target, property) {
      const own = (overrides as Record<PropertyKey, unknown>)[property];
      if (own !== undefined) return own;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
