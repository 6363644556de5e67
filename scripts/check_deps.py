#!/usr/bin/env python3
"""The dependency guard (run by scripts/check_deps.sh; see there for usage).

A fresh machine has only what scripts/setup.sh installs (with --no-install-recommends) plus the base
system. This maps every file the build and the tests actually used to its Debian package and fails
when a package is outside that set, so a missing line in setup.sh shows up here rather than on the
next new machine. Standard library only, so that it needs nothing setup.sh does not install.
"""

import glob
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP = os.path.join(ROOT, "scripts", "setup.sh")

# CMake cache tools that are options of the person building, not needs of the project.
OPTIONAL_CACHE_ENTRIES = {"CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_C_COMPILER_LAUNCHER"}


def run(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if check and r.returncode != 0:
        sys.exit("check_deps: `%s` failed (exit %d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r


def outside(path, build_dir):
    """True for files a Debian package could own: not the repository, not the build directory."""
    return not (path.startswith(ROOT + os.sep) or path.startswith(build_dir + os.sep))


# ---------------------------------------------------------------------------------------------------
# What the build used: file -> why (the first evidence found, for the error message)

def header_deps(build_dir, used):
    # Ninja's log of the compiler's -MD output: "target: #deps N, ..." then one indented path a line.
    out = run(["ninja", "-C", build_dir, "-t", "deps"]).stdout
    target = None
    for line in out.splitlines():
        if line and not line[0].isspace():
            target = line.split(":")[0]
        elif line.strip():
            p = os.path.normpath(os.path.join(build_dir, line.strip()))
            used.setdefault(p, "included by " + target)


def cmake_inputs(build_dir, used):
    # The RERUN_CMAKE edge's implicit inputs are every file CMake read while configuring.
    with open(os.path.join(build_dir, "build.ninja")) as f:
        for line in f:
            if line.startswith("build build.ninja") and "RERUN_CMAKE" in line:
                for p in line.split("|", 1)[1].split():
                    used.setdefault(os.path.normpath(os.path.join(build_dir, p)), "read by CMake's configure")


def cache_value(build_dir, name):
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.rstrip("\n").split("=", 1)[1]
    return None


def cmake_cache(build_dir, used, notes):
    """Tools and libraries CMake found (FILEPATH entries), and the pkg-config modules it read."""
    pc_modules = []
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"([A-Za-z0-9_.+-]+):(FILEPATH|STRING|INTERNAL)=(.*)$", line.rstrip("\n"))
            if not m:
                continue
            name, kind, value = m.groups()
            if name in OPTIONAL_CACHE_ENTRIES:
                if value:
                    notes.append("%s=%s not checked (a choice of whoever builds, not a need)" % (name, value))
            elif kind == "FILEPATH" and value.startswith("/") and os.path.isfile(value):
                used.setdefault(value, "CMake cache %s" % name)
            elif name in ("CMAKE_COMMAND", "CMAKE_CTEST_COMMAND") and os.path.isfile(value):
                used.setdefault(value, "CMake cache %s" % name)
            elif name.startswith("__pkg_config_arguments_"):
                keywords = {"REQUIRED", "QUIET", "IMPORTED_TARGET", "GLOBAL", "NO_CMAKE_PATH",
                            "NO_CMAKE_ENVIRONMENT_PATH"}
                pc_modules += [re.split(r"[<>=]", a)[0] for a in value.split(";") if a and a not in keywords]
    for mod in pc_modules:
        r = run(["pkg-config", "--path", mod], check=False)
        if r.returncode == 0 and r.stdout.strip():
            used.setdefault(r.stdout.strip(), "pkg-config module %s" % mod)
    # What the compiler driver runs; CMake records only the driver.
    cxx = next((p for p, why in used.items() if why == "CMake cache CMAKE_CXX_COMPILER"), None)
    if cxx:
        for prog in ("cc1plus", "as", "ld", "collect2"):
            r = run([cxx, "-print-prog-name=" + prog], check=False)
            p = r.stdout.strip()
            if not p.startswith("/"):
                p = find_executable(p) or ""
            if os.path.isfile(p):
                used.setdefault(p, "run by %s (%s)" % (cxx, prog))


def linked_libraries(build_dir, used):
    """Libraries on the link lines (static ones leave no other trace), and what the binaries load."""
    names = set()
    with open(os.path.join(build_dir, "build.ninja")) as f:
        for line in f:
            s = line.strip()
            if s.startswith("LINK_LIBRARIES =") or s.startswith("LINK_FLAGS ="):
                for tok in s.split("=", 1)[1].split():
                    if tok.startswith("/") and os.path.isfile(tok):
                        used.setdefault(tok, "linked (build.ninja)")
                    elif tok.startswith("-l") and len(tok) > 2:
                        names.add(tok[2:])
    cxx = cache_value(build_dir, "CMAKE_CXX_COMPILER")
    for name in sorted(names):  # -lNAME: the file the compiler driver would pick
        for lib in ("lib%s.so" % name, "lib%s.a" % name):
            p = run([cxx, "-print-file-name=" + lib], check=False).stdout.strip() if cxx else ""
            if p.startswith("/") and os.path.exists(p):
                used.setdefault(os.path.normpath(p), "linked as -l%s (build.ninja)" % name)
                break
    elfs = []
    for p in sorted(glob.glob(os.path.join(build_dir, "*"))):
        if os.path.isfile(p) and (os.access(p, os.X_OK) or p.endswith(".so")):
            with open(p, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    elfs.append(p)
    # ldd runs the dynamic loader over each binary (CUDA's libraries included): a second per few binaries.
    # The loader resolves the same NEEDED lists to the same files, so one binary of each distinct list is
    # enough (the test binaries share a handful); readelf reads every list in one quick pass.
    if len(elfs) > 1:  # (with one file readelf prints no "File:" header)
        needed, who = {}, None
        for line in run(["readelf", "-d", "-W"] + elfs, check=False).stdout.splitlines():
            if line.startswith("File: "):
                who = line[6:].strip()
            elif "(NEEDED)" in line and who:
                needed.setdefault(who, []).append(line.rsplit("[", 1)[-1].rstrip("]"))
        representatives = {}
        for p in elfs:
            representatives.setdefault(tuple(needed.get(p, [])), p)
        elfs = sorted(representatives.values())
    for i in range(0, len(elfs), 50):
        batch = elfs[i:i + 50]
        out = run(["ldd"] + batch, check=False).stdout
        who = os.path.basename(batch[0])  # with one file, ldd prints no "file:" header
        for line in out.splitlines():
            if not line.startswith("\t"):
                who = os.path.basename(line.rstrip(":"))
                continue
            m = re.search(r"=> (/\S+)", line) or re.match(r"\s*(/\S+)", line)
            if m:
                used.setdefault(m.group(1), "loaded by " + who)
            elif "not found" in line:
                used.setdefault("MISSING:" + line.split()[0], "loaded by " + who)


# ---------------------------------------------------------------------------------------------------
# What the tests run by name: executables and Python modules

SHELL_WORDS = set()  # bash builtins and keywords: `test`, `kill`, `echo` run inside bash, not from PATH
WRAPPERS = {"nice", "timeout", "env", "exec", "command", "nohup", "time", "setsid", "stdbuf"}


def find_executable(name):
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def shell_commands(text):
    """Command names at command position in a shell script: a light reading, not a parser."""
    names = set()
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        for seg in re.split(r"\|\||&&|[|;&`(){}]|\$\(|\bthen\b|\bdo\b|\belse\b|\bif\b|\bwhile\b|\buntil\b|!", line):
            try:
                words = shlex.split(seg, posix=True)
            except ValueError:
                words = seg.split()
            while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in WRAPPERS
                             or re.match(r"^-|^\d+[smh]?$", words[0])):
                if words[0] in WRAPPERS:
                    names.add(words[0])
                words = words[1:]
            if words and re.match(r"^[A-Za-z0-9_./+-]+$", words[0]):
                names.add(words[0])
        # var=/usr/bin/tool: a tool picked by its path (tests/hf_parity.sh's python)
        for m in re.finditer(r"\b[A-Za-z_][A-Za-z0-9_]*=(/usr/[A-Za-z0-9_./+-]+)", line):
            names.add(m.group(1))
    return names


def cxx_commands(text):
    """First words of the strings the C++ tests hand to std::system/popen, and absolute tool paths."""
    names = set()
    for m in re.finditer(r"(?:std::system|popen)\(\s*\"([A-Za-z0-9_./+-]+)", text):
        names.add(m.group(1))
    for m in re.finditer(r"\"(/usr/bin/[A-Za-z0-9_.+-]+)\"", text):
        names.add(m.group(1))
    return names


def test_tools(used, notes):
    global SHELL_WORDS
    SHELL_WORDS = set(run(["bash", "-c", "compgen -b; compgen -k"]).stdout.split())
    scripts = sorted(glob.glob(os.path.join(ROOT, "tests", "*.sh")) + glob.glob(os.path.join(ROOT, "tests", "lib", "*.sh"))
                     + [os.path.join(ROOT, "scripts", s) for s in ("test.sh", "build.sh", "check_deps.sh")]
                     + glob.glob(os.path.join(ROOT, "scripts", "fetch_*.sh")))  # not setup.sh: it runs before any
    cxx = sorted(glob.glob(os.path.join(ROOT, "src", "**", "*_test.cc"), recursive=True)
                 + glob.glob(os.path.join(ROOT, "src", "**", "*_testing.h"), recursive=True))
    found = {}
    for path in scripts + cxx:
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in (shell_commands(text) if path.endswith(".sh") else cxx_commands(text)):
            found.setdefault(name, os.path.relpath(path, ROOT))
    interpreters = set()
    for name, where in sorted(found.items()):
        if name in SHELL_WORDS and "/" not in name:
            continue
        p = name if name.startswith("/") else (None if "/" in name else find_executable(name))
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            used.setdefault(p, "run by name in " + where)
            if os.path.basename(name).startswith("python3"):
                interpreters.add(p)
    python_modules(used, notes, interpreters)


def python_modules(used, notes, interpreters):
    """The modules the tests' Python imports, resolved by each interpreter the tests name."""
    files = (glob.glob(os.path.join(ROOT, "tests", "*.py")) + glob.glob(os.path.join(ROOT, "tests", "*.sh"))
             + glob.glob(os.path.join(ROOT, "src", "**", "testdata", "*.py"), recursive=True))
    mods = {}
    for path in sorted(files):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"\s*(?:import\s+([A-Za-z0-9_., ]+)|from\s+([A-Za-z0-9_]+)[A-Za-z0-9_.]*\s+import\b)", line)
                if m:
                    for mod in (m.group(1) or m.group(2)).split(","):
                        mod = mod.split(" as ")[0].strip().split(".")[0]
                        if mod:
                            mods.setdefault(mod, os.path.relpath(path, ROOT))
    local = {os.path.splitext(os.path.basename(p))[0] for p in files}
    probe = ("import importlib.util, sys\n"
             "for m in sys.argv[1:]:\n"
             "    try: s = importlib.util.find_spec(m)\n"
             "    except Exception: s = None\n"
             "    print(m, (s.origin if s and s.origin else '-') if s else '-')\n")
    todo = sorted(m for m in mods if m not in local)
    # Debian's interpreter first: on a fresh machine `python3` is /usr/bin/python3 too.
    for py in sorted(interpreters, key=lambda p: (not p.startswith("/usr/bin/"), p)):
        out = run([py, "-c", probe] + todo, check=False).stdout
        left = []
        for line in out.splitlines():
            mod, origin = line.split(" ", 1)
            if origin.startswith("/"):
                used.setdefault(origin, "python module %s (%s, by %s)" % (mod, mods[mod], py))
            elif origin == "-":
                left.append(mod)
            # "built-in"/"frozen": part of the interpreter itself
        todo = left
    for mod in todo:
        notes.append("python module %s (%s) is importable by none of %s" % (mod, mods[mod], ", ".join(sorted(interpreters))))


