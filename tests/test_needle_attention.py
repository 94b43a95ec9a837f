"""The look-alike matching of scripts/needle-attention.py (no torch needed): which strings count as a
needle's look-alikes, and which tokens a character span covers."""
import importlib.util
import os
import sys

spec = importlib.util.spec_from_file_location(
    "needle_attention", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "needle-attention.py"))
na = importlib.util.module_from_spec(spec)
spec.loader.exec_module(na)
fails = 0


def check(name, ok):
    global fails
    print(("ok: " if ok else "FAIL: ") + name)
    fails += not ok


text = "key a: 5530389. key b is 5417654, not 55303891 or 553038; uuid 0a1b2c3d-1111-2222-3333-444455556666"
rx = na.shape_regex("5530389")
check("a 7-digit answer matches 7-digit numbers only",
      [m.group() for m in rx.finditer(text)] == ["5530389", "5417654"])
ux = na.shape_regex("09e9db0a-df46-4290-a1ee-411a1bac27a7")
check("a UUID matches any hex string of its layout",
      [m.group() for m in ux.finditer(text)] == ["0a1b2c3d-1111-2222-3333-444455556666"])
wx = na.shape_regex("apple")
check("a word matches words of its length", [m.group() for m in wx.finditer("an apple, a pear, grapes, grape")] ==
      ["apple", "grape"])
offsets = [(0, 3), (3, 4), (4, 7), (7, 7), (7, 10)]
check("tokens overlapping a span (an empty token never)", na.token_spans(offsets, [(3, 7)]) == [1, 2])
check("no span, no token", na.token_spans(offsets, []) == [])
sys.exit(1 if fails else 0)
