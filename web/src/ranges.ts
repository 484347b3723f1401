/** Time windows the pages offer. */
export interface Range {
  sinceMs: number;
  untilMs: number;
}

export const presets = [
  { id: 'night', label: 'Last night (18:00–09:00)' },
  { id: '24h', label: 'Last 24 hours' },
  { id: '3d', label: 'Last 3 days' },
  { id: '7d', label: 'Last 7 days' },
  { id: '30d', label: 'Last 30 days' },
] as const;

export type PresetId = (typeof presets)[number]['id'];

const hourMs = 3_600_000;

/** "Last night" is the browser's last 18:00 to 09:00 that has begun. */
export function rangeOf(preset: PresetId, nowMs: number): Range {
  if (preset === 'night') {
    const end = new Date(nowMs);
    end.setHours(9, 0, 0, 0);
    if (end.getTime() > nowMs + 15 * hourMs) end.setDate(end.getDate() - 1);
    const start = new Date(end);
    start.setDate(start.getDate() - 1);
    start.setHours(18, 0, 0, 0);
    return { sinceMs: start.getTime(), untilMs: Math.min(end.getTime(), nowMs) > start.getTime() ? end.getTime() : nowMs };
  }
  const days = { '24h': 1, '3d': 3, '7d': 7, '30d': 30 }[preset];
  return { sinceMs: nowMs - days * 24 * hourMs, untilMs: nowMs };
}

/** `<input type="datetime-local">` text for an instant, and back. */
export function toInput(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function fromInput(text: string): number | null {
  const ms = new Date(text).getTime();
  return Number.isNaN(ms) ? null : ms;
}