# ---------------------------------------------------------------------------------------------------
# Files -> packages

def candidates(path):
    """Spellings dpkg may know a file by: as used, through its symlinks and alternatives, and across
    the merged /usr (/lib/x86_64-linux-gnu/libc.so.6 is recorded without /usr, /usr/bin/ss is /bin/ss)."""
    out = []
    for p in (path, os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)),
              os.path.realpath(path)):
        for q in (p, p[4:] if p.startswith("/usr/") else "/usr" + p):
            if q not in out:
                out.append(q)
    return out


def owners(paths):
    """path -> set of packages, one batched dpkg -S over every spelling of every path."""
    spell = {p: candidates(p) for p in paths}
    queries = sorted({q for qs in spell.values() for q in qs})
    owner = {}
    for i in range(0, len(queries), 2000):
        out = run(["dpkg-query", "-S"] + queries[i:i + 2000], check=False).stdout
        for line in out.splitlines():
            if line.startswith("diversion by"):
                continue
            pkgs, _, p = line.partition(": ")
            owner.setdefault(p, set()).update(x.strip().split(":")[0] for x in pkgs.split(","))
    return {p: next((owner[q] for q in qs if q in owner), set()) for p, qs in spell.items()}


# ---------------------------------------------------------------------------------------------------
# The allowed set

