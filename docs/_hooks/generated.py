"""MkDocs hook: pages whose text is generated from the code at build time, never typed twice.

``docs/settings.md`` holds the marker below; the build replaces it with ``python -m launch.settings markdown`` (the
one settings object, ``launch/settings.py``), so the site's settings reference cannot drift from the code. The API
pages render the docstrings (mkdocstrings); their Sphinx roles (``:class:`X```) are shown as the plain code name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETTINGS_MARKER = "<!-- settings table: python -m launch.settings markdown -->"


def settings_table() -> str:
    """The settings reference table, from ``launch.settings.render_markdown`` (imported from this checkout)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from launch.settings import render_markdown

    return render_markdown()


def on_page_markdown(markdown: str, page, config, files) -> str:
    if SETTINGS_MARKER in markdown:
        return markdown.replace(SETTINGS_MARKER, settings_table())
    return markdown


SPHINX_ROLE = re.compile(r":(?:class|func|data|mod|meth|attr|exc|obj|const):(?=<code>)")


def on_page_content(html: str, page, config, files) -> str:
    return SPHINX_ROLE.sub("", html)
