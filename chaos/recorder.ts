/**
 * Appends history events to a JSONL file, one synchronous write per event: a process killed
 * with SIGKILL loses at most the line it was writing (the checker tolerates a torn last line),
 * never a buffer of lines it believed written. Each process of a chaos run writes its own
 * file; the harness merges them.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import type { HistoryEvent } from './history.js';

/** An event as recorded: `atMs` is stamped by the recorder unless given. */
export type Recordable<E extends HistoryEvent = HistoryEvent> = E extends HistoryEvent
  ? Omit<E, 'atMs'> & { atMs?: number }
  : never;

export class HistoryRecorder {
  private fd: number | null;
  private readonly now: () => number;

  constructor(path: string, now: () => number) {
    this.fd = openSync(path, 'a');
    this.now = now;
  }

  record(event: Recordable): HistoryEvent {
    if (this.fd === null) throw new Error('history recorder is closed');
    const stamped = { ...event, atMs: event.atMs ?? this.now() } as HistoryEvent;
    writeSync(this.fd, `${JSON.stringify(stamped)}\n`);
    return stamped;
  }

  close(): void {
    if (this.fd === null) return;
    closeSync(this.fd);
    this.fd = null;
  }
}
