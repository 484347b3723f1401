/**
 * One SVG chart per workload, written by hand (no chart dependency): a panel per kind of
 * figure (lag, time, rate, memory), a row per system, a bar per figure. Lag and time panels
 * use a log scale, because the systems differ by orders of magnitude and a linear axis would
 * flatten the fast ones to nothing; every bar carries its value as text, so nothing is read
 * off the axis. The footer names the date, the machine and the command, as STYLE.md §16 asks.
 */
import type { PeerFigure, WorkloadRun } from './results.js';

const width = 860;
const labelWidth = 150;
const valueTextWidth = 120;
const barAreaWidth = width - labelWidth - valueTextWidth - 20;
const barHeight = 14;
const barGap = 3;
const systemGap = 10;
const panelHeaderHeight = 34;
const palette = ['#9ecae1', '#4292c6', '#08306b', '#fd8d3c'];

const panelTitles: Record<NonNullable<PeerFigure['chart']>, string> = {
  lag: 'fire lag: handler start − due (log scale, lower is better)',
  time: 'time (log scale, lower is better)',
  rate: 'rate (linear, higher is better)',
  memory: 'memory (linear, lower is better)',
};

export interface ChartHeader {
  title: string;
  footer: string;
}

export function renderWorkloadChart(header: ChartHeader, runs: readonly WorkloadRun[]): string {
  const parts: string[] = [];
  let y = 30;
  parts.push(text(10, 20, header.title, { size: 16, weight: 'bold' }));
  for (const kind of ['lag', 'time', 'rate', 'memory'] as const) {
    const keys = chartKeys(runs, kind);
    if (keys.length === 0) continue;
    y += 10;
    parts.push(text(10, y + 16, panelTitles[kind], { size: 13, weight: 'bold' }));
    y += panelHeaderHeight;
    const values = runs.flatMap((run) => keys.map((key) => valueOf(run, key))).filter((value): value is number => value !== null && value > 0);
    const scale = kind === 'lag' || kind === 'time' ? logScale(values) : linearScale(values);
    keys.forEach((key, index) => {
      const label = runs.flatMap((run) => run.figures).find((item) => item.key === key)!.label;
      parts.push(`<rect x="${labelWidth + index * 150}" y="${y - 10}" width="10" height="10" fill="${palette[index % palette.length]}"/>`);
      parts.push(text(labelWidth + index * 150 + 14, y, label, { size: 11 }));
    });
    y += 10;
    for (const run of runs) {
      parts.push(text(10, y + barHeight, run.system, { size: 12 }));
      keys.forEach((key, index) => {
        const item = run.figures.find((candidate) => candidate.key === key);
        const value = item?.value ?? null;
        const barY = y + index * (barHeight + barGap);
        const barWidth = value === null || value <= 0 ? 0 : Math.max(1, scale(value) * barAreaWidth);
        parts.push(`<rect x="${labelWidth}" y="${barY}" width="${barWidth.toFixed(1)}" height="${barHeight}" fill="${palette[index % palette.length]}"/>`);
        const shown = value === null ? 'n/a' : `${formatValue(value)} ${item?.unit ?? ''}`;
        parts.push(text(labelWidth + barWidth + 4, barY + barHeight - 3, shown, { size: 11 }));
      });
      y += keys.length * (barHeight + barGap) + systemGap;
    }
  }
  y += 10;
  parts.push(text(10, y + 12, header.footer, { size: 10, fill: '#555' }));
  y += 20;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}" font-family="sans-serif">`,
    `<rect width="${width}" height="${y}" fill="#fff"/>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

function chartKeys(runs: readonly WorkloadRun[], kind: NonNullable<PeerFigure['chart']>): string[] {
  const keys: string[] = [];
  for (const run of runs) {
    for (const item of run.figures) if (item.chart === kind && !keys.includes(item.key)) keys.push(item.key);
  }
  return keys;
}

function valueOf(run: WorkloadRun, key: string): number | null {
  return run.figures.find((item) => item.key === key)?.value ?? null;
}

/** Maps a positive value to 0..1 on a log axis spanning the decades the values cover. */
function logScale(values: number[]): (value: number) => number {
  if (values.length === 0) return () => 0;
  const lowDecade = Math.floor(Math.log10(Math.min(...values))) - 0.3;
  const highDecade = Math.log10(Math.max(...values));
  const span = Math.max(highDecade - lowDecade, 1);
  return (value) => Math.min(1, Math.max(0, (Math.log10(value) - lowDecade) / span));
}

function linearScale(values: number[]): (value: number) => number {
  const max = Math.max(...values, Number.MIN_VALUE);
  return (value) => Math.min(1, Math.max(0, value / max));
}

export function formatValue(value: number): string {
  if (Number.isInteger(value) || Math.abs(value) >= 100) return Math.round(value).toLocaleString('en-US');
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

function text(x: number, y: number, content: string, style: { size: number; weight?: string; fill?: string }): string {
  const weight = style.weight === undefined ? '' : ` font-weight="${style.weight}"`;
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" font-size="${style.size}"${weight} fill="${style.fill ?? '#111'}">${escapeXml(content)}</text>`;
}

function escapeXml(content: string): string {
  return content.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
