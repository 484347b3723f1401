import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runIdOf, shardOf } from '../../src/domain/identity.js';
import { checkHistory, type CheckOptions, type CheckReport, type ViolationKind } from '../../chaos/history-checker.js';
import type {
  CompletionEvent,
  DispatchEvent,
  HistoryEvent,
  HistoryJobPolicies,
  LedgerRunRecord,
} from '../../chaos/history.js';
import { parseHistory } from '../../chaos/history.js';
import { formatReport } from '../../chaos/report.js';
import { expandSchedule } from '../../chaos/schedule-expander.js';

const t0 = Date.parse('2026-11-29T10:00:00.000Z');
const policies: HistoryJobPolicies = { overlap: 'forbid', catchUp: 'latest', dstGap: 'shift', toleranceMs: 0 };
const options: CheckOptions = {
  lagBoundMs: 500,
  faultLagBoundMs: 4_000,
  expectUntilMs: t0 + 60_000,
  drainEndMs: t0 + 70_000,
  expandSchedule,
};

function createOneShot(jobId: string, atMs: number, ackAtMs = t0 + 10): HistoryEvent[] {
  return [
    { type: 'create_sent', atMs: t0, createId: `c-${jobId}`, schedule: { atMs }, policies },
    { type: 'create_acked', atMs: ackAtMs, createId: `c-${jobId}`, jobId, createdAtMs: t0 + 5 },
  ];
}

function createCron(jobId: string, cron: string, jobPolicies: HistoryJobPolicies = policies): HistoryEvent[] {
  return [
    { type: 'create_sent', atMs: t0, createId: `c-${jobId}`, schedule: { cron, tz: 'UTC' }, policies: jobPolicies },
    { type: 'create_acked', atMs: t0 + 10, createId: `c-${jobId}`, jobId, createdAtMs: t0 + 5 },
  ];
}

interface AttemptShape {
  attempt?: number;
  token?: string;
  worker?: string;
  leaseMs?: number;
}

function dispatch(jobId: string, scheduledAtMs: number, seenAtMs: number, shape: AttemptShape = {}): DispatchEvent {
  return {
    type: 'dispatch', atMs: seenAtMs, worker: shape.worker ?? 'w1', runId: runIdOf(jobId, scheduledAtMs), jobId,
    createId: `c-${jobId}`, scheduledAtMs, fireAtMs: scheduledAtMs, attempt: shape.attempt ?? 1,
    fencingToken: shape.token ?? `${jobId}-${shape.attempt ?? 1}`, leaseExpiresAtMs: seenAtMs + (shape.leaseMs ?? 5_000),
  };
}

function completion(of: DispatchEvent, sentAtMs: number, outcome: CompletionEvent['outcome'] = 'accepted',
  status: CompletionEvent['status'] = 'succeeded'): CompletionEvent {
  return { type: 'completion', atMs: sentAtMs + 5, sentAtMs, worker: of.worker, runId: of.runId,
    fencingToken: of.fencingToken, status, outcome };
}

function ledgerRun(jobId: string, scheduledAtMs: number, status: string, dispatchedAtMs: number | null,
  attempts = 1): LedgerRunRecord {
  const events = Array.from({ length: attempts }, (_, index) => ({ atMs: scheduledAtMs + index, type: 'leased',
    toStatus: 'running', attempt: index + 1 }));
  return { type: 'ledger_run', atMs: t0 + 70_000, runId: runIdOf(jobId, scheduledAtMs), jobId, scheduledAtMs,
    fireAtMs: scheduledAtMs, dispatchedAtMs, attempt: attempts, status, events };
}

/** A one-shot that fired on time, was completed and shows in the ledger. */
function healthyOneShot(jobId: string, atMs: number, lagMs = 20): HistoryEvent[] {
  const seen = dispatch(jobId, atMs, atMs + lagMs);
  return [...createOneShot(jobId, atMs), seen, completion(seen, atMs + lagMs + 100),
    ledgerRun(jobId, atMs, 'succeeded', atMs + lagMs - 5)];
}

function kindsOf(report: CheckReport): ViolationKind[] {
  return [...new Set(report.violations.map((violation) => violation.kind))].sort();
}

