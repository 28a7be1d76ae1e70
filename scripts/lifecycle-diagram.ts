// Prints ARCHITECTURE.md's lifecycle diagram from the transition tables (a test checks it is there).
import { lifecycleDiagram } from '../src/lifecycle/diagram.ts';

process.stdout.write(`${lifecycleDiagram()}\n`);
