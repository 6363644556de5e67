#!/usr/bin/env bash
# Every relative Markdown link and image in README.md, CHANGELOG.md, BENCHMARKS.md, docs/**/*.md and
# bench/results/*.md resolves: the file (or folder) exists and, for a `#anchor` into a .md file, a heading
# of that file has that anchor by GitHub's rules (lower case; letters, digits, spaces, `-` and `_` kept,
# the rest dropped; spaces to `-`; a repeated heading gets -1, -2, ...). Each broken link is printed with
# its file and line. Needs no build: the argument (path/to/tessera, as ctest passes to every script) is
# ignored.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/lib/checks.sh"

check_links() {  # check_links ROOT: prints each broken link, exits non-zero when there is one
  python3 - "$1" <<'PY'
import os, re, sys, glob, unicodedata
from urllib.parse import unquote

root = sys.argv[1]
files = [f for f in ['README.md', 'CHANGELOG.md', 'BENCHMARKS.md'] if os.path.exists(os.path.join(root, f))]
files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, 'docs', '**', '*.md'), recursive=True))
files += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, 'bench', 'results', '*.md')))

FENCE = re.compile(r'^\s*(```|~~~)')
def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code spans blanked."""
    fenced = False
    for n, line in enumerate(text.split('\n'), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r'(`+)(.+?)\1', lambda m: ' ' * len(m.group(0)), line)

def slug(heading):
    s = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)          # a link's text
    s = ''.join(c for c in s.lower()
                if c in ' -_' or unicodedata.category(c)[0] in 'LMN' or unicodedata.category(c) == 'Pc')
    return s.replace(' ', '-')

anchors_cache = {}
def anchors(path):
    if path not in anchors_cache:
        seen, result = {}, set()
        text = open(path, encoding='utf-8').read()
        fenced = False
        for line in text.split('\n'):
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = re.match(r'^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$', line)
            if fenced or not m:
                continue
            base = slug(m.group(1))
            k = seen.get(base, 0)
            seen[base] = k + 1
            result.add(base if k == 0 else f'{base}-{k}')
        for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', text):
            result.add(m.group(1))
        anchors_cache[path] = result
    return anchors_cache[path]

LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')
REFDEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$')
broken = 0
count = 0
for f in files:
    text = open(os.path.join(root, f), encoding='utf-8').read()
    for n, line in prose_lines(text):
        targets = [m.group(1) for m in LINK.finditer(line)]
        m = REFDEF.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if not t or re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', t) or t.startswith('//'):
                continue                                                # http:, mailto:, ...
            count += 1
            path, _, anchor = t.partition('#')
            path = unquote(path)
            target = os.path.normpath(os.path.join(root, os.path.dirname(f), path)) if path else os.path.join(root, f)
            why = None
            if not os.path.exists(target):
                why = 'no such file'
            elif anchor and target.endswith('.md') and os.path.isfile(target):
                if unquote(anchor) not in anchors(target):
                    why = f'no heading with anchor #{anchor} in {os.path.relpath(target, root)}'
            if why:
                broken += 1
                print(f'{f}:{n}: broken link ({t}): {why}')
print(f'{count} relative links in {len(files)} files, {broken} broken')
sys.exit(1 if broken else 0)
PY
}

out=$(check_links "$root")
rc=$?
echo "$out" | tail -1
check "every relative link resolves: $out" $rc

# The checker itself: a missing file, a missing heading and a link inside code are told apart.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/docs" "$work/docs/images"
touch "$work/docs/images/a.png"
cat > "$work/README.md" <<'MD'
# Title
## A `flag`: --x and (y)
[ok](docs/guide.md#second-heading) [ok2](#a-flag---x-and-y) ![img](docs/images/a.png)
[missing file](docs/nothere.md) [missing anchor](docs/guide.md#nowhere)
`[in code](nothere.md)` [web](https://example.com/x)
```
[in a fence](nothere.md)
```
MD
printf '# Guide\n## Second heading\n## Second heading\n[dup](#second-heading-1) [up](../README.md#title) ![i](images/a.png)\n' > "$work/docs/guide.md"
out=$(check_links "$work")
rc=$?
[ $rc -ne 0 ] && grep -q 'README.md:4: broken link (docs/nothere.md): no such file' <<<"$out" \
  && grep -q 'README.md:4: broken link (docs/guide.md#nowhere): no heading' <<<"$out" \
  && [ "$(grep -c 'broken link' <<<"$out")" -eq 2 ]
check "the checker finds exactly the two broken links of a made-up tree: rc=$rc: $out" $?

finish docs_links_cli
