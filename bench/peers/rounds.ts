/**
 * Several rounds of one (workload, system) pair folded into one row. The machine's speed
 * drifts by tens of percent over minutes (the same W1 run gave BullMQ 22,276 and 35,038
 * single creates/s twenty minutes apart), so `--rounds N` runs every system once per round,
 * interleaved, and the report shows each figure's median, with every round's value in the
 * notes. Correctness counts (`better: zero`) take the worst round instead: one missed or
 * duplicated job in any round must show.
 */
import type { PeerFigure, WorkloadRun } from './results.js';

/** The middle value; for an even count, the mean of the two middle ones. */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median of nothing');
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** One row from the rounds of a pair, in the order they ran; a failed round fails the row. */
export function combineRounds(rounds: readonly WorkloadRun[]): WorkloadRun {
  const first = rounds[0];
  if (first === undefined) throw new RangeError('no rounds to combine');
  if (rounds.length === 1) return first;
  const failed = rounds.find((run) => run.error !== undefined);
  if (failed !== undefined) return { ...failed, notes: [`round ${rounds.indexOf(failed) + 1} of ${rounds.length} failed`, ...failed.notes] };
  const figures = first.figures.map((shape): PeerFigure => {
    const values = rounds.map((run) => run.figures.find((item) => item.key === shape.key)?.value ?? null);
    const known = values.filter((value): value is number => value !== null);
    let value: number | null = null;
    if (known.length === values.length) value = shape.better === 'zero' ? Math.max(...known) : Math.round(median(known) * 1_000) / 1_000;
    return { ...shape, value };
  });
  const perRound = first.figures
    .filter((shape) => shape.better !== 'zero')
    .map((shape) => `${shape.key} ${rounds.map((run) => run.figures.find((item) => item.key === shape.key)?.value ?? 'n/a').join(' / ')}`);
  return {
    ...first,
    figures,
    notes: [
      `median of ${rounds.length} rounds, interleaved with the other systems (each round's values in order: ${perRound.join('; ')})`,
      ...notesOf(rounds),
    ],
    durationMs: rounds.reduce((sum, run) => sum + run.durationMs, 0),
    rounds: rounds.length,
  };
}

/** A note every round made is said once; the others say which round made them. */
function notesOf(rounds: readonly WorkloadRun[]): string[] {
  const inEvery = (note: string): boolean => rounds.every((run) => run.notes.includes(note));
  const shared = [...new Set(rounds[0]!.notes.filter(inEvery))];
  return [...shared, ...rounds.flatMap((run, index) => run.notes.filter((note) => !inEvery(note)).map((note) => `round ${index + 1}: ${note}`))];
}
