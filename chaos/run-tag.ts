/**
 * Telling this run's nodes from any other process. Every node of a chaos run is started with
 * `TICKLER_TEST_RUN` set to the run's tag and names it on every answer (src/server.ts); every
 * client of the run (driver, workers, the sampler, the ledger dump) reads its answers through
 * `checkingRunTag`, which refuses an answer without the tag — another run's node that took
 * over a port, or any other process there — records it, and throws, so that nothing another
 * process said enters this run's history as if this run's nodes had said it. The history
 * checker names such answers as the cause of a failed run.
 */
import type { HistoryRecorder } from './recorder.js';

/** The header src/server.ts names the run in (its `testRunHeader`; not imported, so a worker need not load the server; test/chaos/harness.test.ts holds them equal against a real node). */
export const testRunHeader = 'tickler-test-run';

export interface ForeignAnswer {
  url: string;
  /** The tag the answer carried; null when it carried none. */
  tag: string | null;
}

export class ForeignAnswerError extends Error {
  constructor(answer: ForeignAnswer, expected: string) {
    super(`${answer.url} was answered by a process outside this run (${answer.tag === null ? 'no run tag'
      : `run tag ${answer.tag}`}; this run is ${expected})`);
    this.name = 'ForeignAnswerError';
  }
}

/** A `fetch` that lets through only answers carrying `expected` as their run tag. */
export function checkingRunTag(expected: string, onForeign: (answer: ForeignAnswer) => void,
  inner: typeof fetch = globalThis.fetch): typeof fetch {
  return async (input, init) => {
    const response = await inner(input, init);
    const tag = response.headers.get(testRunHeader);
    if (tag === expected) return response;
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const answer = { url, tag };
    onForeign(answer);
    await response.body?.cancel().catch(() => undefined);
    throw new ForeignAnswerError(answer, expected);
  };
}

/** A client of the run's `fetch`: answers only from this run's nodes; any other is recorded as `foreign_answer` by `client`. */
export function runFetch(runTag: string, recorder: HistoryRecorder, client: string, inner?: typeof fetch): typeof fetch {
  return checkingRunTag(runTag, (answer) => {
    recorder.record({ type: 'foreign_answer', client, url: answer.url, tag: answer.tag, expected: runTag });
  }, inner);
}
