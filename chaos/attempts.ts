/**
 * The attempts of one run as workers saw them, and the violations among them: two attempts
 * holding valid leases at once, a dispatch after an accepted final completion, two accepted
 * final completions, and writes (completions, heartbeats) accepted with a token that was no
 * longer current.
 *
 * Workers record a dispatch when they receive it, so the server granted it at or before the
 * recorded time: if that time is before the previous attempt's lease ended, the two leases
 * overlapped for certain. Where the order cannot be told from outside (a dispatch seen
 * while a completion was in flight), nothing is claimed.
 */
import type { CompletionEvent, DispatchEvent, HeartbeatEvent } from './history.js';

export interface AttemptView {
  fencingToken: string;
  attempt: number;
  firstSeenAtMs: number;
  workers: Set<string>;
  /** The expiry the attempt was leased with; accepted heartbeats extend it. */
  leaseExpiresAtMs: number;
  completions: CompletionEvent[];
  heartbeats: HeartbeatEvent[];
}

export interface RunAttemptFindings {
  concurrentLeases: string[];
  dispatchAfterCompletion: string[];
  duplicateCompletions: string[];
  staleAccepted: string[];
  redeliveries: number;
  staleRejected: number;
  /** The final (succeeded or failed_permanent) accepted completion, if any. */
  finalCompletion: CompletionEvent | undefined;
  attempts: AttemptView[];
}

const finalStatuses = new Set(['succeeded', 'failed_permanent']);

export function attemptsOf(
  dispatches: readonly DispatchEvent[],
  completions: readonly CompletionEvent[],
  heartbeats: readonly HeartbeatEvent[],
): AttemptView[] {
  const byToken = new Map<string, AttemptView>();
  for (const dispatch of dispatches) {
    const known = byToken.get(dispatch.fencingToken);
    if (known !== undefined) {
      known.workers.add(dispatch.worker);
      known.firstSeenAtMs = Math.min(known.firstSeenAtMs, dispatch.atMs);
      continue;
    }
    byToken.set(dispatch.fencingToken, {
      fencingToken: dispatch.fencingToken,
      attempt: dispatch.attempt,
      firstSeenAtMs: dispatch.atMs,
      workers: new Set([dispatch.worker]),
      leaseExpiresAtMs: dispatch.leaseExpiresAtMs,
      completions: [],
      heartbeats: [],
    });
  }
  for (const completion of completions) byToken.get(completion.fencingToken)?.completions.push(completion);
  for (const heartbeat of heartbeats) {
    const attempt = byToken.get(heartbeat.fencingToken);
    attempt?.heartbeats.push(heartbeat);
  }
  return [...byToken.values()].sort((left, right) => left.attempt - right.attempt
    || left.firstSeenAtMs - right.firstSeenAtMs);
}

/**
 * When the attempt's lease ended for certain, as far as a dispatch seen at `laterSeenAtMs` is
 * concerned: its expiry as extended by heartbeats sent before then (one sent later and
 * accepted is a stale write, counted on its own), or the sending of a completion that may
 * have been accepted (the server ends the lease on accepting it).
 */
function leaseEndMs(attempt: AttemptView, laterSeenAtMs: number, ledgerEnds: ReadonlyMap<number, number>): number {
  let endMs = attempt.leaseExpiresAtMs;
  // The server's own record of the attempt ending (a completion the worker sent but did not
  // live to record, an expiry) ends the lease as surely as one the harness saw.
  const ledgerEndMs = ledgerEnds.get(attempt.attempt);
  if (ledgerEndMs !== undefined) endMs = Math.min(endMs, ledgerEndMs);
  for (const heartbeat of attempt.heartbeats) {
    if (heartbeat.outcome === 'accepted' && heartbeat.leaseExpiresAtMs !== undefined && heartbeat.sentAtMs < laterSeenAtMs) {
      endMs = Math.max(endMs, heartbeat.leaseExpiresAtMs);
    }
  }
  for (const completion of attempt.completions) {
    if (completion.outcome !== 'stale_token' && completion.outcome !== 'cancelled'
      && completion.outcome !== 'not_found') {
      endMs = Math.min(endMs, completion.sentAtMs);
    }
  }
  return endMs;
}

/**
 * When each attempt ended by the ledger: the first event after its `leased` event that moves
 * the run out of `running`.
 */
