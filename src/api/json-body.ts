/**
 * Request body JSON, parsed strictly and defensively: nesting is bounded before the parser
 * sees the text, keys that could pollute a prototype are refused, and the raw text is kept
 * because key idempotency hashes the body *as given* (API.md "Jobs"). For a batch, the raw
 * text of each item is recovered from the array's spans, so a batch item and a single
 * create with the same text hash alike.
 */
import { TicklerError } from '../errors.js';

/**
 * Answers the deepest nesting of arrays and objects in a JSON text, stopping early once
 * `depthMax` is exceeded. Iterative, so hostile input cannot overflow the stack.
 */
export function jsonNestingExceeds(text: string, depthMax: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (inString) {
      if (code === 0x5c /* \ */) index++;
      else if (code === 0x22 /* " */) inString = false;
      continue;
    }
    if (code === 0x22) inString = true;
    else if (code === 0x7b /* { */ || code === 0x5b /* [ */) {
      depth++;
      if (depth > depthMax) return true;
    } else if (code === 0x7d /* } */ || code === 0x5d /* ] */) depth--;
  }
  return false;
}

/** Keys that Object.assign or a naive merge would turn into prototype writes. */
function findPoisonedKey(root: unknown): string | null {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      for (const item of value) stack.push(item);
      continue;
    }
    const record = value as Record<string, unknown>;
    if (Object.hasOwn(record, '__proto__')) return '__proto__';
    if (Object.hasOwn(record, 'constructor')) {
      const inner = record['constructor'];
      if (inner !== null && typeof inner === 'object' && Object.hasOwn(inner, 'prototype')) return 'constructor.prototype';
    }
    for (const key of Object.keys(record)) stack.push(record[key]);
  }
  return null;
}

/** Texts that cannot hold a poisoned key need no walk; escapes could spell one, so they walk. */
const poisonHint = /proto|constructor|\\u/i;

/**
 * Parses a request body. Empty text is "no body" (a body-less POST may still carry a JSON
 * content type). Throws TicklerError invalid_json / invalid_request; never anything else.
 */
export function parseJsonBody(text: string, depthMax: number): unknown {
  if (text.length === 0 || text.trim().length === 0) return undefined;
  if (jsonNestingExceeds(text, depthMax)) {
    throw new TicklerError('invalid_request', `JSON nesting deeper than ${depthMax} levels is not accepted`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new TicklerError('invalid_json', `the request body is not valid JSON: ${(error as Error).message}`, { cause: error });
  }
  if (poisonHint.test(text)) {
    const poisoned = findPoisonedKey(value);
    if (poisoned !== null) throw new TicklerError('invalid_request', `the key ${poisoned} is not accepted anywhere in a body`);
  }
  return value;
}

/** Index just past the JSON string starting at `start` (which holds the opening quote). */
function skipString(text: string, start: number): number {
  let index = start + 1;
  while (index < text.length) {
    const code = text.charCodeAt(index);
    if (code === 0x5c) index += 2;
    else if (code === 0x22) return index + 1;
    else index++;
  }
  return index;
}

function skipWhitespace(text: string, start: number): number {
  let index = start;
  while (index < text.length && /\s/.test(text[index]!)) index++;
  return index;
}

/** Index just past the JSON value starting at `start`; the text is known to be valid JSON. */
function skipValue(text: string, start: number): number {
  const first = text[start];
  if (first === '"') return skipString(text, start);
  if (first === '{' || first === '[') {
    let depth = 0;
    let index = start;
    while (index < text.length) {
      const char = text[index]!;
      if (char === '"') {
        index = skipString(text, index);
        continue;
      }
      if (char === '{' || char === '[') depth++;
      else if (char === '}' || char === ']') {
        depth--;
        if (depth === 0) return index + 1;
      }
      index++;
    }
    return index;
  }
  let index = start;
  while (index < text.length && !/[\s,\]}]/.test(text[index]!)) index++;
  return index;
}

/**
 * The raw text of each element of the top-level object's array member `member` (the last
 * one, as JSON.parse keeps the last of duplicate keys). Only call on text that parsed.
 * Answers null when the member is missing or not an array.
 */
export function arrayItemTexts(text: string, member: string): string[] | null {
  let index = skipWhitespace(text, 0);
  if (text[index] !== '{') return null;
  index = skipWhitespace(text, index + 1);
  let found: string[] | null = null;
  while (index < text.length && text[index] !== '}') {
    const keyEnd = skipString(text, index);
    const key = JSON.parse(text.slice(index, keyEnd)) as string;
    index = skipWhitespace(text, keyEnd) + 1; // past ':'
    index = skipWhitespace(text, index);
    if (key === member && text[index] === '[') {
      found = [];
      index = skipWhitespace(text, index + 1);
      while (text[index] !== ']') {
        const end = skipValue(text, index);
        found.push(text.slice(index, end));
        index = skipWhitespace(text, end);
        if (text[index] === ',') index = skipWhitespace(text, index + 1);
      }
      index++;
    } else {
      if (key === member) found = null;
      index = skipValue(text, index);
    }
    index = skipWhitespace(text, index);
    if (text[index] === ',') index = skipWhitespace(text, index + 1);
  }
  return found;
}
