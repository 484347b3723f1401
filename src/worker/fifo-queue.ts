/**
 * First in, first out, with O(1) `shift`: `Array.prototype.shift` moves every element, and a
 * herd's 50,000 released holds wait in one at once (50,000 shifts measured ~100 ms on Node 20).
 */
export class FifoQueue<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  /** The oldest item; call only when `length > 0`. */
  shift(): T {
    const item = this.items[this.head]!;
    this.head++;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head >= 1_024 && this.head * 2 >= this.items.length) {
      // Compacted once the consumed prefix is both long and at least half the array.
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}
