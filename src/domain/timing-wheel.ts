/**
 * A hierarchical timing wheel (Varghese & Lauck; the case study's Appendix A.2) holding the
 * timers a scheduler node has loaded for its shards. Insert, remove and fire are O(1) per
 * entry; finding the next deadline scans at most the slots of one level.
 *
 * Three levels of 256, 64 and 64 slots over a `tickMs` resolution: with 10 ms ticks the
 * first level spans 2.56 s, the second 2.7 min and the third 2.9 h, which covers the 5 min
 * load horizon with room to spare. Entries beyond the last level wait in an overflow list
 * that is re-examined when the third level wraps.
 *
 * Pure: the caller passes `nowMs`; nothing here reads a clock.
 */
import assert from 'node:assert/strict';

const levelBits = [8, 6, 6] as const;
const levelSlots = levelBits.map((bits) => 1 << bits);
/** Ticks spanned by one slot of each level. */
const levelSlotTicks = [1, 1 << 8, 1 << 14] as const;
/** Ticks spanned by a whole level; beyond the last one an entry overflows. */
const levelSpanTicks = [1 << 8, 1 << 14, 1 << 20] as const;

interface WheelEntry<T> {
  key: string;
  fireAtMs: number;
  tick: number;
  item: T;
  /** Where the entry sits, so remove() is O(1). */
  bucket: Map<string, WheelEntry<T>>;
}

export class TimingWheel<T> {
  private readonly tickMs: number;
  private currentTick: number;
  private readonly levels: Map<string, WheelEntry<T>>[][];
  private readonly overflow = new Map<string, WheelEntry<T>>();
  /** Entries whose tick had passed when inserted: they fire at the next advance. */
  private readonly due = new Map<string, WheelEntry<T>>();
  private readonly entries = new Map<string, WheelEntry<T>>();

  constructor(options: { tickMs: number; startMs: number }) {
    assert.ok(Number.isInteger(options.tickMs) && options.tickMs > 0, 'tickMs is a positive integer');
    this.tickMs = options.tickMs;
    this.currentTick = Math.floor(options.startMs / options.tickMs);
    this.levels = levelSlots.map((slots) => Array.from({ length: slots }, () => new Map<string, WheelEntry<T>>()));
  }

