#!/usr/bin/env python3
"""The device-seam check: only the kernels take the memory of a tensor wherever it lives; the model never
takes it, and the other layers only where it is host memory (docs/architecture/model.md, `model/`, and
docs/contributing.md).

Every computation of src/model/, src/optim/ and src/pipeline/ (the model, its optimizers and the
schedules that run it) is a kernel call (kernels/<name>.h) dispatched on the tensors' device, so they run
wherever the kernels do (a GPU: tessera train --device cuda). The other layers (train, ckpt, comm, infer,
eval, plan, parallel, data, ...) and the commands (apps/) read and write host tensors through the host
accessors (Tensor::host_f32() and the like), which refuse a tensor on a device rather than read its memory
as the host's. src/core/ and src/kernels/ take any device's memory for that device's code and are not read,
nor is src/comm/cuda/ (the NCCL process group: it hands a GPU's memory to NCCL, device code compiled only
in the CUDA build).
This fails (exit 1), naming the file, the line, what it found and what to do instead, when a non-test
file (*.cc and *.h, tests and testing helpers excepted)
  - takes a tensor's memory with the raw accessors: .f32(), .bf16(), .i32(), .i64(), .raw(), .data<...>(),
  - or, in model, optim and pipeline, takes it with the host accessors (.host_f32(), ...) or declares a
    pointer to numbers (float*, double*, int32_t*, int64_t*, uint16_t*), with which a host loop would
    read or write such memory.
Comments are not read.
Usage: scripts/check_device_seam.py [ROOT]   (ROOT: the repository, by default this script's parent's parent)
"""
import pathlib
import re
import sys

TEST_FILE = re.compile(r"(_test\.cc|testing\.h|_test_main\.h)$")
ACCESSOR = re.compile(r"\.(f32|bf16|i32|i64|raw)\s*\(\s*\)")
RAW = [
    (ACCESSOR, "takes a tensor's memory"),
    (re.compile(r"\.data\s*<"), "takes a tensor's memory"),
]
HOST = [
    (re.compile(r"\.host_(f32|bf16|i32|i64|raw)\s*\(\s*\)"), "takes a tensor's memory"),
    (re.compile(r"\b(float|double|u?int(8|16|32|64)_t)\s*(const\s*)?\*"), "declares a pointer to numbers"),
]
COMMENT = re.compile(r"//.*$")
KERNEL_LAYERS = ("core", "kernels")  # not read: they take any device's memory, for that device's code
DEVICE_LAYERS = ("model", "optim", "pipeline")  # they run on the device: kernels only
DEVICE_CODE = (("src", "comm", "cuda"),)  # not read: collectives on a GPU's memory (NCCL), CUDA build only


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    folders = [p for p in sorted((root / "src").iterdir()) if p.is_dir() and p.name not in KERNEL_LAYERS]
    errors = []
    files = sorted(p for folder in folders + [root / "apps"] for p in folder.rglob("*")
                   if p.suffix in (".cc", ".h") and not TEST_FILE.search(p.name))
    for path in files:
        where = path.relative_to(root).parts
        if any(where[:len(folder)] == folder for folder in DEVICE_CODE):
            continue
        layer = where[1] if where[0] == "src" else where[0]  # src/<layer>/... or apps/...
        on_device = layer in DEVICE_LAYERS
        for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = COMMENT.sub("", text)
            for rule, what in RAW + HOST if on_device else RAW:
                m = rule.search(code)
                if not m:
                    continue
                if on_device:
                    instead = "call a tensor-level kernel (kernels/<name>.h) instead"
                else:
                    host = f".host_{m.group(1)}()" if rule is ACCESSOR else ".host_f32(), .host_raw(), ..."
                    instead = (f"use the host accessor ({host}: core/tensor.h), which refuses a tensor on a "
                               "device; copy such a tensor to the host first (kernels::to_device)")
                errors.append(f"{path.relative_to(root)}:{number}: {text.strip()}: {layer} code {what} "
                              f"({m.group(0).strip()}); {instead}")
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        print(f"check_device_seam: {len(errors)} problem(s)")
        return 1
    print(f"check_device_seam: OK ({len(files)} files: src/{{{','.join(DEVICE_LAYERS)}}}/ call kernels for all "
          "tensor memory, the other layers and apps/ read only host tensors, through the host accessors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
