#!/usr/bin/env bash
# Builds Mailpit v1.30.5 (an SMTP server with a webhook per message) into ~/go/bin when it is
# missing: the bench's e2e part runs the same load against it as against us, as a yardstick.
# Built from its Go module like FerretDB (scripts/go-module-build.sh), with the version stamped
# in as Mailpit's release build does; its web UI comes prebuilt in the module.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-module-build.sh"

version="v1.30.5"
target="${MAILPIT_BIN:-$HOME/go/bin/mailpit}"

# `mailpit version` also asks GitHub for the latest release and exits 1 when it cannot reach it
if [ -x "$target" ] && { "$target" version 2>/dev/null || true; } | grep -q "$version"; then
  echo "mailpit $version present at $target"
  exit 0
fi

export CGO_ENABLED=0
GO_LDFLAGS="-s -w -X github.com/axllent/mailpit/config.Version=$version" \
  build_go_module mailpit github.com/axllent/mailpit "$version" "$target" .
