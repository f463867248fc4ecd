"""Text normalisation and token overlap shared by every stage (lexical judge, lexical resolver, verification).

Tokens: NFKC-normalised, lower-cased runs of letters/digits for alphabetic scripts, and one token per character
for CJK (Chinese has no spaces, so a word tokenizer would make a whole sentence one token)."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul syllables
)
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens; each CJK character is a token.

    >>> tokenize("Revenue grew 12% in 2023年营收")
    ['revenue', 'grew', '12', 'in', '2023', '年', '营', '收']
    """
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower())


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
