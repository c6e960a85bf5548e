#!/bin/sh
# tests/comment-paths.sh: every path of this tree named in the sources
# exists: in the C and CUDA files (comments and strings alike) and in the
# comment lines of the shell and Python scripts, a word that starts with
# lib/, tests/, bench/, scripts/, man/, docs/, tools/ or models/ must be a
# file or folder of the checkout (a glob must match one). A comment that
# names a file moved or renamed since (the old flat paths of lib) sends a
# reader nowhere. Placeholders (a capital NAME, N, ...) and the paths of
# other projects the sources cite are listed below.
cd "$(dirname "$0")/.." || exit 2

# other projects' paths that a comment cites as theirs, and the folders of
# the GPU pack (scripts/gpu-pack), which are not the tree's
theirs='models/bpe tests/kat_vectors lib/pcg-tts lib/deps'

fail=0 n=0
list=$(mktemp) || exit 2
trap 'rm -f "$list"' EXIT
{
	git ls-files '*.c' '*.h' '*.cu' | while read -r f; do
		grep -HnoE '(^|[^A-Za-z0-9_./-])(lib|tests|bench|scripts|man|docs|tools|models)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*]' "$f"
	done
	git ls-files '*.sh' '*.py' 'scripts/*' | while read -r f; do
		grep -HnE '^[[:space:]]*#' "$f" |
			grep -oE '^[^:]*:[0-9]+:|(^|[^A-Za-z0-9_./-])(lib|tests|bench|scripts|man|docs|tools|models)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*]' |
			awk '/^[^:]*:[0-9]+:$/ { at = $0; next } { print at $0 }'
	done
} >"$list"
while IFS= read -r line; do
	where=$(printf '%s' "$line" | sed -E 's/^([^:]*:[0-9]+):.*/\1/')
	p=$(printf '%s' "$line" | sed -E 's/^[^:]*:[0-9]+://; s/^[^a-z]//')
	case " $theirs " in *" $p "*) continue ;; esac
	case "$p" in *NAME*|*[A-Z]) continue ;; esac # placeholders: policy_NAME.c, CACHE/N
	n=$((n + 1))
	# shellcheck disable=SC2086
	set -- $p
	[ -e "$1" ] && continue
	echo "FAIL: $where names $p, which is not in the tree"
	fail=1
done <"$list"
[ "$n" -gt 100 ] || { echo "FAIL: only $n paths found: the scan is broken"; exit 1; }
[ $fail = 0 ] && echo "ok: the $n paths the sources name exist"
exit $fail
