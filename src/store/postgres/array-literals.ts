/**
 * PostgreSQL array literals for the `unnest` parameters of batched statements. node-postgres
 * serialises a JavaScript array element by element with type checks; for a 1,000-job create
 * that took ~13 ms of the client's CPU per six arrays, against ~6 ms here (measured with
 * tsx on this 2-core machine, 2026-11-29). Inside a quoted element only `"` and `\` need
 * escaping; an unquoted NULL is SQL NULL.
 */

const quotedCharacters = /[\\"]/g;

export function textArray(values: readonly (string | null)[]): string {
  const elements = new Array<string>(values.length);
  for (let index = 0; index < values.length; index++) {
    const value = values[index];
    if (value === null || value === undefined) elements[index] = 'NULL';
    // Most elements (ids, names, statuses) hold neither character: no regex, no new string.
    else if (value.indexOf('"') < 0 && value.indexOf('\\') < 0) elements[index] = `"${value}"`;
    else elements[index] = `"${value.replace(quotedCharacters, '\\$&')}"`;
  }
  return `{${elements.join(',')}}`;
}

/**
 * A JSON array of JSON texts, for `json_array_elements($n::json)` beside `unnest` in a
 * `ROWS FROM`: each text goes in as it is, where an array literal escapes every `"` of it.
 * For 1,000 job specs of ~380 characters the literal took ~3.6 ms of the server's CPU, this
 * ~0.5 ms (both with the UTF-8 encoding into the wire buffer). `json_array_elements` of a
 * `json` value answers each element's text as given, so the stored text is the same.
 * Every text must be one JSON value (callers pass JSON.stringify's output).
 */
export function jsonTextArray(texts: readonly string[]): string {
  return `[${texts.join(',')}]`;
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
