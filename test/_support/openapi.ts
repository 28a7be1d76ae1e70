// Validates the API responses tests see against openapi.yaml, so code and document cannot drift.
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';

const OPENAPI_FILE = new URL('../../openapi.yaml', import.meta.url);

interface OperationDoc {
  responses?: Record<string, { $ref?: string; content?: Record<string, { schema?: unknown }> }>;
}
interface OpenApiDoc {
  paths: Record<string, Record<string, OperationDoc>>;
}

export const openapiDocument = parse(readFileSync(OPENAPI_FILE, 'utf8')) as OpenApiDoc;

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);
ajv.addSchema(openapiDocument as object, 'openapi');

const templates = Object.keys(openapiDocument.paths).map((template) => ({
  template,
  regex: new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`),
}));

const cache = new Map<object, ReturnType<typeof ajv.compile>>();

/** Compiles a schema taken from the document, its local $refs resolved against the document. */
function compiled(schema: object) {
  let validate = cache.get(schema);
  if (!validate) {
    validate = ajv.compile({ $id: `openapi-part-${cache.size}`, ...rebase(schema) } as object);
    cache.set(schema, validate);
  }
  return validate;
}

/** Rewrites `#/components/...` to `openapi#/components/...` so refs resolve against the document. */
function rebase(value: unknown): Record<string, unknown> {
  return JSON.parse(JSON.stringify(value).replace(/"\$ref":"#\//g, '"$ref":"openapi#/')) as Record<
    string,
    unknown
  >;
}

type ResponseDoc = { $ref?: string; content?: Record<string, { schema?: unknown }> };

/** Follows a local `$ref` such as `#/components/responses/NotFound`. */
function resolveRef(value: ResponseDoc | undefined): ResponseDoc | undefined {
  if (!value?.$ref) return value;
  let node: unknown = openapiDocument;
  for (const segment of value.$ref.replace(/^#\//, '').split('/')) {
    node = (node as Record<string, unknown>)?.[segment.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return node as ResponseDoc | undefined;
}

export type CheckResult = { ok: true } | { ok: false; problem: string };

/** Checks one response: the operation and status must be documented, a JSON body must match its schema. */
export function checkResponse(
  method: string,
  urlPath: string,
  status: number,
  contentType: string,
  body: unknown,
): CheckResult {
  const path = urlPath.split('?', 1)[0] ?? '';
  const found = templates.find((t) => t.regex.test(path));
  if (!found) return { ok: false, problem: `path ${path} is not in openapi.yaml` };
  const operation = openapiDocument.paths[found.template]?.[method.toLowerCase()];
  if (!operation) return { ok: false, problem: `${method} ${found.template} is not in openapi.yaml` };
  const response = resolveRef(operation.responses?.[String(status)]);
  if (!response)
    return { ok: false, problem: `${method} ${found.template} does not document status ${status}` };
  const mediaType = contentType.split(';', 1)[0]?.trim() ?? '';
  if (!response.content) {
    return body === undefined || body === ''
      ? { ok: true }
      : { ok: false, problem: `status ${status} has a body but documents none` };
  }
  const media = response.content[mediaType] ?? response.content['*/*'];
  if (!media)
    return { ok: false, problem: `${method} ${found.template} ${status} does not document ${mediaType}` };
  if (mediaType !== 'application/json' || !media.schema) return { ok: true };
  const validate = compiled(media.schema as object);
  return validate(body)
    ? { ok: true }
    : { ok: false, problem: `${method} ${path} ${status}: ${ajv.errorsText(validate.errors)}` };
}

/** Checks a value against a schema of components/schemas (the webhook payload, say). */
export function checkSchema(name: string, value: unknown): CheckResult {
  const validate = compiled({ $ref: `#/components/schemas/${name}` });
  return validate(value)
    ? { ok: true }
    : { ok: false, problem: `${name}: ${ajv.errorsText(validate.errors)}` };
}
