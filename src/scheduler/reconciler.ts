/**
 * The silent-miss guard (case study §4.3): on a period, every active recurring job without a
 * pending timer gets one back — the first occurrence after now — and is counted and logged.
 * Dispatch writes the next timer in the same transaction as the run, so a repair here means
 * a bug or a hand-edited database; `tickler_definitions_without_next_timer` should stay 0.
 *
 * The same pass runs the dead man's switch (DESIGN.md flow 8): jobs with `max_silence_s` whose
 * last success is older than that are counted per team in `tickler_jobs_silent`, and each is
 * logged once when it falls silent (and once when it succeeds again). A timer can be there and
 * the job still silent: its worker fails, or its pool has no worker at all. With an alert
 * webhook, each silence is also announced once, and its end once (obs/alert-webhook.ts): what
 * was announced is kept in the store, so a restart or a new leader neither repeats nor misses
 * one. `tickler_job_last_success_age_seconds{job}` shows every watched job's age.
 *
 * It also releases `buffer_one` runs held with no other run of their job active
 * (`Store.releaseStrandedHeldRuns`): the end of the run before releases them, and a release
 * missed (a PATCH of the overlap racing that end on PostgreSQL) would hold the occurrence
 * forever; `tickler_reconciler_held_releases_total` should stay 0 too.
 *
 * On PostgreSQL only the node that holds shard 0 runs it, so nodes do not repeat the work.
 */
import type { Clock, TimerHandle } from '../clock.js';
import { firstTimer } from '../domain/firing-plan.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import { silenceAlertOf, type AlertWebhook } from '../obs/alert-webhook.js';
import type { SilentJob, Store } from '../store/store.js';
import type { ScheduleCache } from './schedule-cache.js';

const repairBatchMax = 1_000;
/** Watched jobs read per pass, the longest silent first; the gauge counts at most this many silent. */
const silentJobsMax = 10_000;
/** Jobs given a `tickler_job_last_success_age_seconds` series: the longest silent ones. */
const ageGaugeJobsMax = 1_000;

export class Reconciler {
  private timer: TimerHandle | null = null;
  private stopped = false;
  /** Jobs silent at the last pass: each is logged when it falls silent, not on every pass. */
  private silentJobIds = new Set<string>();

  constructor(
    private readonly deps: {
      store: Store;
      clock: Clock;
      metrics: Metrics;
      logger: Logger;
      schedules: ScheduleCache;
      intervalMs: number;
      isLeader(): boolean;
      /** Where silences are announced; none without `--alert-webhook`. */
      alerts?: AlertWebhook | null;
    },
  ) {}

  start(): void {
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
  }

  /** One pass; answers how many jobs were repaired. */
  async reconcileOnce(): Promise<number> {
    const { store, clock, metrics, logger, schedules } = this.deps;
    const missing = await store.findJobsWithoutTimer(repairBatchMax);
    metrics.definitionsWithoutNextTimer.set(missing.length);
    let repaired = 0;
    for (const job of missing) {
      const nowMs = clock.nowMs();
      const timer = firstTimer(job.jobId, job.spec, schedules.get(job.spec), nowMs);
      if (timer === null) continue;
      if (await store.repairJobTimer(job.jobId, job.version, timer, nowMs)) {
        repaired++;
        metrics.reconcilerRepairsTotal.inc();
        logger.warn({ jobId: job.jobId, team: job.team, nextFireAt: new Date(timer.fireAtMs).toISOString() },
          'active recurring job had no pending timer; repaired');
      }
    }
    return repaired;
  }

  /** Releases held runs nothing else will release; answers how many. */
  async releaseStrandedOnce(): Promise<number> {
    const { store, clock, metrics, logger } = this.deps;
    const released = await store.releaseStrandedHeldRuns(clock.nowMs(), repairBatchMax);
    for (const { runId, jobId } of released) {
      logger.warn({ runId, jobId }, 'buffer_one run was held with no other run of its job active; released');
    }
    if (released.length > 0) metrics.reconcilerHeldReleasesTotal.inc(released.length);
    return released.length;
  }

