#!/usr/bin/env python3
"""replace-section.py NAME SECTION.md DOC.md: puts a generated section into DOC.md.

The section runs from "<!-- NAME:BEGIN" to "<!-- NAME:END -->"; an existing one
is replaced, else the section is appended. DOC.md is rewritten atomically.
"""
import os
import sys

name, section, doc = sys.argv[1:4]
gen = open(section).read()
text = open(doc).read() if os.path.exists(doc) else "# Results\n"
b, e = f"<!-- {name}:BEGIN", f"<!-- {name}:END -->"
if b in text:
    text = text[:text.index(b)] + gen.rstrip("\n") + text[text.index(e) + len(e):]
else:
    text = text.rstrip("\n") + "\n\n" + gen
open(doc + ".tmp", "w").write(text)
os.replace(doc + ".tmp", doc)
