// `tickler serve` and client-command configuration as pure functions: flags over environment
// over defaults, both api-key formats, and every refusal with its exit code.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connectionOf, jobCreateBodyOf } from '../../src/cli/api-commands.js';
import {
  CliUsageError, isLoopbackHost, parseApiKeys, resolveServeOptions, timingFromEnv, upperSnakeCase,
} from '../../src/cli/serve-options.js';

const noFile = (path: string): string => {
  throw new Error(`ENOENT: no such file ${path}`);
};
const usageError = (pattern: RegExp) => (error: unknown): boolean =>
  error instanceof CliUsageError && error.exitCode === 2 && pattern.test(error.message);

test('defaults: loopback, port 7070, ./.tickler, both roles, no keys, real clock', () => {
  assert.deepEqual(resolveServeOptions({}, {}, noFile), {
    host: '127.0.0.1', port: 7070, dataDir: './.tickler', storeUrl: null, roles: ['api', 'scheduler'],
    nodeId: null, apiKeys: null, virtualClock: false, startAtMs: null, logLevel: 'info',
    http: { headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, idleTimeoutMs: 72_000, connectionsMax: 1_024 },
  });
});

test('every flag falls back to TICKLER_<NAME>, and a flag wins over its variable', () => {
  const env = {
    TICKLER_HOST: '127.0.0.2', TICKLER_PORT: '9000', TICKLER_DATA_DIR: '/var/lib/tickler',
    TICKLER_STORE: 'postgres://127.0.0.1:5432/test', TICKLER_ROLES: 'scheduler', TICKLER_NODE_ID: 'n-1',
    TICKLER_VIRTUAL_CLOCK: '1', TICKLER_START_AT: '2026-11-29T02:00:00.000Z', TICKLER_LOG_LEVEL: 'warn',
    TICKLER_CRON_TOLERANCE_DEFAULT_S: '60', TICKLER_PAYLOAD_BYTES_MAX: '1024',
    TICKLER_HEADERS_TIMEOUT_S: '5', TICKLER_REQUEST_TIMEOUT_S: '20', TICKLER_IDLE_TIMEOUT_S: '65', TICKLER_CONNECTIONS_MAX: '300',
  };
  const fromEnv = resolveServeOptions({}, env, noFile);
  assert.deepEqual(fromEnv, {
    host: '127.0.0.2', port: 9000, dataDir: '/var/lib/tickler', storeUrl: 'postgres://127.0.0.1:5432/test',
    roles: ['scheduler'], nodeId: 'n-1', apiKeys: null, virtualClock: true,
    startAtMs: Date.parse('2026-11-29T02:00:00.000Z'), logLevel: 'warn', cronToleranceDefaultS: 60,
    payloadBytesMax: 1024,
    http: { headersTimeoutMs: 5_000, requestTimeoutMs: 20_000, idleTimeoutMs: 65_000, connectionsMax: 300 },
  });
  const fromFlags = resolveServeOptions({ port: '0', roles: 'api, scheduler', dataDir: './d', logLevel: 'debug' }, env, noFile);
  assert.equal(fromFlags.port, 0);
  assert.deepEqual(fromFlags.roles, ['api', 'scheduler']);
  assert.equal(fromFlags.dataDir, './d');
  assert.equal(fromFlags.logLevel, 'debug');
  assert.equal(resolveServeOptions({}, { TICKLER_PORT: '' }, noFile).port, 7070, 'an empty variable is unset');
});

test('the HTTP timeouts and connection cap: flags win over variables; out of range or headers longer than the request refused', () => {
  const env = { TICKLER_REQUEST_TIMEOUT_S: '20', TICKLER_CONNECTIONS_MAX: '300' };
  assert.deepEqual(resolveServeOptions({ requestTimeoutS: '45', headersTimeoutS: '3', idleTimeoutS: '5', connectionsMax: '20000' }, env, noFile).http,
    { headersTimeoutMs: 3_000, requestTimeoutMs: 45_000, idleTimeoutMs: 5_000, connectionsMax: 20_000 });
  for (const flags of [{ requestTimeoutS: '0' }, { headersTimeoutS: '1.5' }, { idleTimeoutS: '3601' }, { connectionsMax: '0' }, { connectionsMax: 'many' }]) {
    assert.throws(() => resolveServeOptions(flags, {}, noFile), usageError(/must be an integer within/), JSON.stringify(flags));
  }
  assert.throws(() => resolveServeOptions({ headersTimeoutS: '40' }, {}, noFile), usageError(/--headers-timeout-s must not be longer/));
});

