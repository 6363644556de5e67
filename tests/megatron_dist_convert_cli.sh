#!/usr/bin/env bash
# tessera convert --loader megatron on Megatron-LM's torch_dist checkpoints (iter_N/metadata.json, common.pt,
# PyTorch DCP's .metadata and __R_0.distcp), written by PyTorch's own DCP writer (FileSystemWriter, driven as
# the 4 ranks of a tensor 2 x pipeline 2 job drive it: tests/megatron_fixture.py --format torch_dist) with
# Megatron-Core's sharded keys (layers stacked on a leading axis, each tensor rank's shard a chunk, SwiGLU's
# fc1 as gate and up chunks or as the keys _w/_v):
#  * the converted model's loss (tessera debug-forward) equals a plain PyTorch forward over the whole weights
#    (relative 1e-5), and the same weights saved in the legacy format convert to the same loss, bit for bit;
#  * the format is found by itself, the iteration and args (from common.pt) are carried, flags win;
#  * a truncated .metadata, a chunk pointing past its file's end, a damaged item, the removed zarr backend,
#    args that disagree with the tensors are refused naming the file and key; train --load of such a
#    directory with incomplete optimizer state names the key missing.
set -uo pipefail
tessera=${1:?usage: megatron_dist_convert_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens="3,17,5,9,40,1,0,22,31,7,8,12,2"

# Every fixture in one Python (importing torch once): NAME STYLE SCHEME [options], one a line. Each
# reference loss goes to $work/NAME/reference.
out=$("$python" -W ignore - "$here" "$work" "$tokens" <<'PY' 2>&1
import contextlib, io, os, sys
sys.path.insert(0, sys.argv[1])
import megatron_fixture
work, tokens = sys.argv[2], sys.argv[3]
for line in """gpt2_dist gpt2 mcore --format torch_dist
llama_dist llama te --dtype bfloat16 --format torch_dist --rng-seed 4321
llama_legacy llama te --dtype bfloat16 --rng-seed 4321
llama_singleton llama mcore --format torch_dist --singleton --release
moe_dist gpt2 mcore --format torch_dist --pp 1 --set num_experts=4""".splitlines():
    name, style, scheme, *options = line.split()
    sys.argv = ["megatron_fixture.py", f"{work}/{name}/megatron", style, scheme, tokens] + options
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        megatron_fixture.main()
    with open(f"{work}/{name}/reference", "w") as f:
        f.write(printed.getvalue().split("reference loss: ")[1].strip())
PY
)
check "the fixtures (PyTorch's DCP writer): $out" $?

# loss_of NAME: the converted model's debug-forward loss (the fp32 "loss" of its safetensors), printed exactly.
loss_of() {
  "$tessera" debug-forward --load "$work/$1/tessera" --tokens "$tokens" --out "$work/$1/out.safetensors" >/dev/null 2>&1 &&
    "$python" -c "
import json, struct
f = open('$work/$1/out.safetensors', 'rb')
n = struct.unpack('<Q', f.read(8))[0]
begin, end = json.loads(f.read(n))['loss']['data_offsets']
f.seek(8 + n + begin)
print(repr(struct.unpack('<f', f.read(end - begin))[0]))"
}

for name in gpt2_dist llama_dist llama_legacy llama_singleton; do
  out=$("$tessera" convert --loader megatron --load-dir "$work/$name/megatron" --save-dir "$work/$name/tessera" 2>&1)
  check "$name: convert: $out" $?
  echo "$out" >"$work/$name/convert.log"
  loss=$(loss_of "$name")
  check "$name: debug-forward: $loss" $?
  ref=$(cat "$work/$name/reference")
  out=$("$python" -c "
loss, ref = $loss, $ref
rel = abs(loss - ref) / abs(ref)
print(f'tessera loss {loss:.9e}, PyTorch reference {ref:.9e}, relative difference {rel:.2e}')
raise SystemExit(0 if rel <= 1e-5 else 1)" 2>&1)
  check "$name: loss equals the PyTorch reference: $out" $?
  echo "$name: $out"
  echo "$loss" >"$work/$name/loss"
done

# The same bf16 weights in both of Megatron's formats give the same model, bit for bit.
[ "$(cat "$work/llama_dist/loss")" = "$(cat "$work/llama_legacy/loss")" ]
ok=$?
check "torch_dist and legacy conversions of the same weights give the same loss: $(cat "$work/llama_dist/loss") vs $(cat "$work/llama_legacy/loss")" $ok

# What is carried: the iteration (a release is 0), the args of common.pt, the skipped optimizer state named.
index="$work/llama_dist/tessera/iter_0000020/index.json"
grep -q '"num_query_groups": *2' "$index" && grep -q '"untie_embeddings_and_output_weights": *true' "$index" &&
  grep -q '"format": *"megatron torch_dist"' "$index" && grep -q '"consumed_train_samples": *640' "$index"
ok=$?
check "the iteration, GQA, untied output and consumed samples come from common.pt's args: $(ls "$work/llama_dist/tessera")" $ok
[ -d "$work/llama_singleton/tessera/iter_0000000" ]
ok=$?
check "a release torch_dist checkpoint converts to iteration 0: $(ls "$work/llama_singleton/tessera")" $ok
grep -qF "optimizer state (1 optimizer.* entries) is not carried" "$work/llama_dist/convert.log"
ok=$?
check "the optimizer entries are named as not carried: $(cat "$work/llama_dist/convert.log")" $ok
# The RNG state: the seed its CUDA generators were seeded with (4321, args' 1234) is Tessera's, in both formats
# (torch_dist's rng_state ShardedObject, the legacy file's rng_state list), with a note; the fixture without
# CUDA states keeps the args' seed.
for name in llama_dist llama_legacy; do
  grep -q '"seed": *4321' "$work/$name/tessera/iter_0000020/index.json" &&
    grep -qF "rng_state's CUDA generator was seeded with 4321 but the args say seed 1234" "$work/$name/convert.log"
  check "$name: the RNG state's seed 4321 is carried, with a note: $(cat "$work/$name/convert.log")" $?
done
grep -q '"seed": *1234' "$work/gpt2_dist/tessera/iter_0000020/index.json" &&
  grep -qF "rng_state has no CUDA generator state" "$work/gpt2_dist/convert.log"
check "gpt2_dist: without a CUDA generator state the args' seed 1234 is kept: $(cat "$work/gpt2_dist/convert.log")" $?
out=$("$tessera" convert --loader megatron --load-dir "$work/gpt2_dist/megatron" --ckpt-step 20 \
      --save-dir "$work/step" 2>&1)
check "--ckpt-step 20 converts a torch_dist checkpoint: $out" $?

dir="$work/gpt2_dist/megatron/iter_0000020"
# A flag given wins over the saved args; a shape it then disagrees with names .metadata and the key.
expect_failure "$dir/.metadata: decoder.layers.mlp.linear_fc1.weight has shape [4, 64, 32] ([64, 32] per layer) but the model the checkpoint's args (and the flags given) describe needs [80, 32] per layer" \
  "$tessera" convert --loader megatron --load-dir "$work/gpt2_dist/megatron" --ffn-hidden-size 80 --save-dir "$work/x1"

# Damage, each copy named in the error with the key it breaks.
damaged() {  # damaged NAME: a copy of the GPT-2 checkpoint to break
  rm -rf "$work/$1"
  cp -r "$work/gpt2_dist/megatron" "$work/$1"
  echo "$work/$1/iter_0000020"
}
d=$(damaged truncated_metadata)
head -c 600 "$dir/.metadata" >"$d/.metadata"
expect_failure "$d/.metadata: byte" \
  "$tessera" convert --loader megatron --load-dir "$work/truncated_metadata" --save-dir "$work/x2"
[ ! -e "$work/x2" ]
check "a failed conversion leaves no --save-dir" $?
d=$(damaged truncated_data)
head -c 20000 "$dir/__1_0.distcp" >"$d/__1_0.distcp"
expect_failure "$d/__1_0.distcp: item 'decoder.layers." \
  "$tessera" convert --loader megatron --load-dir "$work/truncated_data" --save-dir "$work/x3"
expect_failure "run past the end of the file, which has 20000 bytes (truncated?)" \
  "$tessera" convert --loader megatron --load-dir "$work/truncated_data" --save-dir "$work/x3"
d=$(damaged bad_item)
# Zero the middle of the first data file: inside some item's archive.
size=$(stat -c %s "$dir/__0_0.distcp")
"$python" -c "
f = open('$d/__0_0.distcp', 'r+b'); f.seek($size // 2 - 2000); f.write(bytes(4000))"
out=$("$tessera" convert --loader megatron --load-dir "$work/bad_item" --save-dir "$work/x4" 2>&1)
[ $? -ne 0 ] && grep -qE "__0_0.distcp: item '[^']+'.*bytes \[[0-9]+, [0-9]+\)" <<<"$out"
check "a damaged item names its file, key and bytes: $out" $?
d=$(damaged zarr)
echo '{"sharded_backend": "zarr", "sharded_backend_version": 1, "common_backend": "torch"}' >"$d/metadata.json"
expect_failure "sharded_backend 'zarr': Megatron-LM removed the zarr format" \
  "$tessera" convert --loader megatron --load-dir "$work/zarr" --save-dir "$work/x5"
d=$(damaged no_common)
rm "$d/common.pt"
expect_failure "$d/common.pt is missing: it holds the checkpoint's args" \
  "$tessera" convert --loader megatron --load-dir "$work/no_common" --save-dir "$work/x6"

# train --load of a Megatron directory resumes it (tests/megatron_resume_cli.sh); this one's optimizer state is
# incomplete (one optimizer.* entry), which is named, and --no-load-optim takes the weights alone.
# --ckpt-format zarr is refused.
gpt2="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 64 --seq-length 16
      --max-position-embeddings 16 --mock-data --tokenizer-type NullTokenizer --vocab-size 40
      --make-vocab-size-divisible-by 8 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 21
      --eval-iters 0"
expect_failure "has no optimizer.state.exp_avg.embedding.word_embeddings.weight (Adam's state of embedding.word_embeddings.weight): the checkpoint's optimizer state is incomplete" \
  "$tessera" train $gpt2 --load "$work/gpt2_dist/megatron"
out=$("$tessera" train $gpt2 --load "$work/gpt2_dist/megatron" --no-load-optim 2>&1)
[ $? -eq 0 ] && grep -qF "iteration       21/      21 |" <<<"$out"
check "train --load of the torch_dist directory with --no-load-optim resumes at iteration 21: $out" $?
# Args of a mixture of experts over dense tensors: the first expert tensor missing is named.
expect_failure "moe_dist/megatron/iter_0000020/.metadata holds no tensor for decoder.layers.0.mlp.router.weight" \
  "$tessera" convert --loader megatron --load-dir "$work/moe_dist/megatron" --save-dir "$work/x7"
expect_failure "--ckpt-format=zarr: Megatron-LM removed the zarr format (January 2026)" \
  "$tessera" train $gpt2 --ckpt-format zarr

finish megatron_dist_convert_cli
