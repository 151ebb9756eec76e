#!/bin/sh
# Installs the npm registry server the tests start on 127.0.0.1 (verdaccio,
# pinned with its whole tree by scripts/npm-registry/package-lock.json) into
# a cache outside the checkout, once per lock file, and prints its folder.
# `make deps` runs it; sandbox/sandboxtest (NPMRegistry) runs it when the
# folder is missing.
set -eu
here=$(cd "$(dirname "$0")/npm-registry" && pwd)
for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "npm-registry: $tool is missing (scripts/deps.sh installs nodejs and npm)" >&2
		exit 1
	fi
done
sum=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
root=${STOCKADE_NPM_REGISTRY_CACHE:-/var/tmp/stockade-cache/npm-registry}
dir=$root/$sum
if [ ! -x "$dir/node_modules/.bin/verdaccio" ]; then
	mkdir -p "$root"
	# Installed aside and renamed into place: an install that stops half
	# way leaves nothing that looks complete.
	tmp=$(mktemp -d "$root/.install-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cp "$here/package.json" "$here/package-lock.json" "$tmp/"
	echo "npm-registry: installing verdaccio into $dir" >&2
	(cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
	mv -T "$tmp" "$dir" 2>/dev/null || [ -x "$dir/node_modules/.bin/verdaccio" ]
fi
echo "$dir"
