/**
 * `GET /v1/schedules/preview`: the next scheduled times of a cron expression strictly after
 * `from`, pre-jitter, each with its local wall time. A `gap: skip` day is left out, as the
 * job would not run then, so the list is topped up past it.
 */
import type { DstSpec } from '../domain/types.js';
import { compileSchedule, localWallTime, occurrencesAfter } from '../domain/schedule.js';
import { iso } from './job-spec.js';
import { previewTopUpRoundsCountMax } from '../limits.js';

export interface PreviewRequest {
  cron: string;
  tz: string;
  fromMs: number;
  count: number;
  dst: DstSpec;
}

export interface PreviewItem {
  scheduled_at: string;
  local: string;
}

export function previewSchedule(request: PreviewRequest): PreviewItem[] {
  const schedule = compileSchedule({ cron: request.cron, tz: request.tz }, request.dst);
  const items: PreviewItem[] = [];
  let afterMs = request.fromMs;
  for (let round = 0; round < previewTopUpRoundsCountMax && items.length < request.count; round++) {
    const wanted = request.count - items.length;
    const occurrences = occurrencesAfter(schedule, afterMs, wanted);
    for (const occurrence of occurrences) {
      if (occurrence.skippedDst) continue;
      items.push({ scheduled_at: iso(occurrence.scheduledAtMs), local: localWallTime(occurrence.scheduledAtMs, request.tz) });
    }
    const last = occurrences.at(-1);
    if (last === undefined || occurrences.length < wanted) break;
    afterMs = last.scheduledAtMs;
  }
  return items;
}