export function ledgerAttemptEnds(events: readonly { atMs: number; type: string; toStatus: string | null; attempt?: number }[]):
  Map<number, number> {
  const ends = new Map<number, number>();
  let current: number | null = null;
  for (const event of events) {
    if (event.type === 'leased' && event.attempt !== undefined) {
      current = event.attempt;
    } else if (current !== null && event.toStatus !== null && event.toStatus !== 'running') {
      if (!ends.has(current)) ends.set(current, event.atMs);
      current = null;
    }
  }
  return ends;
}

export function analyseRun(
  runId: string,
  attempts: AttemptView[],
  clockSlackMs: number,
  ledgerEnds: ReadonlyMap<number, number> = new Map(),
): RunAttemptFindings {
  const findings: RunAttemptFindings = {
    concurrentLeases: [],
    dispatchAfterCompletion: [],
    duplicateCompletions: [],
    staleAccepted: [],
    redeliveries: 0,
    staleRejected: 0,
    finalCompletion: undefined,
    attempts,
  };
  attempts.forEach((attempt, index) => {
    if (attempt.workers.size > 1) {
      findings.concurrentLeases.push(`${runId}: token ${attempt.fencingToken} handed to ${[...attempt.workers].join(', ')}`);
    }
    const writes = [...attempt.completions, ...attempt.heartbeats];
    findings.staleRejected += writes.filter((write) => write.outcome === 'stale_token').length;
    for (const write of writes) {
      if (write.outcome !== 'accepted') continue;
      const newer = attempts.slice(index + 1).find((other) => other.firstSeenAtMs + clockSlackMs < write.sentAtMs);
      if (newer !== undefined) {
        findings.staleAccepted.push(`${runId}: ${write.type} with attempt ${attempt.attempt}'s token accepted after `
          + `attempt ${newer.attempt} was handed out`);
      }
    }
  });
  checkRedeliveries(runId, attempts, clockSlackMs, findings, ledgerEnds);
  checkFinalCompletions(runId, attempts, findings);
  return findings;
}

function finalAcceptedOf(attempt: AttemptView): CompletionEvent | undefined {
  return attempt.completions.find((completion) => completion.outcome === 'accepted' && finalStatuses.has(completion.status));
}

function checkRedeliveries(runId: string, attempts: AttemptView[], clockSlackMs: number,
  findings: RunAttemptFindings, ledgerEnds: ReadonlyMap<number, number>): void {
  for (let laterIndex = 1; laterIndex < attempts.length; laterIndex++) {
    const later = attempts[laterIndex] as AttemptView;
    let violated = false;
    for (const earlier of attempts.slice(0, laterIndex)) {
      const finalCompletion = finalAcceptedOf(earlier);
      if (finalCompletion !== undefined) {
        // Seen before the completion was sent: counted as a stale accepted completion above.
        if (later.firstSeenAtMs + clockSlackMs >= finalCompletion.sentAtMs) {
          findings.dispatchAfterCompletion.push(`${runId}: attempt ${later.attempt} handed out after attempt `
            + `${earlier.attempt}'s ${finalCompletion.status} completion was accepted`);
        }
        violated = true;
        break;
      }
      const earlierEndMs = leaseEndMs(earlier, later.firstSeenAtMs, ledgerEnds);
      if (later.firstSeenAtMs + clockSlackMs < earlierEndMs) {
        findings.concurrentLeases.push(`${runId}: attempt ${later.attempt} seen at ${later.firstSeenAtMs} while attempt `
          + `${earlier.attempt}'s lease ran until ${earlierEndMs}`);
        violated = true;
        break;
      }
    }
    if (!violated) findings.redeliveries += 1;
  }
}

function checkFinalCompletions(runId: string, attempts: AttemptView[], findings: RunAttemptFindings): void {
  const finals = attempts.flatMap((attempt) => attempt.completions)
    .filter((completion) => completion.outcome === 'accepted' && finalStatuses.has(completion.status));
  findings.finalCompletion = finals[0];
  const tokens = new Set(finals.map((completion) => completion.fencingToken));
  const statuses = new Set(finals.map((completion) => completion.status));
  // The SDK repeats a completion whose answer was lost; the same answer twice is not a second outcome.
  if (tokens.size > 1 || statuses.size > 1) {
    findings.duplicateCompletions.push(`${runId}: ${finals.length} final completions accepted `
      + `(${finals.map((completion) => `${completion.status} by ${completion.worker}`).join(', ')})`);
  }
}