test('TICKLER_DISPATCH_AT_CREATE turns dispatching due jobs at their create off or on; anything else is refused', () => {
  assert.equal(resolveServeOptions({}, {}, noFile).dispatchAtCreate, undefined, 'unset: the server default (on)');
  assert.equal(resolveServeOptions({}, { TICKLER_DISPATCH_AT_CREATE: '0' }, noFile).dispatchAtCreate, false);
  assert.equal(resolveServeOptions({}, { TICKLER_DISPATCH_AT_CREATE: 'off' }, noFile).dispatchAtCreate, false);
  assert.equal(resolveServeOptions({}, { TICKLER_DISPATCH_AT_CREATE: '1' }, noFile).dispatchAtCreate, true);
  assert.throws(() => resolveServeOptions({}, { TICKLER_DISPATCH_AT_CREATE: 'maybe' }, noFile),
    usageError(/TICKLER_DISPATCH_AT_CREATE must be 1 or 0/));
});

test('api keys: a team=KEY file, a JSON file, inline TICKLER_API_KEYS; the flag wins', () => {
  const files: Record<string, string> = {
    'keys.txt': '# teams\nteam-a = KEY1\n\nadmin=KEY0\n',
    'keys.json': '{"team-b": "KEY2", "admin": "KEY0"}',
  };
  const read = (path: string): string => files[path] ?? noFile(path);
  assert.deepEqual(resolveServeOptions({ apiKeys: 'keys.txt' }, { TICKLER_API_KEYS: 'x=Y' }, read).apiKeys,
    new Map([['KEY1', 'team-a'], ['KEY0', 'admin']]));
  assert.deepEqual(resolveServeOptions({ apiKeys: 'keys.json' }, {}, read).apiKeys,
    new Map([['KEY2', 'team-b'], ['KEY0', 'admin']]));
  assert.deepEqual(resolveServeOptions({}, { TICKLER_API_KEYS: 'team-a=KEY1,team-b=KEY2' }, read).apiKeys,
    new Map([['KEY1', 'team-a'], ['KEY2', 'team-b']]));
  assert.deepEqual(resolveServeOptions({}, { TICKLER_API_KEYS_FILE: 'keys.json' }, read).apiKeys?.get('KEY2'), 'team-b');
  assert.throws(() => resolveServeOptions({ apiKeys: 'missing' }, {}, read), usageError(/cannot read the api-keys file missing/));
});

test('bad api-key files are refused with the line or team at fault', () => {
  assert.throws(() => parseApiKeys('team-a KEY1', 'f'), usageError(/f line 1: expected team=KEY/));
  assert.throws(() => parseApiKeys('a=K\nb=K', 'f'), usageError(/teams a and b share a key/));
  assert.throws(() => parseApiKeys('a=', 'f'), usageError(/key of team a is empty/));
  assert.throws(() => parseApiKeys('{"a": 1}', 'f'), usageError(/key of team a must be a string/));
  assert.throws(() => parseApiKeys('{"a": ', 'f'), usageError(/not valid JSON/));
  assert.throws(() => parseApiKeys('# nothing\n', 'f'), usageError(/holds no keys/));
  assert.throws(() => parseApiKeys('bad team=K', 'f'), usageError(/bad team name/));
});

test('a non-loopback host without keys is refused; with keys it is allowed', () => {
  assert.throws(() => resolveServeOptions({ host: '0.0.0.0' }, {}, noFile), usageError(/refusing to listen on 0.0.0.0/));
  assert.throws(() => resolveServeOptions({}, { TICKLER_HOST: '10.0.0.5' }, noFile), usageError(/without API keys/));
  assert.equal(resolveServeOptions({ host: '0.0.0.0' }, { TICKLER_API_KEYS: 'a=K' }, noFile).host, '0.0.0.0');
  for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '::1']) assert.equal(isLoopbackHost(host), true, host);
  for (const host of ['0.0.0.0', '::', '10.0.0.1', '127.0.0.1.example.com', 'example.com']) {
    assert.equal(isLoopbackHost(host), false, host);
  }
});