def installed_packages():
    fmt = "${Package}\\t${Status}\\t${Essential}\\t${Priority}\\t${Provides}\\t${Pre-Depends}\\t${Depends}\\t${Recommends}\\n"
    pkgs = {}
    for line in run(["dpkg-query", "-W", "-f=" + fmt]).stdout.splitlines():
        name, status, essential, priority, provides, predeps, deps, recs = (line.split("\t") + [""] * 8)[:8]
        if status.endswith(" installed"):
            pkgs[name] = dict(essential=essential == "yes", priority=priority, provides=provides,
                              depends=", ".join(x for x in (predeps, deps) if x), recommends=recs)
    return pkgs


def clauses(field):
    """'a (>= 1) | b:any, c' -> [['a', 'b'], ['c']]"""
    return [[re.split(r"[\s(:]", alt.strip())[0] for alt in c.split("|") if alt.strip()]
            for c in field.split(",") if c.strip()]


def closure(roots, pkgs):
    """roots plus their hard dependencies (Depends, Pre-Depends), recursively; of `a | b` the first
    installed one (a virtual name counts through an installed package that provides it)."""
    providers = {}
    for name, info in pkgs.items():
        for c in clauses(info["provides"]):
            providers.setdefault(c[0], []).append(name)
    seen, stack = set(), [r for r in roots if r in pkgs]
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        for alts in clauses(pkgs[p]["depends"]):
            for a in alts:
                hit = [a] if a in pkgs else sorted(providers.get(a, []))
                if hit:
                    stack += hit[:1]
                    break
    return seen


