"""Crops of cited blocks: the PNG images a judge is shown, rendered from the cached document's PDF."""

from __future__ import annotations

import io

from core.errors import InputError

MAX_CROPS = 6
"""Cited blocks shown per response by default (the first distinct ones, in citation order; CiteVQA shows at most
six)."""
CROP_DPI = 150.0
"""Resolution of the crops by default, dots per inch (CiteVQA's 150)."""


def crop_pngs(cached, citations, max_crops: int = MAX_CROPS, dpi: float = CROP_DPI, doc=None) -> tuple[bytes, ...]:
    """PNG bytes of the first ``max_crops`` distinct cited blocks (citation order), rendered from the cached
    document's PDF at ``dpi``. ``doc``: an already open :class:`~data_prep.document.Document` of that PDF (saves
    re-opening and re-hashing it per response). A block with an empty box is skipped."""
    seen: set[int] = set()
    chosen = []
    for c in citations:
        if c.block_id not in seen and len(chosen) < max_crops:
            seen.add(c.block_id)
            chosen.append(c)
    if not chosen:
        return ()
    own = doc is None
    if own:
        doc = cached.open_pdf()
    try:
        out = []
        for c in chosen:
            try:
                img = doc.crop(c.page, c.bbox, dpi=dpi)
            except InputError:
                continue  # zero-area box: nothing for the judge to see
            buf = io.BytesIO()
            img.save(buf, format="PNG", optimize=False)
            out.append(buf.getvalue())
        return tuple(out)
    finally:
        if own:
            doc.close()
