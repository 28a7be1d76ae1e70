// Runs before the service and the tests (package.json scripts), under the first `node` on npm's
// script PATH: the devDependency `node` (Node 24) when dev dependencies are installed, else the
// system's. Plain JavaScript that any Node runs. Under a Node older than 24, which cannot run the
// TypeScript sources, it says in one line what is needed and how to get it, and exits 1.
const REQUIRED_MAJOR = 24;
const major = Number(process.versions.node.split('.')[0]);
if (!(major >= REQUIRED_MAJOR)) {
  process.stderr.write(
    `mailroute needs Node.js ${REQUIRED_MAJOR} or newer, but \`node\` on PATH is ${process.version} (${process.execPath}); ` +
      `run \`npm install\` (it brings Node.js ${REQUIRED_MAJOR} as the devDependency \`node\`), ` +
      `or get it with: eval "$(bash scripts/ensure-node.sh)"\n`,
  );
  process.exit(1);
}
