# Sourced by the install scripts: builds a Go module's command into a binary when it is missing.
# `go install module@version` is not relied upon: a module proxy may refuse the version list, so
# the module is downloaded and built as its own main module (in a throwaway folder).
#   build_go_module NAME MODULE VERSION TARGET PACKAGE [PREPARE]
# PREPARE, when given, is a function run in the module's copy before the build; GO_LDFLAGS, when
# set, is passed to `go build -ldflags`.
build_go_module() {
  local name="$1" module="$2" version="$3" target="$4" package="$5" prepare="${6:-}"
  local go_bin work module_dir
  go_bin="$(command -v go || echo /usr/local/go/bin/go)"
  work="$(mktemp -d)"
  # the module cache is read-only: make the copy writable so it can be removed
  trap 'chmod -R u+w "'"$work"'" 2>/dev/null; rm -rf "'"$work"'"' EXIT
  (
    cd "$work"
    "$go_bin" mod init "$name-build" >/dev/null 2>&1
    module_dir="$("$go_bin" mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -n "$module_dir" ] || { echo "install-$name: could not download $module@$version" >&2; exit 1; }
    cp -r "$module_dir" src
    chmod -R u+w src
    cd src
    [ -z "$prepare" ] || "$prepare"
    mkdir -p "$(dirname "$target")"
    "$go_bin" build ${GO_LDFLAGS:+-ldflags "$GO_LDFLAGS"} -o "$target" "$package"
  )
  echo "$name $version built at $target"
}