test('bad values are usage errors', () => {
  assert.throws(() => resolveServeOptions({ port: '70000' }, {}, noFile), usageError(/port must be an integer/));
  assert.throws(() => resolveServeOptions({ port: '7o7o' }, {}, noFile), usageError(/port/));
  assert.throws(() => resolveServeOptions({ roles: 'api,worker' }, {}, noFile), usageError(/unknown role worker/));
  assert.throws(() => resolveServeOptions({ roles: ',' }, {}, noFile), usageError(/at least one/));
  assert.throws(() => resolveServeOptions({ startAt: '2026-11-29T02:00:00Z' }, {}, noFile), usageError(/needs --virtual-clock/));
  assert.throws(() => resolveServeOptions({ virtualClock: true, startAt: 'tomorrow' }, {}, noFile), usageError(/RFC 3339/));
  assert.throws(() => resolveServeOptions({ logLevel: 'loud' }, {}, noFile), usageError(/--log-level/));
});

test('timing overrides read TICKLER_TIMING_<FIELD> or TICKLER_<FIELD>, the first winning', () => {
  assert.equal(upperSnakeCase('shardLeaseTtlMs'), 'SHARD_LEASE_TTL_MS');
  assert.deepEqual(timingFromEnv({}), {});
  assert.deepEqual(timingFromEnv({
    TICKLER_SHARD_LEASE_TTL_MS: '2000',
    TICKLER_TIMING_SHARD_LEASE_RENEW_INTERVAL_MS: '500',
    TICKLER_LOAD_REFRESH_INTERVAL_MS: '9',
    TICKLER_TIMING_LOAD_REFRESH_INTERVAL_MS: '5000',
  }), { shardLeaseTtlMs: 2000, shardLeaseRenewIntervalMs: 500, loadRefreshIntervalMs: 5000 });
  assert.deepEqual(resolveServeOptions({}, { TICKLER_SHARD_LEASE_TTL_MS: '2000' }, noFile).timing, { shardLeaseTtlMs: 2000 });
  assert.throws(() => timingFromEnv({ TICKLER_LEASE_SWEEP_INTERVAL_MS: '0' }), usageError(/LEASE_SWEEP_INTERVAL_MS/));
});

test('client connection: --url and --api-key, else TICKLER_URL and TICKLER_API_KEY, else the local default', () => {
  assert.deepEqual(connectionOf({}, {}), { baseUrl: 'http://127.0.0.1:7070' });
  assert.deepEqual(connectionOf({}, { TICKLER_URL: 'http://h:1', TICKLER_API_KEY: 'k' }), { baseUrl: 'http://h:1', apiKey: 'k' });
  assert.deepEqual(connectionOf({ url: 'https://t', apiKey: 'f' }, { TICKLER_URL: 'http://h:1', TICKLER_API_KEY: 'k' }),
    { baseUrl: 'https://t', apiKey: 'f' });
  assert.throws(() => connectionOf({ url: 'h:1' }, {}), usageError(/http\(s\) URL/));
});