  get size(): number {
    return this.entries.size;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Adds or replaces the entry under `key`. */
  insert(key: string, fireAtMs: number, item: T): void {
    this.remove(key);
    const tick = Math.floor(fireAtMs / this.tickMs);
    const entry: WheelEntry<T> = { key, fireAtMs, tick, item, bucket: this.due };
    this.entries.set(key, entry);
    this.place(entry);
  }

  remove(key: string): boolean {
    const entry = this.entries.get(key);
    if (entry === undefined) return false;
    entry.bucket.delete(key);
    this.entries.delete(key);
    return true;
  }

  /** Drops every entry (on loss of ownership: the new owner reloads from the store). */
  clear(): void {
    for (const level of this.levels) for (const slot of level) slot.clear();
    this.overflow.clear();
    this.due.clear();
    this.entries.clear();
  }

  /** Removes every entry matching `predicate` (a shard given up), answering how many. */
  removeWhere(predicate: (item: T) => boolean): number {
    let removed = 0;
    for (const entry of [...this.entries.values()]) {
      if (predicate(entry.item)) {
        this.remove(entry.key);
        removed++;
      }
    }
    return removed;
  }

  /**
   * Moves the wheel to `nowMs` and answers every entry with `fireAtMs <= nowMs`, ordered by
   * fire time. An empty wheel jumps straight to `nowMs`, so a long virtual-clock advance does
   * not walk millions of empty ticks.
   */
  advance(nowMs: number): T[] {
    const fired: WheelEntry<T>[] = [];
    const targetTick = Math.floor(nowMs / this.tickMs);
    this.takeDue(fired, nowMs);
    while (this.currentTick < targetTick) {
      if (this.entries.size === 0) {
        this.currentTick = targetTick;
        break;
      }
      this.currentTick++;
      this.cascade();
      this.takeDue(fired, nowMs);
      this.takeSlot(fired, nowMs);
    }
    this.takeSlot(fired, nowMs);
    fired.sort((a, b) => a.fireAtMs - b.fireAtMs);
    return fired.map((entry) => entry.item);
  }

  /** The earliest `fireAtMs` held, or null when empty. */
  nextDueMs(): number | null {
    if (this.entries.size === 0) return null;
    let earliest = Infinity;
    for (const entry of this.due.values()) earliest = Math.min(earliest, entry.fireAtMs);
    // Within one level, slots lie in time order from the current position, so the first
    // non-empty one holds that level's earliest entries. Levels overlap in time (an entry
    // placed high long ago can be nearer than one placed low just now), so every level is
    // asked. For the upper levels the slot at the current position holds the entries one
    // full turn ahead, so it is looked at last. A slot that begins after the earliest entry
    // found so far is not read: with a herd wheeled, upper slots hold tens of thousands.
    this.forEachSlotFrom((slot) => {
      if (slot.size === 0) return 'next';
      for (const entry of slot.values()) earliest = Math.min(earliest, entry.fireAtMs);
      return 'level done';
    }, () => earliest);
    for (const entry of this.overflow.values()) earliest = Math.min(earliest, entry.fireAtMs);
    return earliest === Infinity ? null : earliest;
  }

  /**
   * The latest `fireAtMs` held that is at most `limitMs`, or null when none is. A scheduler
   * that wakes then instead of at the earliest entry fires everything up to there in one
   * dispatch, and a lone entry still at its own millisecond.
   */
  lastDueBy(limitMs: number): number | null {
    let latest = -Infinity;
    this.forEachDueBy(limitMs, (entry) => {
      if (entry.fireAtMs > latest) latest = entry.fireAtMs;
    });
    return latest === -Infinity ? null : latest;
  }

  /**
   * How many entries held are due by `limitMs` and pass `counted` (all, without it): read only,
   * walking the slots up to `limitMs` (the entries of the next seconds, not the whole wheel).
   */
  countDueBy(limitMs: number, counted: (item: T) => boolean = () => true): number {
    let count = 0;
    this.forEachDueBy(limitMs, (entry) => {
      if (counted(entry.item)) count++;
    });
    return count;
  }

  /** Visits every entry with `fireAtMs <= limitMs`: the due ones, the slots up to the limit, the overflow. */
  private forEachDueBy(limitMs: number, visit: (entry: WheelEntry<T>) => void): void {
    const take = (bucket: Map<string, WheelEntry<T>>): void => {
      for (const entry of bucket.values()) if (entry.fireAtMs <= limitMs) visit(entry);
    };
    take(this.due);
    this.forEachSlotFrom((slot) => {
      take(slot);
      return 'next';
    }, () => limitMs);
    take(this.overflow);
  }

  /**
   * Visits each level's slots in time order from the current position, stopping a level at
   * the first slot that begins after `untilMs()`, or when `visit` says the level is done.
   */
  private forEachSlotFrom(visit: (slot: Map<string, WheelEntry<T>>) => 'next' | 'level done', untilMs: () => number): void {
    for (let level = 0; level < this.levels.length; level++) {
      const slots = this.levels[level]!;
      const slotTicks = levelSlotTicks[level]!;
      const position = Math.floor(this.currentTick / slotTicks);
      const firstOffset = level === 0 ? 0 : 1;
      for (let offset = firstOffset; offset < slots.length + firstOffset; offset++) {
        if ((position + offset) * slotTicks * this.tickMs > untilMs()) break;
        if (visit(slots[(position + offset) & (slots.length - 1)]!) === 'level done') break;
      }
    }
  }

  private place(entry: WheelEntry<T>): void {
    const delta = entry.tick - this.currentTick;
    let bucket: Map<string, WheelEntry<T>>;
    if (delta <= 0) {
      bucket = this.due;
    } else if (delta < levelSpanTicks[0]) {
      bucket = this.levels[0]![entry.tick & (levelSlots[0]! - 1)]!;
    } else if (delta < levelSpanTicks[1]) {
      bucket = this.levels[1]![(entry.tick >> levelBits[0]) & (levelSlots[1]! - 1)]!;
    } else if (delta < levelSpanTicks[2]) {
      bucket = this.levels[2]![(entry.tick >> (levelBits[0] + levelBits[1])) & (levelSlots[2]! - 1)]!;
    } else {
      bucket = this.overflow;
    }
    entry.bucket = bucket;
    bucket.set(entry.key, entry);
  }

  /** On a level boundary, re-places the entries of the next slot of the level above. */
  private cascade(): void {
    if ((this.currentTick & (levelSpanTicks[0] - 1)) !== 0) return;
    if ((this.currentTick & (levelSpanTicks[1] - 1)) === 0) {
      if ((this.currentTick & (levelSpanTicks[2] - 1)) === 0) this.replaceAll(this.overflow);
      this.replaceAll(this.levels[2]![(this.currentTick >> (levelBits[0] + levelBits[1])) & (levelSlots[2]! - 1)]!);
    }
    this.replaceAll(this.levels[1]![(this.currentTick >> levelBits[0]) & (levelSlots[1]! - 1)]!);
  }

  private replaceAll(bucket: Map<string, WheelEntry<T>>): void {
    if (bucket.size === 0) return;
    const moving = [...bucket.values()];
    bucket.clear();
    for (const entry of moving) this.place(entry);
  }

  /**
   * Fires the current tick's slot. An entry of the current tick whose exact millisecond has
   * not come yet moves to `due`, so it is not left behind when the wheel turns.
   */
  private takeSlot(fired: WheelEntry<T>[], nowMs: number): void {
    const slot = this.levels[0]![this.currentTick & (levelSlots[0]! - 1)]!;
    for (const entry of [...slot.values()]) {
      if (entry.tick > this.currentTick) continue;
      if (entry.fireAtMs <= nowMs) {
        this.take(entry, fired);
      } else {
        slot.delete(entry.key);
        entry.bucket = this.due;
        this.due.set(entry.key, entry);
      }
    }
  }

  private takeDue(fired: WheelEntry<T>[], nowMs: number): void {
    for (const entry of this.due.values()) if (entry.fireAtMs <= nowMs) this.take(entry, fired);
  }

  private take(entry: WheelEntry<T>, fired: WheelEntry<T>[]): void {
    entry.bucket.delete(entry.key);
    this.entries.delete(entry.key);
    fired.push(entry);
  }
}
