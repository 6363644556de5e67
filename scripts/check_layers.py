#!/usr/bin/env python3
"""The layer check: the #include graph of src/, apps/ and bench/ against the layer order and CMake.

Fails (exit 1), naming the file, the line, the include and the rule, when
  (a) a file of a layer includes a layer above it in the order (tests included), or
  (b) a layer's `tessera_layer(NAME DEPS ...)` line in CMakeLists.txt, or the link line of the
      `tessera` binary (apps/) or of a benchmark (bench/), lists other layers than its non-test
      sources include: each library links exactly the layers it uses, so the build shows the layers.
  (c) a library source of src/ (not a test) includes a test helper (`*_testing.h`): helpers are test code.
Tests are not part of (b): CMake links each test with the layers its own includes name.
Usage: scripts/check_layers.py [ROOT]   (ROOT: the repository, by default this script's parent's parent)
"""
import pathlib
import re
import sys

# Bottom up, as the "Layers" table of the design: a layer may include only the layers before it.
ORDER = ["core", "kernels", "comm", "parallel", "model", "pipeline", "optim", "data", "ckpt", "infer",
         "train", "eval", "plan", "tasks"]
RANK = {name: i for i, name in enumerate(ORDER)}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/[^"]*"')
TEST_HELPER_INCLUDE = re.compile(r'^\s*#\s*include\s*"([a-z_]+/[^"]*testing\.h)"')
# Test code: gtest files and the helpers only tests include. Their includes may not reach upward, but
# they do not count as what the layer's library uses.
TEST_FILE = re.compile(r"(_test\.cc|testing\.h|_test_main\.h)$")


def sources(folder):
    """The .cc and .h files of `folder` and its subfolders (a layer may group files, e.g. kernels/math/)."""
    return sorted(p for p in folder.rglob("*") if p.suffix in (".cc", ".h") and p.is_file())


def includes(path):
    """(line number, layer, include text) of every #include "layer/..." in `path`."""
    for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = INCLUDE.match(text)
        if m and m.group(1) in RANK:
            yield number, m.group(1), text.strip()


def cmake_commands(cmake):
    """(line number, command, arguments) of every one-line `command(arguments)` in CMakeLists.txt."""
    for number, text in enumerate(cmake.read_text().splitlines(), 1):
        m = re.match(r"\s*(tessera_layer|add_executable|target_link_libraries)\((.*)\)\s*(#.*)?$", text)
        if m:
            yield number, m.group(1), m.group(2).split()


def layer_deps(args):
    """The layers among CMake link arguments (tessera_X); external libraries are left to CMake."""
    return {a[len("tessera_"):] for a in args if a.startswith("tessera_") and a[len("tessera_"):] in RANK}


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    cmake = root / "CMakeLists.txt"
    errors = []

    # Units whose link line is checked: name -> (CMake line, linked layers, source files).
    units = {}
    executables = {}  # target -> its source files
    links = {}        # target -> (line, linked layers)
    for number, command, args in cmake_commands(cmake):
        if command == "tessera_layer":
            name = args[0]
            deps = layer_deps(args[args.index("DEPS") + 1:] if "DEPS" in args else [])
            if name not in RANK:
                errors.append(f"CMakeLists.txt:{number}: tessera_layer({name}): {name} is not in the layer order "
                              f"of scripts/check_layers.py ({' < '.join(ORDER)}); add it there and to the design")
                continue
            files = sources(root / "src" / name)
            units[name] = (number, deps, files)
        elif command == "add_executable" and not args[0].startswith("$"):
            executables[args[0]] = args[1:]
        elif command == "target_link_libraries" and not args[0].startswith("$"):
            links[args[0]] = (number, layer_deps(args[1:]))
    for target, listed in executables.items():
        if target not in links:
            continue
        if listed == ["${app_srcs}"]:  # the tessera binary: every file in apps/
            files = sources(root / "apps")
        else:
            files = [root / s for s in listed if s.startswith(("apps/", "bench/"))]
        if files:
            units[target] = (links[target][0], links[target][1], files)

    for layer_dir in sorted((root / "src").iterdir()):
        if layer_dir.is_dir() and layer_dir.name not in units and layer_dir.name in RANK:
            errors.append(f"src/{layer_dir.name}/: no tessera_layer({layer_dir.name} ...) line in CMakeLists.txt")
        elif layer_dir.is_dir() and layer_dir.name not in RANK and any(layer_dir.rglob("*.cc")):
            errors.append(f"src/{layer_dir.name}/: not in the layer order of scripts/check_layers.py "
                          f"({' < '.join(ORDER)})")

    # (a) nothing reaches upward: every file of src/<layer>/, tests too.
    for layer in ORDER:
        for path in sources(root / "src" / layer):
            for number, used, text in includes(path):
                if RANK[used] > RANK[layer]:
                    errors.append(f"{path.relative_to(root)}:{number}: {text}: {layer} may not include {used}, "
                                  f"a layer above it (the order, bottom up: {' < '.join(ORDER)})")

    # (b) each unit links exactly the layers its non-test sources include.
    for name, (number, deps, files) in units.items():
        used = {}  # layer -> first include of it
        for path in files:
            if TEST_FILE.search(path.name):
                continue
            for line, layer, text in includes(path):
                if layer != name:
                    used.setdefault(layer, f"{path.relative_to(root)}:{line}: {text}")
        # A layer above is rule (a)'s to report: linking it would only hide the reach upward.
        missing = {layer for layer in set(used) - deps if name not in RANK or RANK[layer] < RANK[name]}
        for layer in sorted(missing, key=RANK.get):
            errors.append(f"CMakeLists.txt:{number}: {name} lacks tessera_{layer}: {used[layer]} "
                          f"(a unit links exactly the layers it includes; add tessera_{layer} on that line)")
        for layer in sorted(deps - set(used), key=RANK.get):
            errors.append(f"CMakeLists.txt:{number}: {name} links tessera_{layer}, which none of its sources "
                          f"includes (a unit links exactly the layers it includes; remove it from that line)")

    # (c) test helpers stay out of the libraries: a `*_testing.h` is included by tests (and benchmarks) only.
    for layer in ORDER:
        for path in sources(root / "src" / layer):
            if TEST_FILE.search(path.name):
                continue
            for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = TEST_HELPER_INCLUDE.match(text)
                if m:
                    errors.append(f"{path.relative_to(root)}:{number}: {text.strip()}: a library source may not "
                                  f"include a test helper (*_testing.h is test code)")

    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        print(f"check_layers: {len(errors)} problem(s)")
        return 1
    print(f"check_layers: OK ({len(units)} libraries and executables, {len(ORDER)} layers in order)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
