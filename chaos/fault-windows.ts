/**
 * Fault windows of a chaos history and the lag statistics kept per window kind. A fault's
 * effect outlasts the fault itself (a killed owner's shards wait for its lease to expire
 * after the kill; a restarted database is reconnected to afterwards), so a window counts from
 * its start until `settleMs` after its end, and an occurrence is inside it when the window
 * overlaps the time the occurrence should have been dispatched in: `[fire, fire + tight bound]`.
 */
import type { FaultKind, HistoryEvent } from './history.js';

export interface FaultWindow {
  faultId: string;
  kind: FaultKind;
  target: string;
  startMs: number;
  /** The fault's end; a fault never ended lasts until the end of the history. */
  endMs: number;
}

export function faultWindowsOf(history: readonly HistoryEvent[], historyEndMs: number): FaultWindow[] {
  const open = new Map<string, FaultWindow>();
  const windows: FaultWindow[] = [];
  for (const event of history) {
    if (event.type === 'fault_start') {
      const window = { faultId: event.faultId, kind: event.kind, target: event.target, startMs: event.atMs,
        endMs: historyEndMs };
      open.set(event.faultId, window);
      windows.push(window);
    } else if (event.type === 'fault_end') {
      const window = open.get(event.faultId);
      if (window !== undefined) {
        window.endMs = event.atMs;
        open.delete(event.faultId);
      }
    }
  }
  return windows;
}

export class FaultTimeline {
  private readonly windows: readonly FaultWindow[];
  private readonly settleMs: number;
  private readonly lagBoundMs: number;

  constructor(windows: readonly FaultWindow[], options: { settleMs: number; lagBoundMs: number }) {
    this.windows = windows;
    this.settleMs = options.settleMs;
    this.lagBoundMs = options.lagBoundMs;
  }

  /**
   * The faults whose effect overlaps the dispatch of an occurrence due at `fireAtMs`: those
   * under way within the tight bound of the fire, and, since faults compound, any fault that
   * began while one of those was still in effect (a database restart during the takeover of a
   * killed node's shards delays the takeover by the whole outage).
   */
  private windowsAt(fireAtMs: number): FaultWindow[] {
    const affecting = this.windows.filter((window) =>
      window.startMs <= fireAtMs + this.lagBoundMs && fireAtMs <= window.endMs + this.settleMs);
    if (affecting.length === 0) return affecting;
    let effectEndMs = Math.max(...affecting.map((window) => window.endMs + this.settleMs));
    for (let grew = true; grew;) {
      grew = false;
      for (const window of this.windows) {
        if (affecting.includes(window) || window.startMs > effectEndMs || window.endMs + this.settleMs < fireAtMs) continue;
        affecting.push(window);
        effectEndMs = Math.max(effectEndMs, window.endMs + this.settleMs);
        grew = true;
      }
    }
    return affecting;
  }

  /** The kinds of the faults whose effect overlaps the dispatch of an occurrence due at `fireAtMs`. */
  kindsAt(fireAtMs: number): FaultKind[] {
    return [...new Set(this.windowsAt(fireAtMs).map((window) => window.kind))].sort();
  }

  /**
   * When the database came back, for an occurrence whose dispatch an outage overlapped (due
   * while it was down, or just before, when the restart cut its dispatch short, or while
   * another fault that the outage compounded was still in effect): nothing can fire during a
   * database outage, so the loose bound counts from its end.
   */
  outageEndMs(fireAtMs: number): number | null {
    let endMs: number | null = null;
    for (const window of this.windowsAt(fireAtMs)) {
      if (window.kind === 'postgres_restart' && fireAtMs <= window.endMs) endMs = Math.max(endMs ?? window.endMs, window.endMs);
    }
    return endMs;
  }

  get count(): number {
    return this.windows.length;
  }

  countsByKind(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const window of this.windows) counts[window.kind] = (counts[window.kind] ?? 0) + 1;
    return counts;
  }
}

export interface LagStats {
  count: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

/** Nearest-rank quantiles: exact for the small samples a chaos run produces. */
export function lagStatsOf(lagsMs: readonly number[]): LagStats {
  if (lagsMs.length === 0) return { count: 0, p50Ms: null, p99Ms: null, maxMs: null };
  const sorted = [...lagsMs].sort((left, right) => left - right);
  const rank = (quantile: number): number => sorted[Math.max(0, Math.ceil(quantile * sorted.length) - 1)] as number;
  return { count: sorted.length, p50Ms: rank(0.5), p99Ms: rank(0.99), maxMs: sorted[sorted.length - 1] as number };
}
