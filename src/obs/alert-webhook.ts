/**
 * Silence alerts posted to a webhook (`tickler serve --alert-webhook URL`): a job that falls
 * silent past its `max_silence_s` is announced once, and once again when it recovers (or stops
 * being watched: paused, cancelled, done). The reconciler decides what to announce and records
 * in the store what was announced, after the receiver took it (2xx), so each announcement is
 * sent once across restarts and leader changes; a send the process did not live to record is
 * sent again, with the same `id`, which a receiver uses to drop the repeat.
 *
 * Each POST carries JSON (`SilenceAlert`) and `X-Tickler-Signature: t=<unix seconds>,v1=<hex>`,
 * the HMAC-SHA256 of `<t>.<body>` under the shared secret (Stripe's scheme): a receiver checks
 * it, and that `t` is recent, before trusting the alert. A failed send (no answer in 10 s, or
 * not 2xx) is retried on the injected clock after 1 s, doubling to at most 5 minutes, until it
 * lands or the process stops.
 */
import { createHmac } from 'node:crypto';
import type { Clock, TimerHandle } from '../clock.js';
import type { JobRecord } from '../domain/types.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';
import { alertRetryDelayMsMax, alertRetryDelayMsMin, alertSendTimeoutMs } from '../limits.js';

export type SilenceAlertKind = 'job_silent' | 'job_recovered';

export interface SilenceAlert {
  /** The same for every send of one announcement: `<kind>:<job_id>:<silent_since>`. */
  id: string;
  kind: SilenceAlertKind;
  /** When the alert was made. */
  at: string;
  job: {
    job_id: string; team: string; key: string | null; pool: string; state: string;
    owner: string | null; pager: string | null; max_silence_s: number | null; labels: Record<string, string>;
  };
  /** When the job fell silent: its last success (or change) plus max_silence_s. */
  silent_since: string;
  /** Its last success; null when it never succeeded (or, on recovery, when not known). */
  last_success_at: string | null;
}

export function silenceAlertOf(kind: SilenceAlertKind, job: JobRecord, silentSinceMs: number,
  lastSuccessAtMs: number | null, nowMs: number): SilenceAlert {
  const silentSince = new Date(silentSinceMs).toISOString();
  return {
    id: `${kind}:${job.jobId}:${silentSince}`,
    kind,
    at: new Date(nowMs).toISOString(),
    job: {
      job_id: job.jobId, team: job.team, key: job.spec.key, pool: job.spec.pool, state: job.state,
      owner: job.spec.owner ?? null, pager: job.spec.pager ?? null, max_silence_s: job.spec.max_silence_s,
      labels: job.spec.labels,
    },
    silent_since: silentSince,
    last_success_at: lastSuccessAtMs === null ? null : new Date(lastSuccessAtMs).toISOString(),
  };
}

/** `t=<seconds>,v1=<hex>` for a body sent at `timestampS`. */
export function signatureOf(secret: string, timestampS: number, body: string): string {
  const digest = createHmac('sha256', secret).update(`${timestampS}.${body}`).digest('hex');
  return `t=${timestampS},v1=${digest}`;
}

interface Pending {
  alert: SilenceAlert;
  attempts: number;
  retry: TimerHandle | null;
  onDelivered: () => Promise<void>;
}

export class AlertWebhook {
  private readonly pending = new Map<string, Pending>();
  private closed = false;

  constructor(private readonly deps: {
    url: string; secret: string; clock: Clock; logger: Logger; metrics: Metrics;
  }) {}

  /**
   * Sends the alert unless one with its id is on its way already; `onDelivered` runs once the
   * receiver took it (records the announcement).
   */
  send(alert: SilenceAlert, onDelivered: () => Promise<void>): void {
    if (this.closed || this.pending.has(alert.id)) return;
    const entry: Pending = { alert, attempts: 0, retry: null, onDelivered };
    this.pending.set(alert.id, entry);
    void this.attempt(entry);
  }

  /** Alerts not delivered yet; for tests and status. */
  pendingCount(): number {
    return this.pending.size;
  }

  close(): void {
    this.closed = true;
    for (const entry of this.pending.values()) entry.retry?.cancel();
    this.pending.clear();
  }

  private async attempt(entry: Pending): Promise<void> {
    entry.retry = null;
    entry.attempts += 1;
    const { alert } = entry;
    const body = JSON.stringify(alert);
    let failure: string | null = null;
    try {
      const response = await fetch(this.deps.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-tickler-alert-id': alert.id,
          'x-tickler-signature': signatureOf(this.deps.secret, Math.floor(Date.now() / 1_000), body),
        },
        body,
        signal: AbortSignal.timeout(alertSendTimeoutMs),
      });
      await response.arrayBuffer().catch(() => undefined);
      if (!response.ok) failure = `answered ${response.status}`;
    } catch (error) {
      failure = (error as Error).message;
    }
    if (this.closed) return;
    if (failure === null) {
      this.deps.metrics.alertsSentTotal.inc({ kind: alert.kind, outcome: 'delivered' });
      this.deps.logger.info({ alertId: alert.id, attempts: entry.attempts }, 'silence alert delivered');
      try {
        await entry.onDelivered();
      } catch (error) {
        // Not recorded: the next reconciler pass sends it again, with the same id.
        this.deps.logger.error({ err: error, alertId: alert.id }, 'silence alert delivered but not recorded');
      }
      this.pending.delete(alert.id);
      return;
    }
    this.deps.metrics.alertsSentTotal.inc({ kind: alert.kind, outcome: 'failed' });
    const delayMs = Math.min(alertRetryDelayMsMax, alertRetryDelayMsMin * 2 ** (entry.attempts - 1));
    // One line per failed attempt: attempts double their spacing, so this stays quiet.
    this.deps.logger.warn({ alertId: alert.id, attempts: entry.attempts, retryInMs: delayMs, reason: failure },
      'silence alert not delivered; retrying');
    entry.retry = this.deps.clock.setTimer(this.deps.clock.nowMs() + delayMs, () => this.attempt(entry));
  }
}
