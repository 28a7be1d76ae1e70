// The layers of the code (ARCHITECTURE.md, "Layers"): reads every import of src/, workers/ and
// scripts/ (static, dynamic and `new URL('...', import.meta.url)` references to our files) and fails,
// naming the files, on an import cycle or on an import from a lower layer to a higher one.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import test from 'ava';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Top to bottom. A file may import from its own layer's folders and from any layer below, never
 * from one above. test/ sits above them all and is not read (only the imports that reach it are).
 */
const LAYERS: readonly (readonly string[])[] = [
  ['test/'],
  ['scripts/', 'workers/'],
  ['src/service/'],
  ['src/api/', 'src/smtp/', 'src/console/'],
  ['src/actor/'],
  ['src/deliver/'],
  ['src/parse/'],
  ['src/route/'],
  ['src/metrics/'],
  ['src/store/'],
  ['src/lifecycle/'],
  ['src/local-db/', 'src/signing/'],
  ['src/config/', 'src/log/', 'src/errors/', 'src/util/'],
];

const SCANNED = ['src', 'workers', 'scripts'];

function sourceFiles(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && /\.(ts|js)$/.test(entry.name))
    .map((entry) => path.relative(ROOT, path.join(entry.parentPath, entry.name)));
}

const REFERENCES = [
  // import ... from '...', export ... from '...' (over several lines too)
  /^\s*(?:import|export)\s[^;]*?\sfrom\s*['"]([^'"]+)['"]/gm,
  /^\s*import\s*['"]([^'"]+)['"]/gm,
  /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  /\bnew URL\(\s*['"]([^'"]+)['"]\s*,\s*import\.meta\.url\s*\)/g,
];

/** The repository paths a file refers to (relative specifiers only: packages are not ours). */
function referencesOf(file: string, text: string): string[] {
  // whole-line comments out, so that a comment quoting an import is not one
  const code = text
    .split('\n')
    .filter((line) => !/^\s*(\/\/|\/\*|\*)/.test(line))
    .join('\n');
  const found = new Set<string>();
  for (const pattern of REFERENCES)
    for (const match of code.matchAll(pattern)) {
      const specifier = match[1]!;
      if (!specifier.startsWith('.')) continue;
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier));
      found.add(specifier.endsWith('/') ? `${target.replace(/\/$/, '')}/` : target);
    }
  return [...found];
}

function layerOf(file: string): number {
  return LAYERS.findIndex((folders) => folders.some((folder) => file.startsWith(folder)));
}

interface Graph {
  files: string[];
  edges: Map<string, string[]>;
}

function readGraph(): Graph {
  const files = SCANNED.flatMap(sourceFiles).sort();
  const edges = new Map<string, string[]>();
  for (const file of files) edges.set(file, referencesOf(file, readFileSync(path.join(ROOT, file), 'utf8')));
  return { files, edges };
}

/** Strongly connected components of more than one file (or a file importing itself): the cycles. */
function cycles(graph: Graph): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (file: string): void => {
    index.set(file, next);
    low.set(file, next);
    next++;
    stack.push(file);
    onStack.add(file);
    for (const target of graph.edges.get(file) ?? []) {
      if (!graph.edges.has(target)) continue;
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) low.set(file, Math.min(low.get(file)!, index.get(target)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1 || graph.edges.get(file)?.includes(file)) found.push(component.sort());
  };
  for (const file of graph.files) if (!index.has(file)) visit(file);
  return found;
}

const graph = readGraph();

test('the import reader sees every kind of reference', (t) => {
  const text = [
    "import { a } from './a.ts';",
    'import {',
    '  b,',
    "} from '../b/b.ts';",
    "import type { C } from './c.ts';",
    "export { d } from './d.ts';",
    "import './e.ts';",
    "const f = await import('./f.ts');",
    "const g = new URL('../../workers/g.ts', import.meta.url);",
    "const h = new URL('../console/', import.meta.url);",
    "// import { no } from './comment.ts';",
    "import { pkg } from 'package';",
  ].join('\n');
  t.deepEqual(referencesOf('src/x/file.ts', text).sort(), [
    'src/b/b.ts',
    'src/console/',
    'src/x/a.ts',
    'src/x/c.ts',
    'src/x/d.ts',
    'src/x/e.ts',
    'src/x/f.ts',
    'workers/g.ts',
  ]);
});

test('every file of src/, workers/ and scripts/ is in a layer', (t) => {
  t.deepEqual(
    graph.files.filter((file) => layerOf(file) < 0),
    [],
  );
});

test('no import cycle among the files of src/, workers/ and scripts/', (t) => {
  t.deepEqual(cycles(graph), []);
});

test('no import from a lower layer to a higher one (src/ never into workers/ or scripts/, scripts/ never into test/)', (t) => {
  const upward: string[] = [];
  for (const [file, targets] of graph.edges)
    for (const target of targets) {
      const to = layerOf(target);
      if (to >= 0 && to < layerOf(file)) upward.push(`${file} -> ${target}`);
    }
  t.deepEqual(upward, []);
});
