/**
 * PostgreSQL array literals for the `unnest` parameters of batched statements. node-postgres
 * serialises a JavaScript array element by element with type checks; for a 1,000-job create
 * that took ~13 ms of the client's CPU per six arrays, against ~6 ms here (measured with
 * tsx on this 2-core machine, 2026-11-29). Inside a quoted element only `"` and `\` need
 * escaping; an unquoted NULL is SQL NULL.
 */

const quotedCharacters = /[\\"]/g;

export function textArray(values: readonly (string | null)[]): string {
  let literal = '{';
  for (let index = 0; index < values.length; index++) {
    if (index > 0) literal += ',';
    const value = values[index];
    literal += value === null || value === undefined ? 'NULL' : `"${value.replace(quotedCharacters, '\\$&')}"`;
  }
  return `${literal}}`;
}

/** Integers (int, bigint columns); they must be finite, which callers' types guarantee. */
export function numberArray(values: readonly (number | null)[]): string {
  let literal = '{';
  for (let index = 0; index < values.length; index++) {
    if (index > 0) literal += ',';
    const value = values[index];
    literal += value === null || value === undefined ? 'NULL' : String(value);
  }
  return `${literal}}`;
}

export function booleanArray(values: readonly boolean[]): string {
  return `{${values.map((value) => (value ? 't' : 'f')).join(',')}}`;
}
