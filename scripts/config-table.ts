// Prints README's configuration table from the schema (a test checks README holds it exactly).
import { configTableMarkdown } from '../src/config/schema.ts';

process.stdout.write(`${configTableMarkdown()}\n`);
