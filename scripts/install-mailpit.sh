#!/usr/bin/env bash
# Builds Mailpit v1.30.5 (an SMTP server with a webhook per message) into ~/go/bin when it is
# missing: the bench's e2e part runs the same load against it as against us, as a yardstick.
# As with FerretDB (scripts/install-ferretdb.sh), `go install ...@version` is not relied upon
# behind a module proxy that may refuse the version list: the module is downloaded and built as
# its own main module, with the version stamped in by -ldflags as Mailpit's release build does.
set -euo pipefail

version="v1.30.5"
target="${MAILPIT_BIN:-$HOME/go/bin/mailpit}"
go_bin="$(command -v go || echo /usr/local/go/bin/go)"

# `mailpit version` also asks GitHub for the latest release and exits 1 when it cannot reach it
if [ -x "$target" ] && { "$target" version 2>/dev/null || true; } | grep -q "$version"; then
  echo "mailpit $version present at $target"
  exit 0
fi

work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
"$go_bin" mod init mailpit-build >/dev/null 2>&1
module_dir="$("$go_bin" mod download -json "github.com/axllent/mailpit@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -n "$module_dir" ] || { echo "install-mailpit: could not download github.com/axllent/mailpit@$version" >&2; exit 1; }
cp -r "$module_dir" src
chmod -R u+w src
mkdir -p "$(dirname "$target")"
(cd src && CGO_ENABLED=0 "$go_bin" build -ldflags "-s -w -X github.com/axllent/mailpit/config.Version=$version" -o "$target" .)
echo "mailpit $version built at $target"
