#!/usr/bin/env python3
"""Checks that every relative link in README.md and docs/**/*.md resolves: the file
exists and, for a link into a Markdown file, the #anchor names one of its headings
(GitHub's anchor rule: lower case, punctuation other than '-' and '_' dropped, spaces
to '-', a repeated heading gets -1, -2, ...). Links inside code blocks and inline
code are ignored; absolute URLs are not fetched.

    scripts/check-doc-links.py [ROOT]     # ROOT defaults to the repository

Prints each broken link as FILE:LINE and exits 1 when there is one. Takes well under
a second."""
import re, os, sys, glob
root = os.path.normpath(
    sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
files = [os.path.join(root, 'README.md')] + sorted(glob.glob(os.path.join(root, 'docs', '**', '*.md'), recursive=True))
def strip_code(text):
    out, inc = [], False
    for l in text.split('\n'):
        if l.startswith('```'):
            inc = not inc; out.append(''); continue
        out.append('' if inc else l)
    return out
def anchors(path):
    seen = {}; res = set()
    for l in strip_code(open(path).read()):
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', l)
        if not m: continue
        t = m.group(2).lower()
        t = re.sub(r'[^\w\- ]', '', t)
        t = t.replace(' ', '-')
        if t in seen:
            seen[t] += 1; res.add('%s-%d' % (t, seen[t]))
        else:
            seen[t] = 0; res.add(t)
        for h in re.findall(r'<a (?:name|id)="([^"]+)"', l): res.add(h)
    return res
cache = {}; bad = 0; n = 0
for f in files:
    for i, l in enumerate(strip_code(open(f).read()), 1):
        l2 = re.sub(r'`[^`]*`', '', l)
        for tgt in re.findall(r'\]\(([^)\s]+)\)', l2):
            if re.match(r'^[a-z]+:', tgt): continue
            n += 1
            path, _, anc = tgt.partition('#')
            full = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(full):
                print('%s:%d: missing file %s' % (os.path.relpath(f, root), i, tgt)); bad += 1; continue
            if anc and full.endswith('.md'):
                if full not in cache: cache[full] = anchors(full)
                if anc not in cache[full]:
                    print('%s:%d: missing anchor %s' % (os.path.relpath(f, root), i, tgt)); bad += 1
print('%d links checked, %d broken' % (n, bad))
sys.exit(1 if bad else 0)
