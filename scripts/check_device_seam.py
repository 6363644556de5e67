#!/usr/bin/env python3
"""The device-seam check: the code a training step runs on a device never touches tensor memory
(docs/ARCHITECTURE.md, "Device seam").

Every computation of src/model/, src/optim/ and src/pipeline/ (the model, its optimizers and the
schedules that run it) is a kernel call (kernels/<name>.h) dispatched on the tensors' device, so they run
wherever the kernels do (a GPU: tessera train --device cuda). This fails (exit 1), naming the file, the
line and what it found, when a non-test file of those folders (*.cc and *.h, tests and testing helpers
excepted)
  - takes a tensor's memory: .f32(), .bf16(), .i32(), .i64(), .raw(), .data<...>(), or
  - declares a pointer to numbers (float*, double*, int32_t*, int64_t*, uint16_t*), with which a host loop
    would read or write such memory.
Comments are not read.
Usage: scripts/check_device_seam.py [ROOT]   (ROOT: the repository, by default this script's parent's parent)
"""
import pathlib
import re
import sys

TEST_FILE = re.compile(r"(_test\.cc|testing\.h|_test_main\.h)$")
RULES = [
    (re.compile(r"\.(f32|bf16|i32|i64|raw)\s*\(\s*\)"), "takes a tensor's memory"),
    (re.compile(r"\.data\s*<"), "takes a tensor's memory"),
    (re.compile(r"\b(float|double|u?int(8|16|32|64)_t)\s*(const\s*)?\*"), "declares a pointer to numbers"),
]
COMMENT = re.compile(r"//.*$")
LAYERS = ("model", "optim", "pipeline")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    errors = []
    files = sorted(p for layer in LAYERS for p in (root / "src" / layer).glob("*")
                   if p.suffix in (".cc", ".h") and not TEST_FILE.search(p.name))
    for path in files:
        layer = path.parent.name
        for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = COMMENT.sub("", text)
            for rule, what in RULES:
                m = rule.search(code)
                if m:
                    errors.append(f"{path.relative_to(root)}:{number}: {text.strip()}: {layer} code {what} "
                                  f"({m.group(0).strip()}); call a tensor-level kernel (kernels/<name>.h) instead")
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        print(f"check_device_seam: {len(errors)} problem(s)")
        return 1
    print(f"check_device_seam: OK ({len(files)} files of src/{{{','.join(LAYERS)}}}/ call kernels for all tensor memory)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
