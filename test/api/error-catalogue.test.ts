/**
 * Holds src/errors.ts to the error table of API.md: every code the contract names exists
 * with its status, and a code outside the table is a deliberate, listed extension.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { errorCatalogue, TicklerError, type ErrorCode } from '../../src/errors.js';
import { schemaIssueToError, toTicklerError, dottedPath } from '../../src/api/http-errors.js';

/** Codes in errors.ts beyond the table ("More codes may be added"), each with its reason. */
const extensions: Record<string, string> = {
  unsupported_media_type: 'the 415 a body that is not application/json gets',
  request_timeout: 'the 408 of a request not received within the server\'s timeout',
  headers_too_large: 'the 431 of a request line and headers over 16 KiB',
  internal: 'the 500 of a programmer error; never an answer to bad input',
};

function contractTable(): Map<string, number> {
  const text = readFileSync(new URL('../../docs/API.md', import.meta.url), 'utf8');
  const section = text.slice(text.indexOf('## Errors'), text.indexOf('## Auth'));
  const codes = new Map<string, number>();
  for (const line of section.split('\n')) {
    const row = /^\|\s*(\d{3})\s*\|(.*)\|\s*$/.exec(line);
    if (row === null) continue;
    for (const match of row[2]!.matchAll(/`([a-z_]+)`/g)) codes.set(match[1]!, Number(row[1]));
  }
  return codes;
}

describe('error catalogue', () => {
  it('parses a table of the expected size from API.md', () => {
    const table = contractTable();
    assert.ok(table.size >= 14, `found ${table.size} codes`);
    assert.equal(table.get('invalid_json'), 400);
    assert.equal(table.get('unavailable'), 503);
  });

  it('holds every code of the contract with its status', () => {
    for (const [code, status] of contractTable()) {
      assert.ok(code in errorCatalogue, `errors.ts lacks ${code}`);
      assert.equal(errorCatalogue[code as ErrorCode].status, status, code);
      assert.equal(new TicklerError(code as ErrorCode, 'm').status, status);
    }
  });

  it('has no code outside the contract but the listed extensions', () => {
    const table = contractTable();
    for (const code of Object.keys(errorCatalogue)) {
      assert.ok(table.has(code) || code in extensions, `${code} is neither in API.md nor a listed extension`);
    }
  });

  it('marks only rate limits and outages retryable', () => {
    const retryable = Object.entries(errorCatalogue).filter(([, entry]) => entry.retryable).map(([code]) => code).sort();
    assert.deepEqual(retryable, ['rate_limited', 'unavailable']);
  });

  it('writes the error body of API.md, with field only where one input is at fault', () => {
    assert.deepEqual(new TicklerError('not_found', 'no job').toBody(), { error: { code: 'not_found', message: 'no job' } });
    assert.deepEqual(new TicklerError('invalid_schedule', 'bad', { field: 'schedule.cron' }).toBody(),
      { error: { code: 'invalid_schedule', message: 'bad', field: 'schedule.cron' } });
  });
});

describe('translating framework errors', () => {
  it('names the field of a schema failure as a dotted path', () => {
    assert.equal(dottedPath('/retry/max_attempts'), 'retry.max_attempts');
    assert.equal(dottedPath('/labels/a~1b'), 'labels.a/b');
    const required = schemaIssueToError([{ keyword: 'required', instancePath: '/schedule', params: { requiredProperties: ['cron'] } }]);
    assert.equal(required.field, 'schedule.cron');
    const unknown = schemaIssueToError([
      { keyword: 'boolean', instancePath: '/colour', params: {} },
      { keyword: 'additionalProperties', instancePath: '', params: { additionalProperties: ['colour'] } },
    ]);
    assert.equal(unknown.field, 'colour');
    assert.equal(unknown.code, 'invalid_request');
  });

  it('maps body limits, media types and outages, and leaves programmer errors alone', () => {
    assert.equal(toTicklerError({ code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 })?.code, 'payload_too_large');
    assert.equal(toTicklerError({ code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', statusCode: 415 })?.code, 'unsupported_media_type');
    assert.equal(toTicklerError({ code: 'FST_ERR_CTP_INVALID_JSON_BODY', statusCode: 400 })?.code, 'invalid_json');
    assert.equal(toTicklerError(Object.assign(new Error('busy'), { code: 'SQLITE_BUSY' }))?.code, 'unavailable');
    assert.equal(toTicklerError(Object.assign(new Error('gone'), { code: '57P01' }))?.code, 'unavailable');
    assert.equal(toTicklerError(new TypeError('undefined is not a function')), null);
  });
});
