/**
 * A small seeded pseudo-random generator (sfc32, seeded through splitmix32) so that a chaos
 * run's workload and faults follow from its seed alone. Not for anything secret.
 */

export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let state = seed >>> 0;
    const next = (): number => {
      state = (state + 0x9e3779b9) >>> 0;
      let mixed = state;
      mixed = Math.imul(mixed ^ (mixed >>> 16), 0x21f0aaad);
      mixed = Math.imul(mixed ^ (mixed >>> 15), 0x735a2d97);
      return (mixed ^ (mixed >>> 15)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let round = 0; round < 12; round++) this.nextUint32();
  }

  nextUint32(): number {
    const sum = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + sum) >>> 0;
    return sum;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4_294_967_296;
  }

  /** Uniform in [low, high). */
  between(low: number, high: number): number {
    return low + (high - low) * this.next();
  }

  /** A uniform integer in [low, high], both included. */
  integer(low: number, high: number): number {
    return low + Math.floor(this.next() * (high - low + 1));
  }

  chance(probability: number): boolean {
    return this.next() < probability;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('cannot pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }

  /** Picks by weight; weights need not sum to one. */
  weighted<T>(choices: readonly (readonly [T, number])[]): T {
    const total = choices.reduce((sum, [, weight]) => sum + weight, 0);
    if (!(total > 0)) throw new RangeError('weights must sum to more than zero');
    let point = this.next() * total;
    for (const [choice, weight] of choices) {
      point -= weight;
      if (point < 0) return choice;
    }
    return (choices[choices.length - 1] as readonly [T, number])[0];
  }

  /** A child generator for an independent stream (workload, faults) of the same seed. */
  fork(label: string): Prng {
    let hash = this.nextUint32();
    for (let index = 0; index < label.length; index++) hash = Math.imul(hash ^ label.charCodeAt(index), 0x01000193) >>> 0;
    return new Prng(hash);
  }
}
