/**
 * What the harness asked of each job, rebuilt from the history: its create (acknowledged,
 * refused or unknown), and the cancels, pauses and resumes sent for it. The checker asks two
 * questions of it: which occurrences the schedule generates, and whether an occurrence was
 * wanted when it came due (expected), not wanted (excluded), or raced a change (maybe).
 */
import type {
  ControlKind,
  CreateSentEvent,
  HistoryEvent,
  HistoryJobPolicies,
  HistorySchedule,
} from './history.js';

/** Expands a cron schedule: the scheduled times in `(afterMs, untilMs]`, pre-jitter. */
export type ScheduleExpander = (
  schedule: { cron: string; tz: string },
  dstGap: HistoryJobPolicies['dstGap'],
  afterMs: number,
  untilMs: number,
) => { scheduledAtMs: number; skippedDst: boolean }[];

export interface ControlRecord {
  kind: ControlKind;
  sentAtMs: number;
  /** When it was acknowledged; null while unanswered or unknown. */
  ackedAtMs: number | null;
  /** A definite refusal changed nothing. */
  refused: boolean;
}

export interface JobRecord {
  createId: string;
  schedule: HistorySchedule;
  policies: HistoryJobPolicies;
  createSentAtMs: number;
  /** Null until a create answer named the job. */
  jobId: string | null;
  createdAtMs: number | null;
  /** The first acknowledgement's arrival. */
  ackedAtMs: number | null;
  /** Every answer was a refusal: nothing was created. */
  refused: boolean;
  /** Some answer was lost: a later refusal (say, of a one-shot now in the past) proves nothing. */
  outcomeUnknown: boolean;
  controls: ControlRecord[];
}

export type Wanted =
  | { kind: 'expected' }
  | { kind: 'maybe'; reason: string }
  /** Not wanted; a dispatch first seen at or after `allowedFromMs` (a catch-up on resume) is a maybe. */
  | { kind: 'excluded'; reason: string; allowedFromMs: number };

export class JobBook {
  readonly byCreateId = new Map<string, JobRecord>();
  readonly byJobId = new Map<string, JobRecord>();

  constructor(history: readonly HistoryEvent[]) {
    const pending = new Map<string, ControlRecord[]>();
    for (const event of history) {
      switch (event.type) {
        case 'create_sent':
          this.addCreate(event);
          break;
        case 'create_acked': {
          const job = this.byCreateId.get(event.createId);
          if (job === undefined || job.ackedAtMs !== null) break;
          job.jobId = event.jobId;
          job.createdAtMs = event.createdAtMs;
          job.ackedAtMs = event.atMs;
          this.byJobId.set(event.jobId, job);
          break;
        }
        case 'create_failed': {
          const job = this.byCreateId.get(event.createId);
          if (job !== undefined && job.ackedAtMs === null && !job.outcomeUnknown) job.refused = true;
          break;
        }
        case 'create_unknown': {
          const job = this.byCreateId.get(event.createId);
          if (job !== undefined) job.outcomeUnknown = true;
          break;
        }
        case 'control_sent': {
          const control: ControlRecord = { kind: event.kind, sentAtMs: event.atMs, ackedAtMs: null, refused: false };
          const key = `${event.jobId}|${event.kind}`;
          pending.set(key, [...(pending.get(key) ?? []), control]);
          this.byJobId.get(event.jobId)?.controls.push(control);
          break;
        }
        case 'control_answer': {
          // Answers arrive in the order of their requests per job and kind: the harness sends one at a time.
          const queue = pending.get(`${event.jobId}|${event.kind}`);
          const control = queue?.shift();
          if (control === undefined) break;
          if (event.outcome === 'acked') control.ackedAtMs = event.atMs;
          if (event.outcome === 'failed') control.refused = true;
          break;
        }
        default:
          break;
      }
    }
  }

  private addCreate(event: CreateSentEvent): void {
    if (this.byCreateId.has(event.createId)) return; // a repetition with the same key
    this.byCreateId.set(event.createId, {
      createId: event.createId,
      schedule: event.schedule,
      policies: event.policies,
      createSentAtMs: event.atMs,
      jobId: null,
      createdAtMs: null,
      ackedAtMs: null,
      refused: false,
      outcomeUnknown: false,
      controls: [],
    });
  }
}

export function isCron(schedule: HistorySchedule): schedule is { cron: string; tz: string } {
  return 'cron' in schedule;
}

/** Whether any cancel that was not refused was sent for the job. */
export function cancelSent(job: JobRecord): boolean {
  return job.controls.some((control) => control.kind === 'cancel' && !control.refused);
}

/** A job paused at the end: a pause not refused with no acknowledged resume after it. */
export function pausedAtEnd(job: JobRecord): boolean {
  let paused = false;
  for (const control of [...job.controls].sort((left, right) => left.sentAtMs - right.sentAtMs)) {
    if (control.refused) continue;
    if (control.kind === 'pause') paused = true;
    if (control.kind === 'resume' && control.ackedAtMs !== null) paused = false;
  }
  return paused;
}

/**
 * Whether an occurrence due at `fireAtMs` was wanted. A change sent later than the fire plus
 * the lag bound cannot have raced it; one acknowledged before the fire decides it; anything
 * between raced the fire and makes it a maybe. With workers leasing ahead, a run may be
 * theirs `leaseAheadMs` before the fire, so only a change acknowledged before then decides it.
 */
export function wantedAt(job: JobRecord, fireAtMs: number, lagBoundMs: number, leaseAheadMs = 0): Wanted {
  const decidedBeforeMs = fireAtMs - leaseAheadMs;
  const controls = job.controls.filter((control) => !control.refused)
    .sort((left, right) => left.sentAtMs - right.sentAtMs);
  for (const control of controls) {
    if (control.kind !== 'cancel' || control.sentAtMs > fireAtMs + lagBoundMs) continue;
    if (control.ackedAtMs !== null && control.ackedAtMs < decidedBeforeMs) {
      return { kind: 'excluded', reason: 'cancelled before its fire time', allowedFromMs: Infinity };
    }
    return { kind: 'maybe', reason: 'a cancel raced the fire' };
  }
  for (let index = 0; index < controls.length; index++) {
    const pause = controls[index] as ControlRecord;
    if (pause.kind !== 'pause' || pause.sentAtMs > fireAtMs + lagBoundMs) continue;
    const resume = controls.slice(index + 1).find((control) => control.kind === 'resume');
    const resumeAckedAtMs = resume === undefined ? Infinity : resume.ackedAtMs ?? Infinity;
    if (resumeAckedAtMs + lagBoundMs < fireAtMs) continue; // paused and resumed before it
    if (pause.ackedAtMs !== null && pause.ackedAtMs < decidedBeforeMs && (resume === undefined || resume.sentAtMs > fireAtMs)) {
      return { kind: 'excluded', reason: 'paused at its fire time', allowedFromMs: resume?.sentAtMs ?? Infinity };
    }
    return { kind: 'maybe', reason: 'a pause or resume raced the fire' };
  }
  return { kind: 'expected' };
}
