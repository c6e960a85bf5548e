#!/bin/sh
# tools/mtp/smoke.sh: a quick end-to-end run of the MTP heads tooling (a few
# minutes on 2 cores; not part of make test, it needs torch): a tiny random
# model, a synthetic corpus where the future is predictable from the present
# token (a noisy chain x -> 5x + 3 mod 64 over 64 ids), heads trained on it
# with train_heads.py, then pcg-mtp reading them and the same top tokens from
# PyTorch. Run from the repository root after make; STEPS=N to train longer.
set -eu
ROOT=$(pwd)
PATH="$ROOT/bin:$PATH"
D=$(mktemp -d "${TMPDIR:-/tmp}/mtp-smoke.XXXXXX")
trap 'rm -rf "$D"' EXIT
cd "$D"
pcg-mkmodel --out m --seed 3 --std 0.3 >/dev/null
awk 'BEGIN { srand(5)
	for (l = 0; l < 240; l++) {
		x = int(rand() * 64); s = ""
		for (t = 0; t < 40; t++) {
			s = s (t ? " " : "") (100 + x)
			x = rand() < 0.1 ? int(rand() * 64) : (5 * x + 3) % 64
		}
		print s
	} }' >chain.txt
python3 "$ROOT/tools/mtp/train_heads.py" --model m --data chain.txt --heads 3 \
	--steps "${STEPS:-200}" --batch 16 --lr 1e-2 --log-every 50 --threads 2 2>&1 |
	grep -v '^Loading weights'
P=$(head -n 1 chain.txt | cut -d' ' -f1-20 | tr ' ' ,)
pcg-mtp --model m --tokens "$P" --top-k 3 | tee c.txt
python3 "$ROOT/tools/mtp/heads_topk.py" --model m --heads m/mtp.safetensors \
	--tokens "$P" --top-k 3 2>/dev/null >py.txt
# The same ids in the same order (probabilities may differ in the last digit).
sed 's/:[0-9.]*//g' c.txt >c.ids
sed 's/:[0-9.]*//g' py.txt >py.ids
if cmp -s c.ids py.ids; then
	echo "smoke: pcg-mtp and PyTorch agree on the top tokens"
else
	echo "smoke: pcg-mtp and PyTorch differ:"; diff c.ids py.ids; exit 1
fi
