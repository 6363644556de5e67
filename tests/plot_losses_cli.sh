#!/usr/bin/env bash
# scripts/plot_losses.py on a real run's --log-dir: a PNG of the size asked for, with both curves drawn
# (found by their colours in the decoded image), the series named in its metadata, and clear errors.
set -uo pipefail
tessera=${1:?usage: plot_losses_cli.sh path/to/tessera}
root="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
python=/usr/bin/python3
"$python" -c "import matplotlib" 2>/dev/null || skip "no matplotlib for $python (scripts/setup.sh installs python3-matplotlib)"
plot="$root/scripts/plot_losses.py"

"$tessera" train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
  --tokenizer-type NullTokenizer --vocab-size 40 --mock-data --micro-batch-size 2 --global-batch-size 4 \
  --lr 1e-3 --train-iters 12 --log-interval 2 --eval-interval 4 --eval-iters 1 --log-dir "$work/logs" >/dev/null 2>&1
check "a tiny run writes metrics.jsonl" $?

out=$("$python" "$plot" "$work/logs" 2>&1)
check "plot_losses.py exits 0: $out" $?
[ "$out" = "$work/logs/loss.png" ] && [ -s "$work/logs/loss.png" ]
check "prints the PNG it wrote beside metrics.jsonl: $out" $?

# The image: 800x500 pixels, and pixels of both series' colours (training, validation).
report=$("$python" - "$work/logs/loss.png" <<'PY'
import sys
import numpy as np
import matplotlib.image as mpimg
from PIL import Image
image = mpimg.imread(sys.argv[1])[:, :, :3]
def pixels(hex_colour):
    rgb = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(image - rgb).max(axis=2) < 0.02).sum())
series = Image.open(sys.argv[1]).info.get("Description", "")
print(image.shape[1], image.shape[0], pixels("#1f77b4") > 200, pixels("#ff7f0e") > 50, series)
PY
)
[ "$report" = "800 500 True True series: training, validation" ]
check "800x500, both curves drawn, metadata names two series: $report" $?

# --output anywhere, and a metrics.jsonl path instead of the directory.
out=$("$python" "$plot" "$work/logs/metrics.jsonl" --output "$work/elsewhere/curve.png" 2>&1)
[ $? -eq 0 ] && [ -s "$work/elsewhere/curve.png" ]
check "--output to a new directory: $out" $?

# Errors name the file and what is wrong.
expect_failure "$work/none: no such file" "$python" "$plot" "$work/none"
printf '{"iteration": 1, "learning_rate": 0.1}\n' >"$work/empty.jsonl"
expect_failure "$work/empty.jsonl: no lm_loss or validation_lm_loss records" "$python" "$plot" "$work/empty.jsonl"
printf '{"iteration": 1, "lm_loss": 2}\nnot json\n' >"$work/bad.jsonl"
expect_failure "$work/bad.jsonl:2: not JSON" "$python" "$plot" "$work/bad.jsonl"

finish plot_losses_cli
