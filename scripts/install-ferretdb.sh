#!/usr/bin/env bash
# Builds FerretDB 1.24.2 (a MongoDB wire-protocol server) into ~/go/bin when it is missing.
# Tests and the development default use it where no mongod can be installed.
# A build outside FerretDB's own module panics without build/version/version.txt, so that file
# is added to the module's copy before the build (scripts/go-module-build.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-module-build.sh"

version="v1.24.2"
target="${FERRETDB_BIN:-$HOME/go/bin/ferretdb}"

if [ -x "$target" ] && "$target" --version 2>/dev/null | grep -q "version: $version"; then
  echo "ferretdb $version present at $target"
  exit 0
fi

write_version() { echo "$version" > build/version/version.txt; }
build_go_module ferretdb github.com/FerretDB/FerretDB "$version" "$target" ./cmd/ferretdb write_version
