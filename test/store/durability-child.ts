// The writer half of the durability test: creates, cancels and completes through the SQLite
// store without pause, printing "ACK <kind> <id>" only after each operation's promise
// resolved, until the parent kills it with SIGKILL. Run: tsx durability-child.ts <db path>.
import { runIdOf } from '../../src/domain/identity.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { dispatchItem, jobRecord, jobSpec, minuteMs, t0Ms, timerAt } from './conformance-fixtures.js';

const path = process.argv[2];
if (path === undefined) throw new Error('usage: durability-child.ts <database path>');

function ack(kind: string, id: string): void {
  process.stdout.write(`ACK ${kind} ${id}\n`);
}

/** One round: a burst of single creates sharing a group commit, a cancel, and one run taken to success. */
async function round(store: Store, roundIndex: number): Promise<void> {
  const nowMs = t0Ms + roundIndex;
  const records = Array.from({ length: 20 }, () => jobRecord(jobSpec(), nowMs));
  await Promise.all(records.map(async (job) => {
    const [outcome] = await store.createJobs([{ job, timer: timerAt(nowMs + minuteMs) }], nowMs);
    if (outcome?.kind !== 'created') throw new Error(`create answered ${outcome?.kind}`);
    ack('create', job.jobId);
  }));
  const [toCancel, toRun] = records;
  await store.cancelJob(null, toCancel!.jobId, nowMs);
  ack('cancel', toCancel!.jobId);
  const [lease] = await store.acquireShardLeases('node-a', [toRun!.shard], 10_000, nowMs, { force: true });
  const timers = await store.loadTimers({ shards: [toRun!.shard], untilMs: Number.MAX_SAFE_INTEGER, limit: 1_000 });
  const timer = timers.find((candidate) => candidate.jobId === toRun!.jobId);
  if (lease === undefined || timer === undefined) throw new Error('no lease or no timer');
  await store.dispatch([dispatchItem(lease, timer)], nowMs);
  const [leased] = await store.leaseRuns({ team: null, pool: 'pool-a', max: 1, leaseMs: 60_000, workerId: 'w',
    nowMs });
  if (leased === undefined) throw new Error('nothing to lease');
  const completed = await store.completeRun({ team: null, runId: leased.runId, fencingToken: leased.fencingToken,
    status: 'succeeded', error: null, result: { roundIndex }, nowMs });
  if (completed.kind !== 'completed') throw new Error(`complete answered ${completed.kind}`);
  ack('complete', leased.runId);
  if (leased.runId !== runIdOf(toRun!.jobId, timer.scheduledAtMs)) throw new Error('leased an unexpected run');
}

const store = await openSqliteStore({ path });
for (let roundIndex = 0; ; roundIndex++) await round(store, roundIndex);
