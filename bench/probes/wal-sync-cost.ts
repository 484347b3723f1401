/**
 * What an fdatasync costs on this machine's disk after appending to a file against after
 * overwriting a file already written to that length: the two ways SQLite's WAL is synced (a
 * fresh WAL only grows; one that has started over overwrites its old frames). Each round
 * writes `--frames` WAL-frame-sized blocks (8 KiB page + 24 B header) and syncs; latencies are
 * of the sync alone. Not a store benchmark: a probe for whether preallocating the WAL would pay.
 *
 *   node --import tsx bench/probes/wal-sync-cost.ts [--rounds 400] [--frames 24] [--dir DIR]
 */
import { closeSync, fdatasyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '400' }, frames: { type: 'string', default: '24' }, dir: { type: 'string' } },
});
const rounds = Number(values.rounds);
const frames = Number(values.frames);
const frame = Buffer.alloc(8_192 + 24, 7);
const directory = mkdtempSync(join(values.dir ?? tmpdir(), 'tickler-wal-sync-'));

function percentile(sorted: readonly number[], fraction: number): string {
  return sorted[Math.floor(fraction * (sorted.length - 1))]!.toFixed(3);
}

function measure(mode: 'append' | 'overwrite'): void {
  const path = join(directory, `${mode}.bin`);
  const fd = openSync(path, 'w+');
  try {
    if (mode === 'overwrite') {
      const zeros = Buffer.alloc(1 << 20);
      for (let written = 0; written < rounds * frames * frame.length; written += zeros.length) writeSync(fd, zeros);
      fdatasyncSync(fd);
    }
    const latenciesMs: number[] = [];
    let position = 0;
    for (let round = 0; round < rounds; round++) {
      for (let index = 0; index < frames; index++) {
        writeSync(fd, frame, 0, frame.length, position);
        position += frame.length;
      }
      const startedNs = process.hrtime.bigint();
      fdatasyncSync(fd);
      latenciesMs.push(Number(process.hrtime.bigint() - startedNs) / 1e6);
    }
    latenciesMs.sort((left, right) => left - right);
    console.log(`${mode.padEnd(9)} fdatasync after ${frames} frames: p50 ${percentile(latenciesMs, 0.5)} ms, ` +
      `p90 ${percentile(latenciesMs, 0.9)} ms, p99 ${percentile(latenciesMs, 0.99)} ms (${rounds} syncs)`);
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}

try {
  for (let pass = 0; pass < 2; pass++) {
    measure('append');
    measure('overwrite');
  }
} finally {
  rmSync(directory, { recursive: true, force: true });
}
