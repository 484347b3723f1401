/**
 * The schema compiler of every route: TypeBox's, with query and path numbers held to decimal
 * text. TypeBox converts query text to the declared type as `Number()` would and then
 * truncates to an integer, which reads `limit=1.9` as 1 and `limit=0x2` as 2 (and `1e2`,
 * ` 5`, `+5` as numbers too). A number in a URL is written in decimal digits or it is refused
 * as any other invalid value is: `400 invalid_request` naming the parameter.
 */
import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import { TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox';
import type { TSchema } from 'typebox';

const integerText = /^-?\d+$/;
const numberText = /^-?\d+(\.\d+)?$/;

export const validatorCompiler: FastifySchemaCompiler<TSchema> = (route) => {
  const validate = TypeBoxValidatorCompiler(route);
  if (route.httpPart === 'body') return validate;
  const numeric = numericProperties(route.schema);
  if (numeric.length === 0) return validate;
  return (value) => {
    const fields = value as Record<string, unknown> | null;
    for (const [name, integer] of numeric) {
      const text = fields?.[name];
      if (typeof text !== 'string' || (integer ? integerText : numberText).test(text)) continue;
      const issue: FastifySchemaValidationError = {
        keyword: 'type', instancePath: `/${name}`, schemaPath: `#/properties/${name}/type`, params: {},
        message: `must be ${integer ? 'an integer' : 'a number'} in decimal digits`,
      };
      return { error: [issue] };
    }
    return validate(value);
  };
};

/** The properties declared as integers (true) or numbers (false). */
function numericProperties(schema: TSchema): [name: string, integer: boolean][] {
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {};
  return Object.entries(properties)
    .filter(([, property]) => property.type === 'integer' || property.type === 'number')
    .map(([name, property]) => [name, property.type === 'integer']);
}