test('jobs create: schedule flags, pool, payload and key; --json is the base the flags override', () => {
  assert.deepEqual(jobCreateBodyOf({ cron: '0 2 * * *', tz: 'Europe/Berlin', pool: 'billing', payload: '{"a":1}', key: 'k' }),
    { schedule: { cron: '0 2 * * *', tz: 'Europe/Berlin' }, pool: 'billing', payload: { a: 1 }, key: 'k' });
  assert.deepEqual(jobCreateBodyOf({ at: '2026-12-01T09:00:00.000Z', pool: 'p' }),
    { schedule: { at: '2026-12-01T09:00:00.000Z' }, pool: 'p' });
  assert.deepEqual(jobCreateBodyOf({ delayS: '900', pool: 'p', lane: 'P0' }), { schedule: { delay_s: 900 }, pool: 'p', lane: 'P0' });
  assert.deepEqual(jobCreateBodyOf({ json: '{"schedule": {"delay_s": 5}, "pool": "a", "retry": {"max_attempts": 1}}', pool: 'b' }),
    { schedule: { delay_s: 5 }, pool: 'b', retry: { max_attempts: 1 } });
  assert.throws(() => jobCreateBodyOf({ pool: 'p' }), usageError(/needs a schedule/));
  assert.throws(() => jobCreateBodyOf({ delayS: '1' }), usageError(/needs --pool/));
  assert.throws(() => jobCreateBodyOf({ cron: '* * * * *', at: 'x', pool: 'p' }), usageError(/one of --cron, --at, --delay-s/));
  assert.throws(() => jobCreateBodyOf({ at: 'x', tz: 'UTC', pool: 'p' }), usageError(/--tz goes with --cron/));
  assert.throws(() => jobCreateBodyOf({ delayS: '1', pool: 'p', payload: '{nope' }), usageError(/--payload is not valid JSON/));
  assert.throws(() => jobCreateBodyOf({ json: '[1]' }), usageError(/--json must be a JSON object/));
  assert.throws(() => jobCreateBodyOf({ delayS: '-1', pool: 'p' }), usageError(/--delay-s/));
});

test('silence alerts: a webhook needs an http(s) URL and an HMAC secret; a required label is a name or name=value', () => {
  assert.throws(() => resolveServeOptions({ alertWebhook: 'http://127.0.0.1:9/hook' }, {}, noFile),
    usageError(/needs an HMAC secret/));
  assert.throws(() => resolveServeOptions({ alertWebhook: 'ftp://example/hook' }, { TICKLER_ALERT_WEBHOOK_SECRET: 's' }, noFile),
    usageError(/http\(s\) URL/));
  assert.throws(() => resolveServeOptions({ alertWebhookSecretFile: 'f' }, {}, noFile), usageError(/needs --alert-webhook/));
  const fromEnv = resolveServeOptions({}, { TICKLER_ALERT_WEBHOOK: 'https://alerts.example/tickler',
    TICKLER_ALERT_WEBHOOK_SECRET: 'inline' }, noFile);
  assert.deepEqual(fromEnv.alertWebhook, { url: 'https://alerts.example/tickler', secret: 'inline' });
  const fromFile = resolveServeOptions({ alertWebhook: 'http://127.0.0.1:9/hook', alertWebhookSecretFile: '/run/secret' },
    { TICKLER_ALERT_WEBHOOK_SECRET: 'inline' }, () => 'from-file\n');
  assert.equal(fromFile.alertWebhook?.secret, 'from-file', 'the file wins, trimmed');
  assert.deepEqual(resolveServeOptions({ requireMaxSilenceLabel: 'compliance' }, {}, noFile).silenceRequiredLabel,
    { name: 'compliance', value: null });
  assert.deepEqual(resolveServeOptions({}, { TICKLER_REQUIRE_MAX_SILENCE_LABEL: 'tier=sox' }, noFile).silenceRequiredLabel,
    { name: 'tier', value: 'sox' });
  assert.throws(() => resolveServeOptions({ requireMaxSilenceLabel: '=x' }, {}, noFile), usageError(/label name/));
});

test('--p2-share takes a fraction from 0 to 1, from the flag or TICKLER_P2_SHARE; anything else is refused', () => {
  assert.equal(resolveServeOptions({}, {}, noFile).p2Share, undefined, 'unset: the server default (0.2)');
  assert.equal(resolveServeOptions({ p2Share: '0.35' }, { TICKLER_P2_SHARE: '0.1' }, noFile).p2Share, 0.35);
  assert.equal(resolveServeOptions({}, { TICKLER_P2_SHARE: '1' }, noFile).p2Share, 1);
  for (const text of ['-0.1', '1.5', 'lots', '0x1', '1e-1']) {
    assert.throws(() => resolveServeOptions({ p2Share: text }, {}, noFile), usageError(/--p2-share must be a fraction from 0 to 1/), text);
  }
});
