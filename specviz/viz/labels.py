"""Token text as plain labels for tables, tooltips and chart axes: whitespace made visible."""

from __future__ import annotations

import unicodedata

__all__ = ["GLYPHS", "token_label"]

GLYPHS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def token_label(text: str) -> str:
    """Plain-text label for tables and chart axes: whitespace made visible (not HTML-escaped)."""
    if text == "":
        return "∅"
    out = []
    for ch in text:
        if ch in GLYPHS:
            out.append(GLYPHS[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)
