/**
 * Every failure leaves as `{"error": {"code", "message", "field?"}}` (API.md "Errors").
 * Expected failures arrive as TicklerError; fastify's own (schema, body limit, media type)
 * are translated here; anything else is a programmer error or an outage and is logged.
 */
import { TicklerError } from '../errors.js';

/** One schema failure as TypeBox (and ajv) report it. */
interface SchemaIssue {
  keyword: string;
  instancePath: string;
  message?: string;
  params?: Record<string, unknown>;
}

interface FastifyLikeError {
  code?: string;
  statusCode?: number;
  message?: string;
  validation?: SchemaIssue[];
  validationContext?: string;
}

/** `/retry/max_attempts` → `retry.max_attempts` (JSON pointer escapes undone). */
export function dottedPath(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'))
    .join('.');
}

function joinField(base: string, name: string): string {
  return base.length === 0 ? name : `${base}.${name}`;
}

/** Picks the most telling issue and names the input at fault. */
export function schemaIssueToError(issues: readonly SchemaIssue[], prefix = ''): TicklerError {
  // The `boolean` issue of `additionalProperties: false` points at the unknown field itself.
  const issue = issues.find((candidate) => candidate.keyword === 'boolean')
    ?? issues.find((candidate) => candidate.keyword !== 'anyOf')
    ?? issues[0];
  if (issue === undefined) return new TicklerError('invalid_request', 'the request does not match its schema');
  let field = dottedPath(issue.instancePath);
  let message = issue.message ?? 'is not valid';
  if (issue.keyword === 'boolean') message = 'is not a known field';
  if (issue.keyword === 'required') {
    const missing = issue.params?.['requiredProperties'] ?? issue.params?.['missingProperty'];
    const name = Array.isArray(missing) ? String(missing[0]) : String(missing);
    field = joinField(field, name);
    message = 'is required';
  }
  if (issue.keyword === 'const' || issue.keyword === 'anyOf') {
    const allowed = issues.filter((candidate) => candidate.instancePath === issue.instancePath && candidate.keyword === 'const')
      .map((candidate) => JSON.stringify(candidate.params?.['allowedValue']));
    if (allowed.length > 0) message = `must be one of ${allowed.join(', ')}`;
  }
  field = joinField(prefix, field);
  const options = field.length === 0 ? {} : { field };
  return new TicklerError('invalid_request', field.length === 0 ? `the request ${message}` : `${field} ${message}`, options);
}

/**
 * Driver errors that mean "the store cannot be reached or written now", not "this request
 * is wrong": SQLite busy/locked/I/O/full, and lost or refused PostgreSQL connections
 * (class 08, admin shutdown 57P01–57P03). They answer 503 so that clients retry.
 */
const outageCodes = /^(SQLITE_(BUSY|LOCKED|IOERR|FULL|CANTOPEN|READONLY)\w*|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|08\w{3}|57P0[123])$/;

/** Status and body for any error a handler or fastify raised. */
export function toTicklerError(error: unknown): TicklerError | null {
  if (error instanceof TicklerError) return error;
  const candidate = error as FastifyLikeError;
  if (Array.isArray(candidate.validation)) return schemaIssueToError(candidate.validation);
  switch (candidate.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new TicklerError('payload_too_large', 'the request body is over the size limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new TicklerError('unsupported_media_type', 'send application/json');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new TicklerError('invalid_json', 'the request body is not valid JSON');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new TicklerError('invalid_request', 'the Content-Length does not match the body');
    default:
      break;
  }
  if (candidate.code !== undefined && outageCodes.test(candidate.code)) {
    return new TicklerError('unavailable', 'the store is unavailable; retry', { cause: error });
  }
  const status = candidate.statusCode;
  if (status === 404) return new TicklerError('not_found', 'no such route');
  if (status === 413) return new TicklerError('payload_too_large', 'the request is too large');
  if (status === 415) return new TicklerError('unsupported_media_type', 'send application/json');
  if (status !== undefined && status >= 400 && status < 500) {
    return new TicklerError('invalid_request', candidate.message ?? 'the request is not valid');
  }
  return null;
}
