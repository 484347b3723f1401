/**
 * Prometheus metrics, one registry per server (tests build many servers in one process).
 * Names follow the case study's vocabulary: fire lag is the platform's SLO; the stale-token
 * counter shows zombies being fenced; definitions without a next timer show silent misses.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { metricsDueWindowS, metricsTeamLabelsCountMax } from '../limits.js';

/** Fire-lag buckets in seconds: fine below 100 ms, where the targets are, coarse beyond. */
const fireLagBucketsS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600];


export class Metrics {
  readonly registry = new Registry();
  readonly fireLagSeconds = new Histogram({
    name: 'tickler_fire_lag_seconds',
    help: 'Time from a timer\'s fire_at to its dispatch commit, by lane',
    labelNames: ['lane'],
    buckets: fireLagBucketsS,
    registers: [this.registry],
  });
  readonly dispatchesTotal = new Counter({
    name: 'tickler_dispatches_total',
    help: 'Occurrences recorded at dispatch, by the status they were written with',
    labelNames: ['status'],
    registers: [this.registry],
  });
  readonly dispatchDuplicatesTotal = new Counter({
    name: 'tickler_dispatch_duplicates_total',
    help: 'Dispatches whose run_id already existed (ON CONFLICT DO NOTHING)',
    registers: [this.registry],
  });
  readonly dispatchRejectedStaleTokenTotal = new Counter({
    name: 'tickler_dispatch_rejected_stale_token_total',
    help: 'Dispatches rejected at the sink because the shard token was stale',
    registers: [this.registry],
  });
  readonly dispatchSkippedLeaseExpiredTotal = new Counter({
    name: 'tickler_dispatch_skipped_local_lease_expired_total',
    help: 'Dispatch batches a node held back because its local monotonic lease check failed',
    registers: [this.registry],
  });
  readonly timersGoneTotal = new Counter({
    name: 'tickler_dispatch_timer_gone_total',
    help: 'Wheel entries whose timer was cancelled, paused or replaced before it fired',
    registers: [this.registry],
  });
  readonly workerLeaseExpiriesTotal = new Counter({
    name: 'tickler_worker_lease_expiries_total',
    help: 'Worker leases that ran out, by what became of the run',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly attemptsTotal = new Counter({
    name: 'tickler_attempts_total',
    help: 'Completed attempts by outcome',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly staleCompletionsTotal = new Counter({
    name: 'tickler_worker_stale_token_total',
    help: 'Heartbeats and completions rejected for a stale fencing token',
    labelNames: ['call'],
    registers: [this.registry],
  });
  readonly definitionsWithoutNextTimer = new Gauge({
    name: 'tickler_definitions_without_next_timer',
    help: 'Active recurring jobs found without a pending timer at the last reconciler pass',
    registers: [this.registry],
  });
  readonly jobsSilent = new Gauge({
    name: 'tickler_jobs_silent',
    help: 'Active jobs whose last success is older than their max_silence_s (the dead man\'s switch), at the last reconciler pass',
    labelNames: ['team'] as const,
    registers: [this.registry],
  });
  readonly readyLagSeconds = new Histogram({
    name: 'tickler_ready_lag_seconds',
    help: 'From a run\'s ready time to its lease by a worker (consumption lag, apart from fire lag), by lane and team '
      + '(teams bounded as in every per-team metric, the rest as "other"); 0 for a run leased ahead',
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    labelNames: ['lane', 'team'] as const,
    registers: [this.registry],
  });
  // Capacity (src/service/lease-planner.ts) ------------------------------------------------
  readonly dispatchShare = new Gauge({
    name: 'tickler_dispatch_share',
    help: 'Each team\'s share of the runs this node leased in a lane over the last minute (teams bounded as for tickler_ready_lag_seconds)',
    labelNames: ['lane', 'team'] as const,
    registers: [this.registry],
  });
  /** Read at each scrape from the store, through the lease planner. */
  resourceUsageSource: (() => Promise<{ name: string; inUse: number }[]>) | null = null;
  readonly resourceInUse = new Gauge({
    name: 'tickler_resource_in_use',
    help: 'Slots held of each capped resource (runs running that hold one), across every node',
    labelNames: ['resource'] as const,
    registers: [this.registry],
    collect: async () => {
      const source = this.resourceUsageSource;
      if (source === null) return;
      this.resourceInUse.reset();
      for (const usage of await source()) this.resourceInUse.set({ resource: usage.name }, usage.inUse);
    },
  });
  readonly jobLastSuccessAgeSeconds = new Gauge({
    name: 'tickler_job_last_success_age_seconds',
    help: 'Seconds since the last success of each active job with max_silence_s (or since its create, change or resume, when later); '
      + 'the longest silent 1,000 jobs, at the last reconciler pass',
    labelNames: ['job'] as const,
    registers: [this.registry],
  });
  readonly alertsSentTotal = new Counter({
    name: 'tickler_alerts_sent_total',
    help: 'Silence alerts posted to the alert webhook, by kind and outcome (delivered, failed: retried)',
    labelNames: ['kind', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly reconcilerRepairsTotal = new Counter({
    name: 'tickler_reconciler_repairs_total',
    help: 'Pending timers written back by the reconciler',
    registers: [this.registry],
  });

  readonly reconcilerHeldReleasesTotal = new Counter({
    name: 'tickler_reconciler_held_releases_total',
    help: 'buffer_one runs released by the reconciler: held with no other active run of their job',
    registers: [this.registry],
  });
  readonly shardsOwned = new Gauge({
    name: 'tickler_shards_owned',
    help: 'Shards this node holds a lease on',
    registers: [this.registry],
  });
  readonly shardOwnershipChangesTotal = new Counter({
    name: 'tickler_shard_ownership_changes_total',
    help: 'Shards gained or lost by this node',
    labelNames: ['change'],
    registers: [this.registry],
  });
  readonly wheelTimers = new Gauge({
    name: 'tickler_wheel_timers',
    help: 'Timers held in this node\'s timing wheel',
    registers: [this.registry],
  });
  readonly jobsCreatedTotal = new Counter({
    name: 'tickler_jobs_created_total',
    help: 'Jobs created, by team (chargeback: timers created)',
    labelNames: ['team'] as const,
    registers: [this.registry],
  });
  readonly runsDispatchedTotal = new Counter({
    name: 'tickler_runs_dispatched_total',
    help: 'Runs made ready for workers (by a scheduler\'s dispatch or by a create due now), by team (chargeback)',
    labelNames: ['team'] as const,
    registers: [this.registry],
  });
  readonly jobsCancelledTotal = new Counter({
    name: 'tickler_jobs_cancelled_total',
    help: 'Jobs cancelled, by team (chargeback: a cancelled timer still cost its write)',
    labelNames: ['team'] as const,
    registers: [this.registry],
  });
  readonly rateLimitedTotal = new Counter({
    name: 'tickler_rate_limited_total',
    help: 'Create requests refused 429 by a team\'s quota, by team and the limit (create_per_s, pending_max)',
    labelNames: ['team', 'limit'] as const,
    registers: [this.registry],
  });
  readonly runsFailedTotal = new Counter({
    name: 'tickler_runs_failed_total',
    help: 'Attempts completed failed or failed_permanent, by team (with tickler_runs_dispatched_total: the team\'s failure rate)',
    labelNames: ['team'] as const,
    registers: [this.registry],
  });
  readonly runsAttemptsGt1Total = new Counter({
    name: 'tickler_runs_attempts_gt_1_total',
    help: 'Attempts after a run\'s first (a failure retried), by team: duplicate pressure on the team\'s downstreams',
    labelNames: ['team'] as const,
    registers: [this.registry],
  });
  /** What `tickler_due_per_second` reads at each scrape: a scheduler node sets it (`setDueSource`). */
  private dueSource: (() => number) | null = null;
  readonly duePerSecond = new Gauge({
    name: 'tickler_due_per_second',
    help: `Timers this node holds that come due in the next ${metricsDueWindowS} s, per second: a herd seen before it lands (watch the max)`,
    registers: [this.registry],
    collect: () => {
      this.duePerSecond.set(this.dueSource === null ? 0 : this.dueSource() / metricsDueWindowS);
    },
  });
  /** Teams given a label of their own so far; later ones share `other` (labels stay bounded). */
  private readonly labelledTeams = new Set<string>();
  readonly httpErrorsTotal = new Counter({
    name: 'tickler_http_errors_total',
    help: 'Error answers by code',
    labelNames: ['code'],
    registers: [this.registry],
  });

  /**
   * The `team` label of a per-team metric: the team itself for the first `metricsTeamLabelsCountMax` teams
   * seen, `other` after, so a flood of team names (an admin creating for ever-new teams) cannot
   * grow the series without bound, as `tickler_job_last_success_age_seconds` keeps to 1,000 jobs.
   */
  teamLabel(team: string): string {
    if (this.labelledTeams.has(team)) return team;
    if (this.labelledTeams.size >= metricsTeamLabelsCountMax) return 'other';
    this.labelledTeams.add(team);
    return team;
  }

  observeReadyLag(run: { lane?: string; team: string; readyAtMs: number }, nowMs: number): void {
    this.readyLagSeconds.observe({ lane: run.lane ?? 'unknown', team: this.teamLabel(run.team) },
      Math.max(0, nowMs - run.readyAtMs) / 1_000);
  }

  /** Sets what `tickler_due_per_second` counts: timers due in the next `metricsDueWindowS` seconds. */
  setDueSource(count: ((windowMs: number) => number) | null): void {
    this.dueSource = count === null ? null : () => count(metricsDueWindowS * 1000);
  }

  constructor(options: { defaultMetrics?: boolean } = {}) {
    // Unprefixed: stock Node.js dashboards look for process_cpu_seconds_total and nodejs_*.
    if (options.defaultMetrics ?? false) collectDefaultMetrics({ register: this.registry });
  }
}
