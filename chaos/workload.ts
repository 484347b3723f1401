/**
 * The seeded workload of a chaos run, planned before it starts: recurring jobs every few
 * seconds (6-field cron with seconds), one-shot timers due over the run, cancels racing their
 * fire time, a pause and resume, and handlers that fail or outlive their lease (see
 * chaos/worker.ts). Pure: the same seed plans the same work. Every job fires with
 * `tolerance_s: 0`, so its fire time is its scheduled time and fire lag is measured exactly.
 */
import type { JobCreateRequest } from '../src/worker/wire.js';
import type { HistoryJobPolicies, HistorySchedule } from './history.js';
import type { Prng } from './prng.js';

export const chaosPool = 'chaos';
export const handlerBehaviours = ['ok', 'fail_first', 'fail_permanent', 'slow', 'outlive'] as const;
export type HandlerBehaviour = (typeof handlerBehaviours)[number];

/** What a chaos job carries: its create's name, and how its handler behaves. */
export interface ChaosPayload {
  create_id: string;
  behaviour: HandlerBehaviour;
}

export interface PlannedCreate {
  createId: string;
  /** When to send the create, from the start of the fault phase. */
  sendOffsetMs: number;
  /** A one-shot's due time from the start of the fault phase, or a cron rule. */
  schedule: { dueOffsetMs: number } | { cron: string };
  behaviour: HandlerBehaviour;
}

export interface PlannedControl {
  createId: string;
  kind: 'cancel' | 'pause' | 'resume';
  sendOffsetMs: number;
}

export interface WorkloadPlan {
  creates: PlannedCreate[];
  controls: PlannedControl[];
  /** The last one-shot due time, from the start of the fault phase. */
  lastDueOffsetMs: number;
}

export interface WorkloadOptions {
  faultPhaseMs: number;
  recurringJobs: number;
  oneShotsPerSecond: number;
  /** A one-shot is due this long after its create is sent. */
  dueAfterMsMin: number;
  dueAfterMsMax: number;
  /**
   * Every this-many-th one-shot is due when its create is sent ("run this now"), so the run
   * is written by the create itself (docs/schedules.md, "Due when created"); 0 for none. Chosen by
   * index, not by the PRNG, so the rest of the plan is the same with or without them.
   */
  dueAtCreateEvery: number;
  /** Share of one-shots whose cancel is sent within ±`cancelRaceMs` of their fire time. */
  racingCancelShare: number;
  cancelRaceMs: number;
}

export const workloadDefaults: Omit<WorkloadOptions, 'faultPhaseMs'> = {
  recurringJobs: 12,
  oneShotsPerSecond: 8,
  dueAfterMsMin: 1_500,
  dueAfterMsMax: 12_000,
  dueAtCreateEvery: 10,
  racingCancelShare: 0.1,
  cancelRaceMs: 400,
};

export const jobPolicies: HistoryJobPolicies = { overlap: 'forbid', catchUp: 'latest', dstGap: 'shift', toleranceMs: 0 };

const oneShotBehaviours: readonly (readonly [HandlerBehaviour, number])[] = [
  ['ok', 80], ['fail_first', 8], ['fail_permanent', 3], ['slow', 3], ['outlive', 6],
];

export function planWorkload(prng: Prng, options: WorkloadOptions): WorkloadPlan {
  const creates: PlannedCreate[] = [];
  const controls: PlannedControl[] = [];
  for (let index = 0; index < options.recurringJobs; index++) {
    const periodS = prng.integer(2, 6);
    // One slow job exercises `overlap: forbid` (its runs outlast its period); one fails its first attempts.
    const behaviour: HandlerBehaviour = index === 0 ? 'slow' : index === 1 ? 'fail_first' : 'ok';
    creates.push({ createId: `r${index}`, sendOffsetMs: 0, schedule: { cron: `*/${periodS} * * * * *` }, behaviour });
  }
  if (options.recurringJobs >= 4) {
    controls.push({ createId: 'r2', kind: 'cancel', sendOffsetMs: Math.round(prng.between(0.3, 0.8) * options.faultPhaseMs) });
    controls.push({ createId: 'r3', kind: 'pause', sendOffsetMs: Math.round(0.3 * options.faultPhaseMs) });
    controls.push({ createId: 'r3', kind: 'resume', sendOffsetMs: Math.round(0.5 * options.faultPhaseMs) });
  }
  let lastDueOffsetMs = 0;
  const oneShotCount = Math.floor((options.faultPhaseMs / 1_000) * options.oneShotsPerSecond);
  for (let index = 0; index < oneShotCount; index++) {
    const sendOffsetMs = Math.round((index / options.oneShotsPerSecond) * 1_000);
    const dueAfterMs = Math.round(prng.between(options.dueAfterMsMin, options.dueAfterMsMax));
    const dueAtCreate = options.dueAtCreateEvery > 0 && index % options.dueAtCreateEvery === options.dueAtCreateEvery - 1;
    const dueOffsetMs = sendOffsetMs + (dueAtCreate ? 0 : dueAfterMs);
    const createId = `o${index}`;
    creates.push({ createId, sendOffsetMs, schedule: { dueOffsetMs }, behaviour: prng.weighted(oneShotBehaviours) });
    if (prng.chance(options.racingCancelShare)) {
      const cancelOffsetMs = dueOffsetMs + Math.round(prng.between(-options.cancelRaceMs, options.cancelRaceMs));
      controls.push({ createId, kind: 'cancel', sendOffsetMs: Math.max(sendOffsetMs + 1, cancelOffsetMs) });
    }
    lastDueOffsetMs = Math.max(lastDueOffsetMs, dueOffsetMs);
  }
  controls.sort((left, right) => left.sendOffsetMs - right.sendOffsetMs);
  return { creates, controls, lastDueOffsetMs };
}

/** The create request of a planned job, and its schedule as the history records it. */
export function createRequestOf(create: PlannedCreate, phaseStartMs: number, runTag: string):
  { request: JobCreateRequest; schedule: HistorySchedule } {
  const payload: ChaosPayload = { create_id: create.createId, behaviour: create.behaviour };
  const base = {
    key: `${runTag}-${create.createId}`, pool: chaosPool, payload, tolerance_s: 0, lease_s: 5,
    retry: { max_attempts: 3, base_s: 1, max_s: 2 }, overlap: jobPolicies.overlap, catch_up: jobPolicies.catchUp,
  } satisfies Partial<JobCreateRequest>;
  if ('cron' in create.schedule) {
    return { request: { ...base, schedule: { cron: create.schedule.cron, tz: 'UTC' } },
      schedule: { cron: create.schedule.cron, tz: 'UTC' } };
  }
  const atMs = phaseStartMs + create.schedule.dueOffsetMs;
  return { request: { ...base, schedule: { at: new Date(atMs).toISOString() } }, schedule: { atMs } };
}
