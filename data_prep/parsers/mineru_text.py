"""MinerU's text: spans, lines, inline formulas and HTML tables as the plain text a reader of the page would quote
(:mod:`data_prep.parsers.mineru` converts MinerU's files with these)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from html.parser import HTMLParser
from typing import Any

from data_prep.text import is_cjk


def _join(parts: Iterable[str]) -> str:
    """Join pieces of text (spans, lines) as MinerU's markdown does: a space between Latin pieces, none next to
    CJK or inside punctuation, and a word hyphenated at a line end ("medi-" + "cation") rejoined.

    >>> _join(["Hongzhi", "Liu1*", ", and medi-", "cation (see", "[3]", ")"])
    'Hongzhi Liu1*, and medication (see [3])'
    """
    out = ""
    for p in parts:
        p = p.strip()
        if not p:
            continue
        if not out:
            out = p
        elif out.endswith("-") and len(out) > 1 and out[-2].isalpha() and p[0].islower():
            out = out[:-1] + p
        elif is_cjk(out[-1]) or is_cjk(p[0]) or p[0] in ",.;:!?)]}%" or out[-1] in "([{":
            out += p
        else:
            out += " " + p
    return out


_GREEK = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi "
    "chi psi "
    "omega"
).split()
_LATEX_SYMBOLS = {
    **{g: chr(0x3B1 + i + (1 if i >= 17 else 0)) for i, g in enumerate(_GREEK)},  # skips final sigma U+03C2
    **{g.capitalize(): chr(0x391 + i + (1 if i >= 17 else 0)) for i, g in enumerate(_GREEK)},
    "varepsilon": "ε", "vartheta": "ϑ", "varphi": "φ", "varrho": "ϱ", "varsigma": "ς", "varpi": "ϖ",
    "in": "∈", "notin": "∉", "ni": "∋", "cup": "∪", "cap": "∩", "subset": "⊂", "subseteq": "⊆", "supset": "⊃",
    "times": "×", "cdot": "·", "pm": "±", "mp": "∓", "div": "÷", "ast": "*", "star": "⋆", "circ": "°",
    "odot": "⊙", "oplus": "⊕", "otimes": "⊗", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "neq": "≠", "ne": "≠",
    "approx": "≈", "sim": "∼", "simeq": "≃", "equiv": "≡", "propto": "∝", "infty": "∞", "partial": "∂",
    "nabla": "∇", "forall": "∀", "exists": "∃", "neg": "¬", "wedge": "∧", "vee": "∨", "prime": "′",
    "to": "→", "rightarrow": "→", "leftarrow": "←", "Rightarrow": "⇒", "leftrightarrow": "↔", "mid": "|",
    "parallel": "∥", "ldots": "…", "cdots": "⋯", "dots": "…", "sum": "∑", "prod": "∏", "int": "∫",
    "sqrt": "√", "dag": "†", "ddag": "‡", "langle": "⟨", "rangle": "⟩", "lbrace": "{", "rbrace": "}",
    "%": "%", "&": "&", "#": "#", "_": "_", "{": "{", "}": "}", "$": "$", "|": "‖",
    **{f: f + " " for f in "log ln exp sin cos tan sinh cosh tanh max min argmax argmin lim sup inf det Pr".split()},
}  # fmt: skip
_LATEX_TOKEN = re.compile(r"\\([A-Za-z]+|.)|([{}^_~&])|(\s+)|(.)", re.S)
_LATEX_ENV = re.compile(r"\\begin\s*\{\s*(array|tabular)\s*\}\s*\{[^{}]*\}|\\(begin|end)\s*\{[^{}]*\}")


def latex_plain(latex: str) -> str:
    """Plain text of a LaTeX formula as a reader quoting the rendered page would type it: symbol commands become
    Unicode, other commands, braces, sub/superscript marks and math spacing are dropped.

    >>> latex_plain(r"\\mathbf { L i u } ^ { 1 * }")
    'Liu1*'
    >>> latex_plain(r"2 5 { \\pm } 3 ~ ^ { \\circ } \\mathrm { C }")
    '25±3°C'
    """
    out = []
    for cmd, struct, _space, ch in _LATEX_TOKEN.findall(_LATEX_ENV.sub(" ", latex)):
        if cmd:
            if cmd == "\\":
                out.append(" ")  # a line break of an array
            elif cmd in _LATEX_SYMBOLS:
                out.append(_LATEX_SYMBOLS[cmd])
            # other commands (\\mathbf, \\frac, \\left, \\, ...) only shape what follows: drop them
        elif struct == "&":
            out.append(" ")
        elif ch:
            out.append(ch)
    return re.sub(r"\s+", " ", "".join(out)).strip()


class _TableText(HTMLParser):
    """HTML table -> plain text: cells joined by ``" | "``, rows by newlines."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            if not self.rows:
                self.rows.append([])
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(re.sub(r"\s+", " ", "".join(self._cell)).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_table_text(html: str) -> str:
    """Plain text of an HTML table: cells joined by ``" | "``, rows by ``"\\n"``; empty rows dropped.

    >>> html_table_text("<table><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>2</td></tr></table>")
    'a | b\\n1 | 2'
    """
    p = _TableText()
    p.feed(html)
    p.close()
    if not p.rows:  # not a table after all: keep its text
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()
    return "\n".join(" | ".join(r) for r in p.rows if any(r))


def _math(latex: str, plain: bool, inline: bool = True) -> str:
    """A formula as block text: :func:`latex_plain` when ``plain``, else LaTeX (``$...$`` when inline)."""
    latex = latex.strip()
    if not latex:
        return ""
    if plain:
        return latex_plain(latex)
    return f"${latex}$" if inline else latex


def _markdown_math(text: str, plain: bool) -> str:
    """Markdown text with ``$...$``/``$$...$$`` formulas (content_list): formulas made plain when ``plain``."""
    if not plain:
        return text
    return re.sub(r"\$\$(.+?)\$\$|\$(.+?)\$", lambda m: latex_plain(m.group(1) or m.group(2)), text, flags=re.S)


def _span_text(span: dict, plain: bool) -> str:
    """Text of one MinerU 0.10/2.x span (its points-space ``bbox`` is not needed here)."""
    kind = span.get("type")
    if kind == "table":
        html = span.get("html") or span.get("content") or ""
        return html_table_text(html) if html else ""
    if kind == "image":
        return ""
    content = span.get("content") or ""
    if kind == "inline_equation":
        return _math(content, plain)
    if kind == "interline_equation":
        return _math(content, plain, inline=False)
    return content


def _line_text(line: dict, plain: bool) -> str:
    return _join(_span_text(s, plain) for s in line.get("spans", []))


def _lines_text(lines: list[dict], plain: bool) -> str:
    return _join(_line_text(line, plain) for line in lines)


def _inline_text(spans: Any, plain: bool) -> str:
    """Text of a 4.x ``content``: a string, a list of inline spans (text, equation_inline, code_inline,
    hyperlink), or a list of child blocks (list items)."""
    if spans is None:
        return ""
    if isinstance(spans, str):
        return spans
    if not isinstance(spans, list):
        return ""
    pieces: list[str] = []
    for s in spans:
        if not isinstance(s, dict):
            continue
        kind = s.get("type")
        if isinstance(s.get("content"), list) and kind != "hyperlink":
            pieces.append("\n" + _inline_text(s.get("content"), plain) + "\n")  # a child block, e.g. a list item
        elif kind == "hyperlink":
            pieces.append(_inline_text(s.get("content"), plain))
        elif kind == "equation_inline":
            pieces.append("\0" + _math(str(s.get("content", "")), plain) + "\0")  # a space only between words
        else:
            pieces.append(str(s.get("content", "")))
    text = re.sub(r"(?<=\w)\0+(?=\w)", " ", "".join(pieces)).replace("\0", "")
    return "\n".join(re.sub(r"[ \t]+", " ", ln).strip() for ln in text.split("\n") if ln.strip())
