import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { arrayItemTexts, jsonNestingExceeds, parseJsonBody } from '../../src/api/json-body.js';
import { TicklerError } from '../../src/errors.js';

function codeOf(action: () => unknown): string {
  try {
    action();
  } catch (error) {
    assert.ok(error instanceof TicklerError, String(error));
    return error.code;
  }
  return 'none';
}

describe('request body JSON', () => {
  it('bounds nesting, ignoring brackets inside strings', () => {
    assert.equal(jsonNestingExceeds('[[[]]]', 3), false);
    assert.equal(jsonNestingExceeds('[[[[]]]]', 3), true);
    assert.equal(jsonNestingExceeds('["[[[[[[", "\\"[[[["]', 1), false);
    assert.equal(codeOf(() => parseJsonBody('['.repeat(1_000_000), 64)), 'invalid_request');
  });

  it('refuses prototype keys, however spelt, and keeps harmless lookalikes', () => {
    assert.equal(codeOf(() => parseJsonBody('{"__proto__": {"x": 1}}', 64)), 'invalid_request');
    assert.equal(codeOf(() => parseJsonBody('[{"a": {"\\u005f\\u005fproto__": 1}}]', 64)), 'invalid_request');
    assert.equal(codeOf(() => parseJsonBody('{"constructor": {"prototype": {}}}', 64)), 'invalid_request');
    assert.deepEqual(parseJsonBody('{"constructor": "Object", "proto": 1}', 64), { constructor: 'Object', proto: 1 });
    assert.equal(({} as Record<string, unknown>)['x'], undefined);
  });

  it('answers undefined for an empty body and invalid_json for broken text', () => {
    assert.equal(parseJsonBody('', 64), undefined);
    assert.equal(parseJsonBody('  \n', 64), undefined);
    assert.equal(codeOf(() => parseJsonBody('{"a":', 64)), 'invalid_json');
    assert.equal(codeOf(() => parseJsonBody('NaN', 64)), 'invalid_json');
  });

  it('recovers the raw text of each batch item', () => {
    const text = '{ "x": [1], "jobs" : [ {"a": "]}", "b": [1, {"c": 2}]} , 7,"s\\"]" ,null,[ ] ] }';
    assert.deepEqual(arrayItemTexts(text, 'jobs'), ['{"a": "]}", "b": [1, {"c": 2}]}', '7', '"s\\"]"', 'null', '[ ]']);
    assert.deepEqual(arrayItemTexts('{"jobs": []}', 'jobs'), []);
    assert.deepEqual(arrayItemTexts('{"jobs": [1], "jobs": [2, 3]}', 'jobs'), ['2', '3'], 'the last duplicate wins, as in JSON.parse');
    assert.deepEqual(arrayItemTexts('{"\\u006aobs": [4]}', 'jobs'), ['4']);
    assert.equal(arrayItemTexts('{"jobs": 5}', 'jobs'), null);
    assert.equal(arrayItemTexts('[1]', 'jobs'), null);
  });

  it('recovers item texts that parse back to the items, for any JSON', () => {
    fc.assert(fc.property(fc.array(fc.jsonValue({ maxDepth: 4 }), { maxLength: 8 }), fc.boolean(), (items, pretty) => {
      const text = JSON.stringify({ before: items[0] ?? null, jobs: items, after: 'x' }, null, pretty ? 2 : undefined);
      const texts = arrayItemTexts(text, 'jobs');
      assert.ok(texts !== null);
      assert.deepEqual(texts.map((item) => JSON.parse(item) as unknown), JSON.parse(text).jobs);
    }), { numRuns: 300 });
  });
});
