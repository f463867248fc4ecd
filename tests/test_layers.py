"""The stages are layered: core (the parts every stage shares: errors, registry, CLI dispatch, atomic io, box
geometry) <- recipes <- data_prep <- reward <- eval <- quotecite (the whole-pipeline demo and the plug-in list)
<- launch (the cluster scripts' Python: it may import any stage, and no stage imports it).
No module imports from a stage above its own, at module level or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ["core", "recipes", "data_prep", "reward", "eval", "quotecite", "launch"]
"""Bottom-up; ``core`` imports nothing of the project; ``recipes`` (the recipes and prompt files, and their lookup)
imports only ``core``."""


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_from_a_higher_stage(layer):
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    bad = [
        f"{path.relative_to(REPO)}:{lineno}: imports {name}"
        for path in sorted((REPO / layer).rglob("*.py"))
        for lineno, name in _imports(path)
        if name.split(".")[0] in above
    ]
    assert not bad, "\n".join(bad)


def test_the_check_sees_function_level_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from eval.schemas import Gold\n    import reward.judge\n")
    assert _imports(f) == [(2, "eval.schemas"), (3, "reward.judge")]