def setup_list(list_file):
    if list_file:
        with open(list_file) as f:
            names = [w for line in f for w in line.split("#")[0].split()]
        return names, list_file
    return run(["bash", SETUP, "--list"]).stdout.split(), "scripts/setup.sh --list"


def setup_line():
    """The line of setup.sh's list to extend, for the error message."""
    with open(SETUP) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("packages=("):
                return n
    return 0


# ---------------------------------------------------------------------------------------------------

def main(argv):
    args = argv[1:]
    list_file, verbose = None, False
    while args and args[0] in ("--packages", "--verbose"):
        if args[0] == "--verbose":
            verbose, args = True, args[1:]
        elif len(args) >= 2:
            list_file, args = args[1], args[2:]
        else:
            break
    if len(args) != 1 or not os.path.isfile(os.path.join(args[0], "build.ninja")):
        sys.exit("usage: scripts/check_deps.sh [--verbose] [--packages LIST_FILE] BUILD_DIR  (BUILD_DIR: a configured and "
                 "built Ninja build, e.g. build/release; got %r)" % " ".join(argv[1:]))
    build_dir = os.path.abspath(args[0])
    if not os.path.isfile(os.path.join(build_dir, ".ninja_deps")):
        sys.exit("check_deps: %s/.ninja_deps is missing: build first (scripts/build.sh release)" % build_dir)

    used, notes = {}, []
    header_deps(build_dir, used)
    cmake_inputs(build_dir, used)
    cmake_cache(build_dir, used, notes)
    linked_libraries(build_dir, used)
    test_tools(used, notes)

    missing = sorted(p[len("MISSING:"):] for p in used if p.startswith("MISSING:"))
    files = sorted(p for p in used if not p.startswith("MISSING:") and outside(p, build_dir))
    own = owners(files)
    pkgs = installed_packages()
    listed, source = setup_list(list_file)
    unknown = sorted(p for p in listed if p not in pkgs)
    base = {p for p, i in pkgs.items() if i["essential"] or i["priority"] == "required"}
    allowed = closure(set(listed) | base, pkgs)

    by_pkg, unowned = {}, []
    for p in files:
        if not own[p]:
            unowned.append(p)
        elif not own[p] & allowed:
            for pkg in sorted(own[p]):
                by_pkg.setdefault(pkg, p)
    # Who asks for a package softly: the usual cause is a Recommends that --no-install-recommends drops.
    soft = {}
    for name in sorted(allowed):
        for alts in clauses(pkgs.get(name, {}).get("recommends", "")):
            for a in alts:
                soft.setdefault(a, name)

    tops = {}
    for p in unowned:
        top = "/".join(p.split("/")[:3])
        tops[top] = tops.get(top, 0) + 1
    used_pkgs = sorted({x for s in own.values() for x in s})
    print("check_deps: %d files used, %d outside the repository and build tree, from %d packages; allowed: %d "
          "packages = %d listed in %s + %d base (Essential/required) + their hard dependencies"
          % (len(used), len(files), len(used_pkgs), len(allowed), len(listed), source, len(base)))
    print("check_deps: skipped %d files of the repository and build tree, and %d files no package owns: %s"
          % (len(used) - len(missing) - len(files), len(unowned),
             ", ".join("%s (%d)" % kv for kv in sorted(tops.items())) or "none"))
    if verbose:
        first = {}
        for p in files:
            for x in own[p]:
                first.setdefault(x, p)
        for x in used_pkgs:
            print("check_deps:   %-22s %s (%s)" % (x, first[x], used[first[x]]))
        for p in unowned:
            print("check_deps:   %-22s %s (%s)" % ("(no package)", p, used[p]))
    for n in notes:
        print("check_deps: note: " + n)
    failed = False
    if unknown:
        print("check_deps: note: listed but not installed here: %s (nothing used needs them)" % " ".join(unknown))
    for lib in missing:
        print("check_deps: FAIL: %s cannot be loaded (%s): ldd says not found" % (lib, used["MISSING:" + lib]))
        failed = True
    line = setup_line()
    for pkg, p in sorted(by_pkg.items()):
        why = (" (%s only recommends it, and setup.sh installs with --no-install-recommends)" % soft[pkg]
               if pkg in soft else "")
        print("check_deps: FAIL: package %s is used but neither listed in setup.sh nor a hard dependency of a listed "
              "package%s: %s (%s). Fix: add `%s` to packages=( at scripts/setup.sh:%d"
              % (pkg, why, p, used[p], pkg, line))
        failed = True
    print("check_deps: %s" % ("FAILED" if failed else "OK: every package used comes from setup.sh's list"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
