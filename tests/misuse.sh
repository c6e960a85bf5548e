#!/bin/sh
# tests/misuse.sh: small misuses answered at once and in words.
# pcg-keygen refuses an empty name and one ending in '/' (they would write
# the hidden files .key and .pub); pcg-synth, run by a user who may not
# enter the runtime directory of the pipeline it looks for, says so at once
# instead of waiting out its timeout (as root: run as nobody).
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
expect 2 "pcg-keygen ''" pcg-keygen ""
err_has "NAME is empty"
expect 2 "pcg-keygen dir/" pcg-keygen "dir/"
err_has "NAME ends in '/'"
[ ! -e .key ] && [ ! -e .pub ] && [ ! -e dir/.key ] && ok "no .key or .pub written" || bad "a hidden key file was written"
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
	as_nobody "$(command -v pcg-synth)" --version >/dev/null 2>&1; then
	mkdir -p rt && : >rt/verifier.sock && chmod 700 rt && chmod 755 "$T"
	t0=$(date +%s)
	expect 1 "pcg-synth as another user than the pipeline's" as_nobody \
		env PCG_RUNTIME_DIR="$T/rt" "$(command -v pcg-synth)" --timeout-ms 20000 "Hello."
	err_has "Permission denied (it belongs to another user"
	[ $(($(date +%s) - t0)) -le 3 ] && ok "said at once" || bad "took $(($(date +%s) - t0)) s"
else
	echo "not root, no setpriv, or pcg-synth not runnable as nobody: the runtime directory check needs another user; not run"
fi
finish
