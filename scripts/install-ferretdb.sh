#!/usr/bin/env bash
# Builds FerretDB 1.24.2 (a MongoDB wire-protocol server) into ~/go/bin when it is missing.
# Tests and the development default use it where no mongod can be installed.
# `go install ...@v1.24.2` does not work behind a module proxy that refuses the version list,
# and a build outside FerretDB's own module panics without build/version/version.txt, so we
# download the module, add that file and build it as its own main module.
set -euo pipefail

version="v1.24.2"
target="${FERRETDB_BIN:-$HOME/go/bin/ferretdb}"
go_bin="$(command -v go || echo /usr/local/go/bin/go)"

if [ -x "$target" ] && "$target" --version 2>/dev/null | grep -q "version: $version"; then
  echo "ferretdb $version present at $target"
  exit 0
fi

work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
"$go_bin" mod init ferretdb-build >/dev/null 2>&1
module_dir="$("$go_bin" mod download -json "github.com/FerretDB/FerretDB@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -n "$module_dir" ] || { echo "install-ferretdb: could not download github.com/FerretDB/FerretDB@$version" >&2; exit 1; }
cp -r "$module_dir" src
chmod -R u+w src
echo "$version" > src/build/version/version.txt
mkdir -p "$(dirname "$target")"
(cd src && "$go_bin" build -o "$target" ./cmd/ferretdb)
echo "ferretdb $version built at $target"
