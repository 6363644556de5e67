#!/usr/bin/env bash
# scripts/plot_gpu_train.py on bench_gpu_train's table lines (as gpu_check.sh's log holds them, other output
# around them): a PNG with one bar per result (found by the bars' colour in the decoded image), the
# results named in its metadata in the order found, and clear errors naming the file.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
python=/usr/bin/python3
"$python" -c "import matplotlib" 2>/dev/null || skip "no matplotlib for $python (scripts/setup.sh installs python3-matplotlib)"
plot="$root/scripts/plot_gpu_train.py"

heading='model      type  attention    ms/step     tokens/s      TFLOP/s       loss      MFU  (MFU against 989 TFLOP/s dense)'
cat >"$work/log.txt" <<TXT
=== bench_gpu_train gpt2-124M fp32
bench_gpu_train: gpt2-124M on NVIDIA H200, fp32, micro-batch 8 x 1024, 10 steps after 3 warm-up
$heading
gpt2-124M  fp32  tiled          500.0        16384         14.0     8.7209    1.40%
=== gpu_check summary
kernels_cuda_adamw_test                  rc=0      0s  4 PASSED
TXT
printf '%s\ngpt2-124M  bf16  rows          1000.0         8192          7.0     8.7192    0.70%%\n' "$heading" >"$work/rows.txt"

out=$("$python" "$plot" "$work/log.txt" "$work/rows.txt" --output "$work/png/bars.png" 2>&1)
[ $? -eq 0 ] && [ "$out" = "$work/png/bars.png" ] && [ -s "$work/png/bars.png" ]
check "plot_gpu_train.py writes the PNG it prints, in a new directory: $out" $?

# The bars' colour covers about as many pixels as two bars, the first twice the second's length.
report=$("$python" - "$work/png/bars.png" <<'PY'
import sys
import numpy as np
import matplotlib.image as mpimg
from PIL import Image
image = mpimg.imread(sys.argv[1])[:, :, :3]
green = (np.abs(image - np.array([0x2c, 0xa0, 0x2c]) / 255).max(axis=2) < 0.02)
rows = [r for r in range(green.shape[0]) if green[r].sum() > 10]
lengths = sorted({int(green[r].sum()) for r in rows})
print(len(rows) > 20, round(lengths[-1] / lengths[0]), Image.open(sys.argv[1]).info.get("Description", ""))
PY
)
[ "$report" = "True 2 results: gpt2-124M fp32, tiled attention, gpt2-124M bf16, rows attention" ]
check "bars drawn, the longer twice the shorter, results named in the order found: $report" $?

# Errors name the file and what is wrong.
expect_failure "$work/none: No such file or directory" "$python" "$plot" "$work/none" --output "$work/x.png"
echo "nothing here" >"$work/empty.txt"
expect_failure "$work/empty.txt: no bench_gpu_train result lines" "$python" "$plot" "$work/empty.txt" --output "$work/x.png"
printf '%s\ngpt2-124M bf16 rows\n' "$heading" >"$work/cut.txt"
expect_failure "$work/cut.txt: the line after a heading is not a result: 'gpt2-124M bf16 rows'" \
  "$python" "$plot" "$work/cut.txt" --output "$work/x.png"

finish plot_gpu_train_cli
