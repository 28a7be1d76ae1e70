// Lints openapi.yaml: a valid OpenAPI 3.1 document whose every $ref resolves.
import { fileURLToPath } from 'node:url';
import SwaggerParser from '@apidevtools/swagger-parser';

const file = fileURLToPath(new URL('../openapi.yaml', import.meta.url));
try {
  const api = await SwaggerParser.validate(file);
  const operations = Object.values(api.paths ?? {}).reduce(
    (n, item) => n + Object.keys(item ?? {}).length,
    0,
  );
  process.stdout.write(`openapi.yaml: valid (${operations} operations)\n`);
} catch (err) {
  process.stderr.write(`openapi.yaml: ${(err as Error).message}\n`);
  process.exit(1);
}
