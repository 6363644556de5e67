#!/usr/bin/env bash
# The dependency guard: after a build, maps every file the build and the tests used (headers from the
# compiler's dependency info, linked and loaded libraries, the CMake files and tools CMake found, the
# executables and Python modules the tests call) to its Debian package, and fails when a package is
# neither in scripts/setup.sh's list nor a hard dependency (Depends, Pre-Depends) of one, nor part of the
# base system (Essential or Priority: required). A fresh machine has nothing else.
# Usage: scripts/check_deps.sh [--verbose] [--packages LIST_FILE] BUILD_DIR
#   --verbose: one line per package used, with a file that needed it (and the files no package owns).
#   --packages: check against the packages in LIST_FILE (one or more a line, # comments) instead of
#   `scripts/setup.sh --list` (tests/check_deps_cli.sh uses it to remove a package).
set -euo pipefail
exec python3 "$(dirname "$0")/check_deps.py" "$@"
