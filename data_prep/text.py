"""Text normalisation and token overlap shared by every stage (lexical judge, lexical resolver, verification).

Tokens: NFKC-normalised, lower-cased runs of letters/digits for alphabetic scripts, and one token per character
for CJK (Chinese has no spaces, so a word tokenizer would make a whole sentence one token)."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

CJK_LETTERS: tuple[tuple[int, int], ...] = (
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),  # CJK ideographs
    (0xAC00, 0xD7AF),  # hangul syllables
)  # fmt: skip
"""Code point ranges of CJK letters: one token each, and what counts towards a text's CJK share."""
CJK_MARKS: tuple[tuple[int, int], ...] = ((0x3000, 0x303F), (0xFF00, 0xFFEF))
"""CJK punctuation and full-width forms: no space is put between them and a CJK letter either."""
_CJK = "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in CJK_LETTERS)
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+", re.UNICODE)
_CJK_LETTER_RE = re.compile(rf"[{_CJK}]")

INVISIBLE: str = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
)
"""Characters removed by :func:`normalize_for_compare`: soft hyphen, zero-width spaces and joiners, word joiner,
bidi marks, embeddings, overrides and isolates, variation selectors, the byte-order mark, Hangul fillers,
interlinear annotation marks (a regex character class body)."""
_INVISIBLE_RE = re.compile(f"[{INVISIBLE}]|[\U000e0000-\U000e007f]")
_SPACE_RE = re.compile(r"\s+")


def normalize_for_compare(text: str) -> str:
    r"""The one text normalisation of every comparison of answers and spans (LAT accuracy, MultAttrEval, quote
    fidelity): NFKC (full-width and compatibility forms fold to their plain letters), invisible and bidi control
    characters removed (:data:`INVISIBLE`, tag characters), every run of whitespace folded to one space, ends
    stripped. Case is kept; a caller that ignores case lower-cases after. Lone surrogates are dropped.

    >>> normalize_for_compare("Shen\u200bzhen\u202e  ｃｉｔｙ\n")
    'Shenzhen city'
    >>> normalize_for_compare("\u200b\u2060\ufeff")
    ''
    """
    if not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", "ignore").decode("utf-8") if any("\ud800" <= c <= "\udfff" for c in text) else text
    text = _INVISIBLE_RE.sub("", unicodedata.normalize("NFKC", text))
    return _SPACE_RE.sub(" ", text).strip()


def is_cjk(ch: str, marks: bool = True) -> bool:
    """The one CJK test: ``ch`` is a CJK letter, or (``marks``) CJK punctuation or a full-width form. Parsers join
    two lines without a space when both sides are CJK (Chinese wraps mid-sentence).

    >>> is_cjk("深"), is_cjk("。"), is_cjk("。", marks=False), is_cjk("a"), is_cjk("")
    (True, True, False, False, False)
    """
    if len(ch) != 1:
        return False
    o = ord(ch)
    return any(lo <= o <= hi for lo, hi in CJK_LETTERS + (CJK_MARKS if marks else ()))


def cjk_share(text: str) -> float:
    """Share of the non-space characters of ``text`` that are CJK letters (0 for an empty text).

    >>> cjk_share("深圳 ab"), cjk_share("")
    (0.5, 0.0)
    """
    chars = [c for c in text if not c.isspace()]
    return len(_CJK_LETTER_RE.findall(text)) / len(chars) if chars else 0.0


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens; each CJK character is a token.

    >>> tokenize("Revenue grew 12% in 2023年营收")
    ['revenue', 'grew', '12', 'in', '2023', '年', '营', '收']

    Invisible and bidi characters (:data:`INVISIBLE`) are removed first, as in :func:`normalize_for_compare`, so
    ``"Shen" + ZWSP + "zhen"`` is one token: the lexical judge, the lexical resolver and quote fidelity compare the
    same text as LAT accuracy and MultAttrEval.
    """
    return _TOKEN_RE.findall(_INVISIBLE_RE.sub("", unicodedata.normalize("NFKC", text)).lower())


def token_f1(a: str | list[str], b: str | list[str]) -> float:
    """Bag-of-tokens F1 between two texts (0 when either is empty).

    >>> round(token_f1("the cat sat", "the cat"), 3)
    0.8
    """
    ta = tokenize(a) if isinstance(a, str) else a
    tb = tokenize(b) if isinstance(b, str) else b
    if not ta or not tb:
        return 0.0
    common = sum((Counter(ta) & Counter(tb)).values())
    if common == 0:
        return 0.0
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)


def token_recall(reference: str | list[str], candidate: str | list[str]) -> float:
    """Share of the reference's tokens (with multiplicity) that the candidate contains."""
    tr = tokenize(reference) if isinstance(reference, str) else reference
    tc = tokenize(candidate) if isinstance(candidate, str) else candidate
    if not tr:
        return 0.0
    return sum((Counter(tr) & Counter(tc)).values()) / len(tr)
