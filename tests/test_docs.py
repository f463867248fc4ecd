"""The method notes the code points at are in the repository (docs/), and every pointer lands on a real section."""

from __future__ import annotations

import re

from tests.conftest import REPO

SOURCES = ["data_prep", "reward", "eval", "recipes", "launch", "tests", "benchmarks"]
POINTER = re.compile(r'docs/(?P<file>[A-Za-z_]+\.md)`{0,2}(?:,? (?:"(?P<section>[^"]+)"|step (?P<step>\d+)))?')


def _source_files():
    for top in SOURCES:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".sh") and "__pycache__" not in path.parts:
                yield path


def test_every_pointer_into_docs_names_a_file_and_section_that_exist():
    pointers = []
    for path in _source_files():
        for m in POINTER.finditer(path.read_text(encoding="utf-8")):
            pointers.append((path.relative_to(REPO), m))
    assert len(pointers) >= 5  # the code does point at the notes
    for where, m in pointers:
        doc = REPO / "docs" / m["file"]
        assert doc.is_file(), f"{where}: points at {doc}, which is not in the repository"
        text = doc.read_text(encoding="utf-8")
        headings = {h.strip() for h in re.findall(r"(?m)^#+ (.+)$", text)}
        if m["section"]:
            bold = set(re.findall(r"\*\*([^*]+?)\.?\*\*", text))
            assert m["section"] in headings | bold, f"{where}: no section {m['section']!r} in docs/{m['file']}"
        if m["step"]:
            assert re.search(rf"(?m)^{m['step']}\. \*\*", text), f"{where}: no step {m['step']} in docs/{m['file']}"


def test_no_pointer_to_notes_outside_the_repository():
    for path in _source_files():
        if path.name == "test_docs.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "shared/SPEC" not in text and not re.search(r"\bSPEC[ ,;)]", text), path
