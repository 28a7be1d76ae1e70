// Prints ARCHITECTURE.md's lifecycle diagram from the transition tables, or with `places` its
// diagram of where a message lives (a test checks both are there).
import { lifecycleDiagram, placesDiagram } from '../src/lifecycle/diagram.ts';

process.stdout.write(`${process.argv[2] === 'places' ? placesDiagram() : lifecycleDiagram()}\n`);
