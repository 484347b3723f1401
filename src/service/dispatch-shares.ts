/**
 * Each team's share of the runs this node leases in a lane (`tickler_dispatch_share`), over a
 * trailing minute in 10-second buckets, and the noisy neighbour: a team holding over half of a
 * lane's leases, while at least one other team is leased there too, for 10 minutes on end. It
 * is logged once when it crosses and listed (`GET /v1/ops/noisy-neighbours`) until its share
 * falls to half or below.
 */
import type { Lane } from '../domain/types.js';
import * as limits from '../limits.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';

const {
  dispatchShareBucketMs: bucketMs, dispatchShareWindowBuckets: windowBuckets, noisyNeighbourShare: noisyShare,
  noisyNeighbourForMs: noisyForMs,
} = limits;

export interface NoisyNeighbour {
  lane: Lane;
  team: string;
  /** Its share of the lane's leases over the last minute. */
  share: number;
  /** Since when it has held over half. */
  sinceMs: number;
}

export class DispatchShares {
  /** lane → bucket index → team → runs leased. */
  private readonly counts = new Map<Lane, Map<number, Map<string, number>>>();
  private readonly overSince = new Map<string, number>();
  private readonly crossed = new Map<string, NoisyNeighbour>();
  private judgedBucket = Number.NEGATIVE_INFINITY;

  constructor(private readonly metrics: Metrics, private readonly logger: Pick<Logger, 'warn'>) {}

  record(_pool: string, runs: readonly { lane?: Lane; team: string }[], nowMs: number): void {
    const bucket = Math.floor(nowMs / bucketMs);
    for (const run of runs) {
      const lane = run.lane ?? 'P1';
      let buckets = this.counts.get(lane);
      if (buckets === undefined) this.counts.set(lane, buckets = new Map());
      let teams = buckets.get(bucket);
      if (teams === undefined) buckets.set(bucket, teams = new Map());
      teams.set(run.team, (teams.get(run.team) ?? 0) + 1);
    }
    if (bucket !== this.judgedBucket) {
      this.judgedBucket = bucket;
      this.judge(bucket, nowMs);
    }
  }

  /** The teams over half of a lane for 10 minutes now. */
  noisy(nowMs: number): NoisyNeighbour[] {
    this.judge(Math.floor(nowMs / bucketMs), nowMs);
    return [...this.crossed.values()].sort((a, b) => (a.lane + a.team < b.lane + b.team ? -1 : 1));
  }

  private judge(bucket: number, nowMs: number): void {
    this.metrics.dispatchShare.reset();
    for (const [lane, buckets] of this.counts) {
      for (const old of [...buckets.keys()]) if (old <= bucket - windowBuckets) buckets.delete(old);
      const totals = new Map<string, number>();
      for (const teams of buckets.values()) for (const [team, count] of teams) totals.set(team, (totals.get(team) ?? 0) + count);
      const all = [...totals.values()].reduce((sum, count) => sum + count, 0);
      for (const [team, count] of totals) {
        const share = all === 0 ? 0 : count / all;
        this.metrics.dispatchShare.inc({ lane, team: this.metrics.teamLabel(team) }, share);
        this.judgeTeam(lane, team, share, totals.size > 1, nowMs);
      }
      for (const key of [...this.overSince.keys()]) {
        const [keyLane, team] = JSON.parse(key) as [Lane, string];
        if (keyLane === lane && !totals.has(team)) this.judgeTeam(lane, team, 0, false, nowMs);
      }
    }
  }

  private judgeTeam(lane: Lane, team: string, share: number, shared: boolean, nowMs: number): void {
    const key = JSON.stringify([lane, team]);
    if (!shared || share <= noisyShare) {
      this.overSince.delete(key);
      this.crossed.delete(key);
      return;
    }
    const sinceMs = this.overSince.get(key) ?? nowMs;
    this.overSince.set(key, sinceMs);
    const known = this.crossed.get(key);
    if (known !== undefined) {
      known.share = share;
      return;
    }
    if (nowMs - sinceMs >= noisyForMs) {
      const noisy = { lane, team, share, sinceMs };
      this.crossed.set(key, noisy);
      this.logger.warn({ lane, team, share, sinceMs }, 'noisy neighbour: a team has held over half of a lane\'s leases for 10 minutes');
    }
  }
}