  /** One dead man's switch pass; answers the silent jobs, the longest silent first. */
  async watchSilenceOnce(): Promise<SilentJob[]> {
    const { store, clock, metrics, logger } = this.deps;
    const nowMs = clock.nowMs();
    // Every watched job, the longest silent first: the silent ones lead, the rest feed the gauge.
    const watched = await store.findSilentJobs(null, Number.MAX_SAFE_INTEGER, silentJobsMax);
    const silent = watched.filter((entry) => entry.silentSinceMs <= nowMs);
    metrics.jobLastSuccessAgeSeconds.reset();
    for (const { job, silentSinceMs } of watched.slice(0, ageGaugeJobsMax)) {
      const sinceMs = silentSinceMs - (job.spec.max_silence_s ?? 0) * 1_000;
      metrics.jobLastSuccessAgeSeconds.set({ job: job.jobId }, Math.max(0, (nowMs - sinceMs) / 1_000));
    }
    const perTeam = new Map<string, number>();
    for (const { job } of silent) perTeam.set(job.team, (perTeam.get(job.team) ?? 0) + 1);
    metrics.jobsSilent.reset();
    for (const [team, count] of perTeam) metrics.jobsSilent.set({ team }, count);
    const silentNow = new Set(silent.map(({ job }) => job.jobId));
    for (const { job, lastSuccessAtMs, silentSinceMs } of silent) {
      if (this.silentJobIds.has(job.jobId)) continue;
      logger.warn({
        jobId: job.jobId, team: job.team, pool: job.spec.pool, key: job.spec.key, maxSilenceS: job.spec.max_silence_s,
        lastSuccessAt: lastSuccessAtMs === null ? null : new Date(lastSuccessAtMs).toISOString(),
        silentSince: new Date(silentSinceMs).toISOString(),
      }, 'job has not succeeded within its max_silence_s');
    }
    for (const jobId of this.silentJobIds) {
      if (!silentNow.has(jobId)) logger.info({ jobId }, 'job is no longer silent');
    }
    this.silentJobIds = silentNow;
    await this.announce(silent, silentNow, nowMs);
    return silent;
  }

  /** Announces each silence not announced yet, and the end of each announced one that is over. */
  private async announce(silent: readonly SilentJob[], silentNow: ReadonlySet<string>, nowMs: number): Promise<void> {
    const { alerts, store } = this.deps;
    if (alerts === undefined || alerts === null) return;
    const announced = new Map((await store.listSilenceAnnounced(silentJobsMax)).map((entry) => [entry.job.jobId, entry]));
    for (const { job, silentSinceMs, lastSuccessAtMs } of silent) {
      if (announced.get(job.jobId)?.silentSinceMs === silentSinceMs) continue;
      alerts.send(silenceAlertOf('job_silent', job, silentSinceMs, lastSuccessAtMs, nowMs),
        () => store.setSilenceAnnounced(job.jobId, silentSinceMs));
    }
    for (const { job, silentSinceMs } of announced.values()) {
      if (silentNow.has(job.jobId)) continue;
      const current = await store.getJob(null, job.jobId);
      alerts.send(silenceAlertOf('job_recovered', current ?? job, silentSinceMs, null, nowMs),
        () => store.setSilenceAnnounced(job.jobId, null));
    }
  }

  private arm(): void {
    if (this.stopped) return;
    const { clock, intervalMs, logger } = this.deps;
    this.timer = clock.setTimer(clock.nowMs() + intervalMs, async () => {
      try {
        if (this.deps.isLeader()) {
          await this.reconcileOnce();
          await this.releaseStrandedOnce();
          await this.watchSilenceOnce();
        }
      } catch (error) {
        logger.error({ err: error }, 'reconciler pass failed; the next pass retries');
      }
      this.arm();
    });
  }
}
