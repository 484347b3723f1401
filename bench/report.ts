/**
 * What a benchmark answers and how it is written down. A figure is a measured number with
 * its unit and, where docs/benchmarks.md sets one, its target; the verdict is computed here from
 * the measurement, never typed in, so a missed target cannot be reported as met.
 */
import { execFileSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';

export type Comparison = '>=' | '<=';

export interface Target {
  comparison: Comparison;
  value: number;
}

export interface Figure {
  label: string;
  /** null when the benchmark could not measure it (say why in the notes). */
  value: number | null;
  unit: string;
  target?: Target;
}

export type Verdict = 'pass' | 'miss' | 'n/a';

export interface BenchResult {
  name: string;
  title: string;
  /** The counts and settings this run used (they differ in --quick mode). */
  parameters: Record<string, string | number>;
  figures: Figure[];
  /** Plain sentences: caveats, invalid runs, profile pointers. */
  notes: string[];
}

export interface RecordedResult extends BenchResult {
  command: string;
  startedAt: string;
  wallSeconds: number;
  /** 1-minute load average at the start and the end: other work on this shared machine shows here. */
  loadAverageAtStart: number;
  loadAverageAtEnd: number;
  quick: boolean;
  /** Set when the benchmark threw; its figures are then whatever it had before. */
  error: string | null;
}

export interface MachineInfo {
  date: string;
  nproc: number;
  cpuModel: string;
  memoryGiB: number;
  freeG: string;
  node: string;
  platform: string;
}

/** Targets are judged only on full-size runs: a --quick run is too small to say anything. */
export function verdictOf(figure: Figure, quick: boolean): Verdict {
  if (figure.target === undefined || quick || figure.value === null) return 'n/a';
  const { comparison, value } = figure.target;
  const met = comparison === '>=' ? figure.value >= value : figure.value <= value;
  return met ? 'pass' : 'miss';
}

export function machineInfo(nowIso: string): MachineInfo {
  let freeG = '';
  try {
    freeG = execFileSync('free', ['-g'], { encoding: 'utf8' }).trim();
  } catch (error) {
    freeG = `free -g failed: ${(error as Error).message}`;
  }
  return {
    date: nowIso,
    nproc: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    freeG,
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
  };
}

export function formatValue(value: number | null, unit: string): string {
  if (value === null) return 'not measured';
  const magnitude = Math.abs(value);
  const digits = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : magnitude >= 1 || magnitude === 0 ? 2 : 3;
  return `${value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 })} ${unit}`;
}

function formatTarget(target: Target | undefined, unit: string): string {
  if (target === undefined) return '';
  return `${target.comparison} ${target.value.toLocaleString('en-US')} ${unit}`;
}

export function markdownOfMachine(machine: MachineInfo): string {
  return [
    `- date: ${machine.date}`,
    `- machine: ${machine.nproc} cores (${machine.cpuModel}), ${machine.memoryGiB} GiB, ${machine.platform}`,
    `- node: ${machine.node}`,
    '- `free -g`:',
    '',
    '```',
    machine.freeG,
    '```',
  ].join('\n');
}

export function markdownOfResult(result: RecordedResult): string {
  const lines = [
    `### ${result.name}: ${result.title}`,
    '',
    `- command: \`${result.command}\``,
    `- started: ${result.startedAt}, wall time ${result.wallSeconds.toFixed(1)} s${result.quick ? ' (quick mode: targets not judged)' : ''}`,
    `- 1-minute load average: ${result.loadAverageAtStart.toFixed(2)} at the start, ${result.loadAverageAtEnd.toFixed(2)} at the end`,
    `- parameters: ${Object.entries(result.parameters).map(([key, value]) => `${key}=${value}`).join(', ')}`,
    '',
    '| figure | measured | target | verdict |',
    '| --- | --- | --- | --- |',
    ...result.figures.map((figure) => `| ${figure.label} | ${formatValue(figure.value, figure.unit)} | ` +
      `${formatTarget(figure.target, figure.unit)} | ${verdictOf(figure, result.quick)} |`),
  ];
  if (result.error !== null) lines.push('', `**The benchmark failed:** ${result.error}`);
  if (result.notes.length > 0) lines.push('', ...result.notes.map((note) => `- ${note}`));
  return lines.join('\n');
}

/** One table of every figure that has a target, across benchmarks: the page's headline. */
export function markdownOfSummary(results: RecordedResult[]): string {
  const rows = results.flatMap((result) => [
    ...(result.error === null ? [] : [`| ${result.name} | the benchmark failed: ${result.error} | | |`]),
    ...result.figures.filter((figure) => figure.target !== undefined).map((figure) =>
      `| ${result.name} | ${figure.label} | ${formatValue(figure.value, figure.unit)} | ` +
      `${formatTarget(figure.target, figure.unit)} | ${verdictOf(figure, result.quick)} |`),
  ]);
  return ['| benchmark | figure | measured | target | verdict |', '| --- | --- | --- | --- | --- |', ...rows].join('\n');
}
