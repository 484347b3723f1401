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

/** Parses a stored spec and remembers its text, which `JSON.stringify` of it reproduces. */
export function specFromJson(text: string): JobSpec {
  const spec = JSON.parse(text) as JobSpec;
  texts.set(spec, text);
  return spec;
}
