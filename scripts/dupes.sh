#!/usr/bin/env bash
# Count the duplications in production code, reproducibly: the tracked tree at
# a revision (default HEAD; WORKTREE for the working tree's tracked files)
# without tests, generated code (templ, protobuf, Connect) and the test-helper packages
# (directories named *test), run through `duplicates`. Prints the tool's
# summary line, the number of pairs identical to the letter (rows without
# "shape"), and with -v every row.
#   scripts/dupes.sh            # HEAD
#   scripts/dupes.sh 3be0473    # a past revision
#   scripts/dupes.sh -v WORKTREE
set -euo pipefail

verbose=0
if [[ ${1:-} == -v ]]; then
	verbose=1
	shift
fi
rev=${1:-HEAD}

root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ $rev == WORKTREE ]]; then
	(cd "$root" && git ls-files -z | xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$tmp"
else
	git -C "$root" archive "$rev" | tar -xf - -C "$tmp"
fi

find "$tmp" \( -name '*_test.go' -o -name '*_templ.go' \) -type f -delete
# Generated Go (protobuf, Connect: the standard "Code generated ... DO NOT EDIT." line).
grep -rlZ --include='*.go' -E '^// Code generated .* DO NOT EDIT\.$' "$tmp" | xargs -0 -r rm -f || true
find "$tmp" -type d -name '*test' -prune -exec rm -rf {} +

# Import blocks are blanked (line numbers kept): the tool passes over import
# lines, but not the bare paths inside an import ( ... ) group, so two files
# importing the same packages would count as a duplication.
find "$tmp" -name '*.go' -type f -print0 | xargs -0 -r python3 -c '
import re, sys
for p in sys.argv[1:]:
    s = open(p, encoding="utf-8", errors="surrogateescape").read()
    t = re.sub(r"(?m)^import \((?:\n[^)]*?)*?\n\)$", lambda m: "\n" * m.group(0).count("\n"), s)
    if t != s:
        open(p, "w", encoding="utf-8", errors="surrogateescape").write(t)
'

git -C "$tmp" init -q
git -C "$tmp" add -A
git -C "$tmp" -c user.name=dupes -c user.email=dupes@localhost commit -q -m tree

out=$(cd "$tmp" && duplicates --most 200 --seconds 300)
rows=$(grep -E '^D[0-9]+ ' <<<"$out" || true)
summary=$(head -n 1 <<<"$out")
echo "$summary"
pairs=$(sed -nE 's/^([0-9]+) pairs.*/\1/p' <<<"$summary")
shape=$(sed -nE 's/.*\(([0-9]+) by shape alone.*/\1/p' <<<"$summary")
echo "identical to the letter: $((${pairs:-0} - ${shape:-0})) of ${pairs:-0} pairs ($(grep -vc 'shape' <<<"$rows" || true) among the $(grep -c . <<<"$rows" || true) rows listed)"
boiler=$(sed -nE 's/.*, ([0-9]+) of those marked boilerplate.*/\1/p' <<<"$summary")
echo "not boilerplate (the tool's own mark): $((${pairs:-0} - ${boiler:-0})) of ${pairs:-0} pairs"
grep -E '^\(\+|^left out:|^incomplete:' <<<"$out" || true
if ((verbose)); then
	echo "$rows"
fi
