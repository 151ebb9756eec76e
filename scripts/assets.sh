#!/usr/bin/env bash
# Refresh static/vendor from the exact versions pinned in static/package.json(-lock).
# The copied files are committed, so building Stockade never needs npm; run this only
# after changing a version in static/package.json.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
static="$root/static"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cp "$static/package.json" "$work/"
if [[ -f "$static/package-lock.json" ]]; then
	cp "$static/package-lock.json" "$work/"
	(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund)
else
	(cd "$work" && npm install --ignore-scripts --no-audit --no-fund)
	cp "$work/package-lock.json" "$static/package-lock.json"
fi

nm="$work/node_modules"
vendor="$static/vendor"
rm -rf "$vendor"
mkdir -p "$vendor/htmx" "$vendor/xterm"

cp "$nm/htmx.org/dist/htmx.min.js" "$vendor/htmx/"
cp "$nm/htmx.org/LICENSE" "$vendor/htmx/LICENSE"
cp "$nm/@xterm/xterm/lib/xterm.js" "$vendor/xterm/"
cp "$nm/@xterm/xterm/css/xterm.css" "$vendor/xterm/"
cp "$nm/@xterm/xterm/LICENSE" "$vendor/xterm/LICENSE"
cp "$nm/@xterm/addon-fit/lib/addon-fit.js" "$vendor/xterm/"
cp "$nm/@xterm/addon-fit/LICENSE" "$vendor/xterm/LICENSE.addon-fit"

# The source maps are not vendored; drop the references so DevTools does not
# report 404s for them.
sed -i '/^\/\/# sourceMappingURL=/d' "$vendor"/xterm/*.js

# Record what was copied so a reviewer can match vendor/ to the lock file.
{
	for p in htmx.org @xterm/xterm @xterm/addon-fit; do
		printf '%s %s\n' "$p" "$(node -p "require('$nm/$p/package.json').version")"
	done
} >"$vendor/VERSIONS"

echo "static/vendor refreshed:"
cat "$vendor/VERSIONS"