void describe('history checker', () => {
  void it('finds the empty history valid', () => {
    const report = checkHistory([], options);
    assert.equal(report.valid, true);
    assert.deepEqual(report.violations, []);
    assert.equal(report.counts.expected, 0);
    assert.equal(report.lag.outsideFault.count, 0);
  });

  void it('finds a one-shot fired on time, completed and recorded valid', () => {
    const report = checkHistory(healthyOneShot('j1', t0 + 5_000), options);
    assert.deepEqual(report.violations, []);
    assert.equal(report.counts.expected, 1);
    assert.equal(report.counts.dispatched, 1);
    assert.equal(report.lag.outsideFault.maxMs, 15, 'lag counts from the ledger dispatch when it came first');
  });

  void it('calls an acknowledged create that never dispatched lost', () => {
    const report = checkHistory(createOneShot('j1', t0 + 5_000), options);
    assert.deepEqual(kindsOf(report), ['lost']);
  });

  void it('does not require an occurrence due after the expectation ends', () => {
    const report = checkHistory(createOneShot('j1', options.expectUntilMs + 1), options);
    assert.equal(report.valid, true);
  });

  void it('calls a dispatch of a job never created unexpected', () => {
    const stray = dispatch('ghost', t0 + 5_000, t0 + 5_010);
    const report = checkHistory([stray, ledgerRun('ghost', t0 + 5_000, 'succeeded', t0 + 5_005)], options);
    assert.deepEqual(kindsOf(report), ['unexpected']);
  });

  void it('calls a dispatch at a time the schedule does not generate unexpected', () => {
    const at = t0 + 5_000;
    const offSchedule = dispatch('j1', at + 1, at + 10);
    const report = checkHistory([...healthyOneShot('j1', at), offSchedule, ledgerRun('j1', at + 1, 'succeeded', at + 5)],
      options);
    assert.deepEqual(kindsOf(report), ['unexpected']);
  });

  void it('calls a dispatch before the fire time early', () => {
    const at = t0 + 5_000;
    const seen = dispatch('j1', at, at - 300);
    const report = checkHistory([...createOneShot('j1', at), seen, completion(seen, at),
      ledgerRun('j1', at, 'succeeded', at - 310)], options);
    assert.deepEqual(kindsOf(report), ['early']);
  });

  void it('counts a run written ahead as dispatched from its fire time, yet a lease of it before then as early', () => {
    const at = t0 + 5_000;
    const writtenAhead = (): LedgerRunRecord => {
      const run = ledgerRun('j1', at, 'succeeded', at - 2_000);
      return { ...run, events: [{ atMs: at - 2_000, type: 'dispatched', toStatus: 'ready', ahead: true }, ...run.events] };
    };
    const onTime = dispatch('j1', at, at + 20);
    const valid = checkHistory([...createOneShot('j1', at), onTime, completion(onTime, at + 100), writtenAhead()], options);
    assert.deepEqual(valid.violations, []);
    assert.equal(valid.lag.outsideFault.maxMs, 0, 'leasable from its fire time: lag 0, not negative');
    const withoutMark = { ...writtenAhead(), events: ledgerRun('j1', at, 'succeeded', at - 2_000).events };
    assert.deepEqual(kindsOf(checkHistory([...createOneShot('j1', at), onTime, completion(onTime, at + 100), withoutMark],
      options)), ['early'], 'a run made ready 2 s early without the mark is early');
    const leasedEarly = dispatch('j1', at, at - 300);
    assert.deepEqual(kindsOf(checkHistory([...createOneShot('j1', at), leasedEarly, completion(leasedEarly, at),
      writtenAhead()], options)), ['early']);
  });

  void it('judges a run leased ahead by its ready time and its handler\'s start: held till then valid, started before early', () => {
    const at = t0 + 5_000;
    const run = ledgerRun('j1', at, 'succeeded', at - 2_000);
    const writtenAhead: LedgerRunRecord = {
      ...run, events: [{ atMs: at - 2_000, type: 'dispatched', toStatus: 'ready', ahead: true }, ...run.events],
    };
    const leasedAhead: DispatchEvent = { ...dispatch('j1', at, at - 40), readyAtMs: at };
    const started = (atMs: number): HistoryEvent => ({ type: 'handler_start', atMs, worker: 'w1', runId: leasedAhead.runId, attempt: 1 });
    const held = checkHistory([...createOneShot('j1', at), leasedAhead, started(at + 1), completion(leasedAhead, at + 50),
      writtenAhead], { ...options, leaseAheadMs: 50 });
    assert.deepEqual(held.violations, []);
    assert.equal(held.lag.outsideFault.maxMs, 0);
    const startedEarly = checkHistory([...createOneShot('j1', at), leasedAhead, started(at - 30), completion(leasedAhead, at),
      writtenAhead], { ...options, leaseAheadMs: 50 });
    assert.deepEqual(kindsOf(startedEarly), ['early'], 'a handler that did not wait for the ready time');
    const unmarked = { ...leasedAhead, readyAtMs: undefined };
    delete unmarked.readyAtMs;
    assert.deepEqual(kindsOf(checkHistory([...createOneShot('j1', at), unmarked, completion(unmarked, at + 50), writtenAhead],
      { ...options, leaseAheadMs: 50 })), ['early'], 'a lease answered early without a ready time is early');
  });

  void it('with workers leasing ahead, a cancel acknowledged within that window of the fire raced it; one before decides it', () => {
    const at = t0 + 5_000;
    const cancelAckedAt = (ackedAtMs: number): HistoryEvent[] => [
      { type: 'control_sent', atMs: ackedAtMs - 10, kind: 'cancel', jobId: 'j1' },
      { type: 'control_answer', atMs: ackedAtMs, kind: 'cancel', jobId: 'j1', outcome: 'acked' },
    ];
    const leaseAhead = { ...options, leaseAheadMs: 50 };
    const raced = checkHistory([...healthyOneShot('j1', at), ...cancelAckedAt(at - 30)], leaseAhead);
    assert.deepEqual(raced.violations, []);
    assert.equal(raced.counts.maybe, 1);
    assert.deepEqual(kindsOf(checkHistory([...healthyOneShot('j1', at), ...cancelAckedAt(at - 30)], options)), ['unexpected'],
      'without leasing ahead the same cancel decides it');
    assert.deepEqual(kindsOf(checkHistory([...healthyOneShot('j1', at), ...cancelAckedAt(at - 60)], leaseAhead)), ['unexpected']);
  });

  void it('holds lag to the tight bound outside fault windows', () => {
    const report = checkHistory(healthyOneShot('j1', t0 + 5_000, 900), options);
    assert.deepEqual(kindsOf(report), ['late_outside_fault']);
    assert.equal(report.lag.outsideFault.count, 1);
  });

  void it('holds lag to the loose bound inside a fault window, and reports it per fault kind', () => {
    const at = t0 + 20_000;
    const fault: HistoryEvent[] = [
      { type: 'fault_start', atMs: at - 1_000, faultId: 'f1', kind: 'scheduler_kill', target: 'scheduler-1' },
      { type: 'fault_end', atMs: at + 500, faultId: 'f1' },
    ];
    const withinLooseBound = checkHistory([...fault, ...healthyOneShot('j1', at, 3_000)], options);
    assert.deepEqual(withinLooseBound.violations, []);
    assert.equal(withinLooseBound.lag.insideFault.maxMs, 2_995);
    assert.equal(withinLooseBound.lag.byFaultKind.scheduler_kill?.count, 1);
    assert.equal(withinLooseBound.faults.scheduler_kill, 1);

    const pastLooseBound = checkHistory([...fault, ...healthyOneShot('j1', at, 6_000)], options);
    assert.deepEqual(kindsOf(pastLooseBound), ['late_inside_fault']);
  });

  void it('counts the loose bound from the end of a database outage for what fell due during it', () => {
    const at = t0 + 20_000;
    const outage: HistoryEvent[] = [
      { type: 'fault_start', atMs: at - 1_000, faultId: 'f1', kind: 'postgres_restart', target: 'postgres' },
      { type: 'fault_end', atMs: at + 5_000, faultId: 'f1' },
    ];
    const soonAfter = checkHistory([...outage, ...healthyOneShot('j1', at, 8_000)], options);
    assert.deepEqual(soonAfter.violations, []);
    assert.equal(soonAfter.lag.byFaultKind.postgres_restart?.maxMs, 7_995, 'the quantiles keep the raw lag');
    assert.deepEqual(kindsOf(checkHistory([...outage, ...healthyOneShot('j1', at, 10_000)], options)), ['late_inside_fault']);
  });

  void it('also when the outage began just after the fire time, before a dispatch could land', () => {
    const at = t0 + 20_000;
    const outage: HistoryEvent[] = [
      { type: 'fault_start', atMs: at + 20, faultId: 'f1', kind: 'postgres_restart', target: 'postgres' },
      { type: 'fault_end', atMs: at + 7_000, faultId: 'f1' },
    ];
    assert.deepEqual(checkHistory([...outage, ...healthyOneShot('j1', at, 9_000)], options).violations, []);
    assert.deepEqual(kindsOf(checkHistory([...outage, ...healthyOneShot('j1', at, 12_000)], options)), ['late_inside_fault']);
    const afterTightBound: HistoryEvent[] = [
      { type: 'fault_start', atMs: at + options.lagBoundMs + 1, faultId: 'f1', kind: 'postgres_restart', target: 'postgres' },
      { type: 'fault_end', atMs: at + 7_000, faultId: 'f1' },
    ];
    assert.deepEqual(kindsOf(checkHistory([...afterTightBound, ...healthyOneShot('j1', at, 9_000)], options)),
      ['late_outside_fault'], 'an outage after the tight bound does not excuse a late fire');
  });

  void it('counts from the end of an outage that began while another fault was still delaying the fire', () => {
    const at = t0 + 20_000;
    const killThenOutage: HistoryEvent[] = [
      { type: 'fault_start', atMs: at + 300, faultId: 'f1', kind: 'scheduler_kill', target: 'scheduler-1' },
      { type: 'fault_end', atMs: at + 2_900, faultId: 'f1' },
      { type: 'fault_start', atMs: at + 2_300, faultId: 'f2', kind: 'postgres_restart', target: 'postgres' },
      { type: 'fault_end', atMs: at + 4_000, faultId: 'f2' },
    ];
    const soonAfter = checkHistory([...killThenOutage, ...healthyOneShot('j1', at, 6_500)], options);
    assert.deepEqual(soonAfter.violations, []);
    assert.equal(soonAfter.lag.byFaultKind.postgres_restart?.count, 1, 'the compounding outage is named');
    assert.deepEqual(kindsOf(checkHistory([...killThenOutage, ...healthyOneShot('j1', at, 8_500)], options)),
      ['late_inside_fault'], 'the loose bound still holds from the end of the outage');
    const outageAfterKillSettled: HistoryEvent[] = [
      killThenOutage[0]!, killThenOutage[1]!,
      { type: 'fault_start', atMs: at + 2_900 + options.faultLagBoundMs + 1, faultId: 'f2', kind: 'postgres_restart',
        target: 'postgres' },
      { type: 'fault_end', atMs: at + 9_000, faultId: 'f2' },
    ];
    assert.deepEqual(kindsOf(checkHistory([...outageAfterKillSettled, ...healthyOneShot('j1', at, 10_000)], options)),
      ['late_inside_fault'], 'an outage after the first fault has settled excuses nothing');
  });

  void it('calls a dispatch accepted with a shard token below one already used on that shard stale accepted', () => {
    const candidates = Array.from({ length: 5_000 }, (_, index) => `j${index + 2}`);
    const sameShard = candidates.find((jobId) => shardOf(jobId) === shardOf('j1'))!;
    const otherShard = candidates.find((jobId) => shardOf(jobId) !== shardOf('j1'))!;
    const [first, second] = [t0 + 5_000, t0 + 6_000];
    const tokenOf = (jobId: string, atMs: number, sequence: number, shardToken: string): HistoryEvent =>
      ({ type: 'ledger_dispatch', atMs: t0 + 70_000, runId: runIdOf(jobId, atMs), sequence, shardToken });
    const runs = (later: string): HistoryEvent[] => [...healthyOneShot('j1', first), ...healthyOneShot(later, second)];
    assert.deepEqual(checkHistory([...runs(sameShard), tokenOf('j1', first, 1, '10'), tokenOf(sameShard, second, 2, '12')],
      options).violations, [], 'tokens growing with the sequence');
    assert.deepEqual(kindsOf(checkHistory([...runs(sameShard), tokenOf(sameShard, second, 2, '10'),
      tokenOf('j1', first, 1, '12')], options)), ['stale_accepted'], 'a lower token later in the sequence');
    assert.deepEqual(checkHistory([...runs(otherShard), tokenOf('j1', first, 1, '12'), tokenOf(otherShard, second, 2, '10')],
      options).violations, [], 'shards are judged apart');
  });

  void it('allows a redelivery after the lease expired', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10, { leaseMs: 5_000 });
    const second = dispatch('j1', at, at + 6_000, { attempt: 2, worker: 'w2' });
    const report = checkHistory([...createOneShot('j1', at), first, second,
      completion(first, at + 7_000, 'stale_token'), completion(second, at + 6_100),
      ledgerRun('j1', at, 'succeeded', at + 5, 2)], options);
    assert.deepEqual(report.violations, []);
    assert.equal(report.counts.redeliveries, 1);
    assert.equal(report.counts.staleRejectedWorkerTokens, 1);
  });

  void it('allows a retry after an accepted failure', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10);
    const second = dispatch('j1', at, at + 1_000, { attempt: 2 });
    const report = checkHistory([...createOneShot('j1', at), first, completion(first, at + 100, 'accepted', 'failed'),
      second, completion(second, at + 1_100), ledgerRun('j1', at, 'succeeded', at + 5, 2)], options);
    assert.deepEqual(report.violations, []);
  });

  void it('calls two attempts holding valid leases at once a duplicate', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10, { leaseMs: 5_000 });
    const second = dispatch('j1', at, at + 2_000, { attempt: 2, worker: 'w2' });
    const report = checkHistory([...createOneShot('j1', at), first, second, completion(second, at + 2_100),
      ledgerRun('j1', at, 'succeeded', at + 5, 2)], options);
    assert.deepEqual(kindsOf(report), ['duplicate_concurrent_leases']);
  });

  void it('ends an attempt where the ledger says it ended, even when its worker died before recording it', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10, { leaseMs: 5_000 });
    const second = dispatch('j1', at, at + 2_000, { attempt: 2, worker: 'w2' });
    const ledger = ledgerRun('j1', at, 'succeeded', at + 5, 2);
    // The server accepted attempt 1's failure (retry_scheduled) before it leased attempt 2.
    ledger.events = [
      { atMs: at + 10, type: 'leased', toStatus: 'running', attempt: 1 },
      { atMs: at + 1_000, type: 'retry_scheduled', toStatus: 'retry_wait' },
      { atMs: at + 1_990, type: 'leased', toStatus: 'running', attempt: 2 },
      { atMs: at + 2_100, type: 'succeeded', toStatus: 'succeeded' },
    ];
    const report = checkHistory([...createOneShot('j1', at), first, second, completion(second, at + 2_100), ledger], options);
    assert.deepEqual(report.violations, []);
    assert.equal(report.counts.redeliveries, 1);
  });

  void it('calls one token handed to two workers a duplicate', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10);
    const again = dispatch('j1', at, at + 20, { worker: 'w2' });
    const report = checkHistory([...createOneShot('j1', at), first, again, completion(first, at + 100),
      ledgerRun('j1', at, 'succeeded', at + 5)], options);
    assert.deepEqual(kindsOf(report), ['duplicate_concurrent_leases']);
  });

  void it('calls a dispatch after an accepted completion a duplicate', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10, { leaseMs: 5_000 });
    const second = dispatch('j1', at, at + 8_000, { attempt: 2, worker: 'w2' });
    const report = checkHistory([...createOneShot('j1', at), first, completion(first, at + 100), second,
      ledgerRun('j1', at, 'succeeded', at + 5, 2)], options);
    assert.deepEqual(kindsOf(report), ['duplicate_after_completion']);
  });

  void it('calls two accepted final completions a duplicate, and the later one stale', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10, { leaseMs: 5_000 });
    const second = dispatch('j1', at, at + 6_000, { attempt: 2, worker: 'w2' });
    const report = checkHistory([...createOneShot('j1', at), first, second, completion(second, at + 6_100),
      completion(first, at + 7_000), ledgerRun('j1', at, 'succeeded', at + 5, 2)], options);
    assert.deepEqual(kindsOf(report), ['duplicate_completions', 'stale_accepted']);
  });

  void it('does not count a repeated completion of the same attempt twice', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10);
    const report = checkHistory([...createOneShot('j1', at), first, completion(first, at + 100),
      completion(first, at + 700), ledgerRun('j1', at, 'succeeded', at + 5)], options);
    assert.deepEqual(report.violations, []);
  });

  void it('calls a heartbeat accepted with a superseded token stale', () => {
    const at = t0 + 5_000;
    const first = dispatch('j1', at, at + 10, { leaseMs: 5_000 });
    const second = dispatch('j1', at, at + 6_000, { attempt: 2, worker: 'w2' });
    const report = checkHistory([...createOneShot('j1', at), first, second,
      { type: 'heartbeat', atMs: at + 6_510, sentAtMs: at + 6_500, worker: 'w1', runId: first.runId,
        fencingToken: first.fencingToken, outcome: 'accepted', leaseExpiresAtMs: at + 11_500 },
      completion(second, at + 6_600), ledgerRun('j1', at, 'succeeded', at + 5, 2)], options);
    assert.deepEqual(kindsOf(report), ['stale_accepted']);
  });

  void it('sums stale shard rejections over process incarnations and can require some', () => {
    const sample = (process: string, incarnation: number, value: number): HistoryEvent => ({ type: 'counter_sample',
      atMs: t0, process, incarnation, name: 'tickler_dispatch_rejected_stale_token_total', value });
    const history = [sample('scheduler-1', 1, 2), sample('scheduler-1', 1, 3), sample('scheduler-1', 2, 1),
      sample('scheduler-2', 1, 0)];
    assert.equal(checkHistory(history, options).counts.staleRejectedShardTokens, 4);
    assert.deepEqual(kindsOf(checkHistory([], { ...options, requireStaleRejected: true })), ['stale_not_exercised']);
    assert.equal(checkHistory(history, { ...options, requireStaleRejected: true }).valid, true);
  });

  void it('calls a recurring job that stopped firing stopped, and its missing occurrences lost', () => {
    const history: HistoryEvent[] = [...createCron('r1', '*/2 * * * * *')];
    for (let scheduledAtMs = t0 + 2_000; scheduledAtMs <= t0 + 20_000; scheduledAtMs += 2_000) {
      const seen = dispatch('r1', scheduledAtMs, scheduledAtMs + 30);
      history.push(seen, completion(seen, scheduledAtMs + 50), ledgerRun('r1', scheduledAtMs, 'succeeded', scheduledAtMs + 20));
    }
    const report = checkHistory(history, options);
    assert.deepEqual(kindsOf(report), ['lost', 'recurrence_stopped']);
    assert.equal(report.violationCounts.recurrence_stopped, 1);
    assert.equal(report.violationCounts.lost, 20, 'every two seconds from t0+22s to t0+60s');
  });

  void it('calls an active recurring job without a pending timer stopped', () => {
    const cronHistory = createCron('r1', '0 0 0 1 1 *'); // next new year: nothing due within the run
    const report = checkHistory([...cronHistory,
      { type: 'ledger_job', atMs: t0 + 70_000, jobId: 'r1', state: 'active', nextScheduledAtMs: null }], options);
    assert.deepEqual(kindsOf(report), ['recurrence_stopped']);
  });

  void it('counts a skip under the declared overlap policy as handled, and outside it as lost', () => {
    const history = (overlap: HistoryJobPolicies['overlap']): HistoryEvent[] => {
      const events: HistoryEvent[] = [...createCron('r1', '*/10 * * * * *', { ...policies, overlap })];
      for (let scheduledAtMs = t0 + 10_000; scheduledAtMs <= t0 + 70_000; scheduledAtMs += 10_000) {
        if (scheduledAtMs === t0 + 20_000) {
          events.push(ledgerRun('r1', scheduledAtMs, 'skipped_overlap', null));
          continue;
        }
        const seen = dispatch('r1', scheduledAtMs, scheduledAtMs + 30);
        events.push(seen, completion(seen, scheduledAtMs + 50), ledgerRun('r1', scheduledAtMs, 'succeeded', scheduledAtMs + 20));
      }
      return events;
    };
    const forbid = checkHistory(history('forbid'), options);
    assert.deepEqual(forbid.violations, []);
    assert.equal(forbid.counts.skippedByPolicy, 1);
    assert.deepEqual(kindsOf(checkHistory(history('allow'), options)), ['lost']);
  });

  void it('calls a dispatch that run history does not show unobservable', () => {
    const at = t0 + 5_000;
    const seen = dispatch('j1', at, at + 10);
    const report = checkHistory([...createOneShot('j1', at), seen, completion(seen, at + 100)], options);
    assert.deepEqual(kindsOf(report), ['unobservable']);
  });

  void it('calls an accepted success the ledger does not show unobservable', () => {
    const at = t0 + 5_000;
    const seen = dispatch('j1', at, at + 10);
    const report = checkHistory([...createOneShot('j1', at), seen, completion(seen, at + 100),
      ledgerRun('j1', at, 'running', at + 5)], options);
    assert.deepEqual(kindsOf(report), ['unobservable']);
  });

  void it('calls an occurrence a cancel raced maybe: neither lost if missing nor unexpected if dispatched', () => {
    const at = t0 + 5_000;
    const cancel: HistoryEvent[] = [
      { type: 'control_sent', atMs: at - 50, kind: 'cancel', jobId: 'j1' },
      { type: 'control_answer', atMs: at + 40, kind: 'cancel', jobId: 'j1', outcome: 'acked' },
    ];
    const missing = checkHistory([...createOneShot('j1', at), ...cancel], options);
    assert.deepEqual(missing.violations, []);
    assert.equal(missing.counts.maybe, 1);
    assert.equal(missing.counts.expected, 0);
    const fired = checkHistory([...healthyOneShot('j1', at), ...cancel], options);
    assert.deepEqual(fired.violations, []);
    assert.equal(fired.counts.maybe, 1);
  });

  void it('calls a dispatch after an acknowledged cancel unexpected', () => {
    const at = t0 + 5_000;
    const cancel: HistoryEvent[] = [
      { type: 'control_sent', atMs: at - 500, kind: 'cancel', jobId: 'j1' },
      { type: 'control_answer', atMs: at - 450, kind: 'cancel', jobId: 'j1', outcome: 'acked' },
    ];
    assert.equal(checkHistory([...createOneShot('j1', at), ...cancel], options).valid, true);
    assert.deepEqual(kindsOf(checkHistory([...healthyOneShot('j1', at), ...cancel], options)), ['unexpected']);
  });

  void it('does not take a skipped or cancelled ledger row for a dispatch', () => {
    const at = t0 + 5_000;
    const cancel: HistoryEvent[] = [
      { type: 'control_sent', atMs: at - 500, kind: 'cancel', jobId: 'j1' },
      { type: 'control_answer', atMs: at - 450, kind: 'cancel', jobId: 'j1', outcome: 'acked' },
    ];
    for (const status of ['skipped_overlap', 'cancelled']) {
      const report = checkHistory([...createOneShot('j1', at), ...cancel, ledgerRun('j1', at, status, at)], options);
      assert.deepEqual(report.violations, [], status);
    }
    const made = checkHistory([...createOneShot('j1', at), ...cancel, ledgerRun('j1', at, 'ready', at)], options);
    assert.deepEqual(kindsOf(made), ['unexpected'], 'made ready after the cancel was acknowledged');
  });

  void it('ignores a refused cancel', () => {
    const at = t0 + 5_000;
    const report = checkHistory([...createOneShot('j1', at),
      { type: 'control_sent', atMs: at - 50, kind: 'cancel', jobId: 'j1' },
      { type: 'control_answer', atMs: at - 40, kind: 'cancel', jobId: 'j1', outcome: 'failed' }], options);
    assert.deepEqual(kindsOf(report), ['lost']);
  });

  void it('treats a paused recurring job as not due until resumed', () => {
    const history: HistoryEvent[] = [...createCron('r1', '*/10 * * * * *'),
      { type: 'control_sent', atMs: t0 + 1_000, kind: 'pause', jobId: 'r1' },
      { type: 'control_answer', atMs: t0 + 1_050, kind: 'pause', jobId: 'r1', outcome: 'acked' }];
    const paused = checkHistory(history, options);
    assert.deepEqual(paused.violations, [], 'nothing is due while paused, and a paused job is not stopped');
    const strayWhilePaused = dispatch('r1', t0 + 30_000, t0 + 30_010);
    assert.deepEqual(kindsOf(checkHistory([...history, strayWhilePaused,
      ledgerRun('r1', t0 + 30_000, 'succeeded', t0 + 30_005)], options)), ['unexpected']);
  });

  void it('calls a dispatch of a create whose answer was lost maybe', () => {
    const at = t0 + 5_000;
    const seen = dispatch('j-unknown', at, at + 10);
    const report = checkHistory([
      { type: 'create_sent', atMs: t0, createId: 'c-j-unknown', schedule: { atMs: at }, policies },
      { type: 'create_unknown', atMs: t0 + 30_000, createId: 'c-j-unknown', error: 'socket hang up' },
      seen, completion(seen, at + 100), ledgerRun('j-unknown', at, 'succeeded', at + 5),
    ], options);
    assert.deepEqual(report.violations, []);
    assert.equal(report.counts.maybe, 1);
  });

  void it('requires, but does not time, an occurrence whose create was acknowledged after it was due', () => {
    const at = t0 + 5_000;
    const lateAck = createOneShot('j1', at, at + 2_000);
    assert.deepEqual(kindsOf(checkHistory(lateAck, options)), ['lost']);
    const seen = dispatch('j1', at, at + 2_500);
    const report = checkHistory([...lateAck, seen, completion(seen, at + 2_600), ledgerRun('j1', at, 'succeeded', at + 2_400)],
      options);
    assert.deepEqual(report.violations, []);
    assert.equal(report.lag.outsideFault.count, 0);
  });

  void it('flags a run id that is not runIdOf(job, scheduled_at)', () => {
    const at = t0 + 5_000;
    const wrong = { ...dispatch('j1', at + 1_000, at + 1_010), runId: 'f'.repeat(32) };
    const report = checkHistory([...healthyOneShot('j1', at), wrong,
      { ...ledgerRun('j1', at + 1_000, 'succeeded', at + 1_005), runId: 'f'.repeat(32) }], options);
    assert.deepEqual(kindsOf(report), ['run_id_mismatch']);
  });

  void it('names answers from outside the run as the cause, whatever else the history shows', () => {
    const at = t0 + 5_000;
    // The collision two runs on one machine made: this run's create was answered by the other
    // run's node (so it never fired here), and the driver's next request was refused as foreign.
    const report = checkHistory([...createOneShot('j1', at), {
      type: 'foreign_answer', atMs: t0 + 20, client: 'driver', url: 'http://127.0.0.1:23456/v1/jobs', tag: 'chaos7-b',
      expected: 'chaos7-a',
    }], options);
    assert.equal(report.valid, false);
    assert.deepEqual(kindsOf(report), ['foreign_answer', 'lost']);
    assert.match(report.cause ?? '', /^1 answer\(s\) came from outside this run \(http:\/\/127\.0\.0\.1:23456; run tag chaos7-b, this run is chaos7-a\): another process on this machine holds this run's port\(s\); violations besides these may follow from it$/);
    const printed = formatReport(report).split('\n');
    assert.equal(printed[0], 'history check: INVALID');
    assert.equal(printed[1], `  cause: ${report.cause}`);
    assert.match(printed.join('\n'), /answers from outside the run 1/);
  });

  void it('names a node that could not be started as the cause, and its port taken when it says so', () => {
    const report = checkHistory([...healthyOneShot('j1', t0 + 5_000), { type: 'node_start_failed', atMs: t0 + 30_000,
      process: 'api-1', reason: 'tickler: cannot listen on 127.0.0.1:23456: address already in use (EADDRINUSE)' }], options);
    assert.deepEqual(kindsOf(report), ['node_start_failed']);
    assert.equal(report.cause, 'api-1 could not be started (tickler: cannot listen on 127.0.0.1:23456: address already in use '
      + '(EADDRINUSE)): another process on this machine holds its port; violations besides these may follow from it');
  });

  void it('has no cause for a valid run', () => {
    assert.equal(checkHistory(healthyOneShot('j1', t0 + 5_000), options).cause, null);
  });

  void it('parses JSONL, tolerating only a torn last line', () => {
    const line = JSON.stringify({ type: 'phase', atMs: t0, phase: 'load' });
    assert.equal(parseHistory(`${line}\n${line}\n{"type":"pha`).length, 2);
    assert.throws(() => parseHistory(`{"type":"pha\n${line}\n${line}\n`), /line 1 is not JSON/);
    assert.throws(() => parseHistory('{"atMs": 1}\n'), /not an event/);
  });
});
