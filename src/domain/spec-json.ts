/**
 * The JSON text of a job spec, made once per spec object. A create writes it to the jobs
 * table and echoes it in the answer; a read parses it from the row and may answer it again.
 * Doing `JSON.stringify` of the spec (payload included) once per job instead of twice, and
 * never for a spec read back from its row, was measurable on the create path (a batch of
 * 1,000 jobs is echoed back whole).
 *
 * Specs are treated as immutable values: a change builds a new spec object (see
 * `specFromPatch`), so a text remembered for an object never goes stale.
 */
import type { JobSpec } from './types.js';

const texts = new WeakMap<JobSpec, string>();

export function specJsonOf(spec: JobSpec): string {
  let text = texts.get(spec);
  if (text === undefined) {
    text = JSON.stringify(spec);
    texts.set(spec, text);
  }
  return text;
}

/**
 * The text for a write that will not need it again (a create answered with ids): the text
 * remembered for the spec if there is one, else made and not remembered. Remembering costs
 * more than it saves there: a WeakMap entry is ~1 us a spec with the GC work it brings, against
 * ~1.6 us for the JSON.stringify it would save (200,000 specs, four rounds); the embedded
 * store's create measured 11.0-11.5 against 11.4-17.5 us of CPU a job without it
 * (bench/probes/sqlite-store-cost.ts, alternated). A create that answers whole jobs remembers the
 * text first (`JobService.prepareCreates`), so its answer does not make it again.
 */
export function specJsonForWrite(spec: JobSpec): string {
  return texts.get(spec) ?? JSON.stringify(spec);
}

/** Parses a stored spec and remembers its text, which `JSON.stringify` of it reproduces. */
export function specFromJson(text: string): JobSpec {
  const spec = JSON.parse(text) as JobSpec;
  texts.set(spec, text);
  return spec;
}
