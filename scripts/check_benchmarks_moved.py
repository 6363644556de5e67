#!/usr/bin/env python3
"""Check that reorganising BENCHMARKS.md dropped no recorded number.

Every table row that holds a digit and every line of a fenced code block (the commands) in the old
BENCHMARKS.md (a git revision, default HEAD) must appear, leading whitespace aside, in the new
BENCHMARKS.md or in a file under bench/results/. Every image a markdown file links must exist at its
relative path. Exit 1, listing what is missing, otherwise 0.

    scripts/check_benchmarks_moved.py [OLD_REVISION]
"""
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
rev = sys.argv[1] if len(sys.argv) > 1 else 'HEAD'
old = subprocess.run(['git', '-C', str(root), 'show', f'{rev}:BENCHMARKS.md'], check=True,
                     capture_output=True, text=True).stdout


def recorded(text):
    rows, code, fenced = set(), set(), False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith('```'):
            fenced = not fenced
            continue
        if fenced and s:
            code.add(s)
        elif s.startswith('|') and re.search(r'\d', s):
            rows.add(s)
    return rows, code


files = [root / 'BENCHMARKS.md'] + sorted((root / 'bench' / 'results').glob('*.md'))
new_rows, new_code = set(), set()
bad_images = []
for f in files:
    text = f.read_text()
    r, c = recorded(text)
    new_rows |= r
    new_code |= c
    for target in re.findall(r'!\[[^\]]*\]\(([^)]+)\)', text):
        if not (f.parent / target).is_file():
            bad_images.append(f'{f.relative_to(root)}: {target}')

old_rows, old_code = recorded(old)
missing_rows = sorted(old_rows - new_rows)
missing_code = sorted(old_code - new_code)
for s in missing_rows:
    print('missing table row:', s)
for s in missing_code:
    print('missing command line:', s)
for s in bad_images:
    print('image not found:', s)
print(f'{len(old_rows)} table rows with numbers and {len(old_code)} command lines in {rev}:BENCHMARKS.md; '
      f'{len(missing_rows)} rows and {len(missing_code)} command lines missing from BENCHMARKS.md and '
      f'{len(files) - 1} files of bench/results/; {len(bad_images)} broken image links')
sys.exit(1 if missing_rows or missing_code or bad_images else 0)
