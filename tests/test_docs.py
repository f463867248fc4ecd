"""The method notes the code points at are in the repository (docs/), and every pointer lands on a real section."""

from __future__ import annotations

import argparse
import html
import importlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

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


# ------------------------------------------------------------------------------------- the front door and the site
# README.md is the front door; the rest is the documentation site built from docs/ (mkdocs.yml). Every command, flag,
# file and extra a page names must exist: the checks below read every page, and the site's strict build runs here.

PAGES = ["README.md", "CONTRIBUTING.md", "eval/README.md", "recipes/README.md",
         *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))]  # fmt: skip
README_MAX_BYTES = 10_500
"""About 10 KB: the front page says what the project is, how to start and where to go next."""
PENDING_FILES: dict[str, str] = {}
"""Files a page names that another change of this round adds; remove an entry when its file is in the repository."""
EXTERNAL = {"sbatch", "srun", "huggingface-cli", "mkdir", "tar", "for", "export", "wandb", "ray", "vllm", "cd",
            "git", "pip", "chromium", "open", "accelerate", "torchrun", "scancel", "squeue", "nvidia-smi"}  # fmt: skip
"""Programs a page may show that are not ours (their flags are not checked here)."""
OTHER_VENV_MODULES = {"verl.trainer.main": "EasyR1's trainer (the trainer venv, .venv-easyr1)"}
"""Modules a page runs that live in another environment than .venv."""
TOP = ("core", "data_prep", "reward", "eval", "recipes", "quotecite", "launch", "slurm", "tests", "benchmarks",
       "docs", "examples", ".ci")  # fmt: skip
REPO_PATH = re.compile(rf"^(?:{'|'.join(re.escape(t) for t in TOP)})/[\w./-]*$")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _text(page: str) -> str:
    return (REPO / page).read_text(encoding="utf-8")


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block."""
    return re.findall(r"(?ms)^ *```(\w*)[^\n]*\n(.*?)^ *```", text)


def _commands(text: str) -> list[str]:
    """Shell command lines of a page: fenced ``bash``/``sh``/unlabelled blocks (continuations joined: a trailing
    backslash, or a following line that starts with blanks and a flag or ``[``) and inline code spans that start
    with a command of ours."""
    out = []
    for lang, body in _code_blocks(text):
        if lang not in ("", "bash", "sh", "console"):
            continue
        lines: list[str] = []
        for raw in body.splitlines():
            if lines and (lines[-1].endswith("\\") or re.match(r"^\s+(?:\[|--)", raw)):
                lines[-1] = lines[-1].rstrip("\\") + " " + raw.strip()
            elif raw.strip():
                lines.append(raw.strip())
        out += [line for line in lines if not re.match(r"^[│├└▶─ ]|^[A-Z][A-Za-z]* ──|^\w+/$", line)]
    prose = re.sub(r"(?ms)^ *```.*?^ *```", "", text)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if re.match(r"^(?:\S+=\S+ )*(?:\.venv/bin/)?python3? -m \w|^make \w|^(?:bash|sbatch) launch/", span):
            out.append(span)
    return out


def _strip_comment(line: str) -> str:
    return re.split(r"\s#\s|\s#$", " " + line, maxsplit=1)[0].strip()


def _makefile_targets() -> set[str]:
    return set(re.findall(r"(?m)^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8")))


_HELP: dict[tuple[str, ...], str] = {}


def _options_of(module: str, sub: str | None) -> set[str] | None:
    """The option strings of ``python -m module [sub]``: from the sub-command's own parser for the packages that
    dispatch with ``core.cli`` (no process started), else from ``--help`` in a subprocess. None when ``sub`` is
    not a command of a ``core.cli`` package."""
    pkg_main = importlib.util.find_spec(f"{module}.__main__") if "." not in module else None
    if pkg_main is not None:
        commands = importlib.import_module(f"{module}.__main__").COMMANDS
        if sub not in commands:
            return None
        p = argparse.ArgumentParser()
        importlib.import_module(commands[sub][0]).add_arguments(p)
        return set(p._option_string_actions)
    key = (module, *([sub] if sub else []))
    if key not in _HELP:
        out = subprocess.run([sys.executable, "-m", *key, "--help"], cwd=REPO, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert out.returncode == 0, f"python -m {' '.join(key)} --help: {out.stderr[-500:]}"
        _HELP[key] = out.stdout
    return set(FLAG.findall(_HELP[key])) | {"--help", "-h"}


def _check_command(page: str, line: str) -> None:
    line = _strip_comment(line)
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
        words.pop(0)
    if not words or words[0] in EXTERNAL or words[0].startswith(("$", "<", "(")):
        if words and words[0] == "sbatch":
            scripts = [w for w in words if w.endswith(".sh")]
            assert scripts and all((REPO / s).is_file() for s in scripts), f"{page}: {line!r}: no such script"
        return
    where = f"{page}: {line!r}"
    if words[0] == "make":
        for target in words[1:]:
            assert target in _makefile_targets(), f"{where}: no Makefile target {target!r}"
        return
    if words[0] == "bash":
        assert (REPO / words[1]).is_file(), f"{where}: no such script"
        help_text = _options_of_script(words[1])
        for flag in FLAG.findall(" ".join(words[2:])):
            assert flag in help_text or flag == "--help", f"{where}: {words[1]} --help does not name {flag}"
        return
    if re.match(r"^(?:\.venv/bin/)?python3?(?:\.11)?$", words[0]) and len(words) > 2 and words[1] == "-m":
        module = words[2]
        if module in OTHER_VENV_MODULES:
            return
        assert importlib.util.find_spec(module.split(".")[0]) is not None, f"{where}: no module {module}"
        assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
        if module == "reward.train":  # EasyR1's verl.trainer.main with a hook: its arguments are EasyR1's
            return
        rest = words[3:]
        sub = rest[0] if rest and re.match(r"^[a-z][\w-]*$", rest[0]) else None
        options = _options_of(module, sub)
        assert options is not None, f"{where}: {sub!r} is not a command of python -m {module}"
        for flag in FLAG.findall(" ".join(rest)):
            assert flag in options, f"{where}: python -m {module} {sub or ''} has no option {flag}"
        return
    raise AssertionError(f"{where}: a command neither ours nor listed in EXTERNAL")


def _options_of_script(script: str) -> str:
    key = ("bash", script)
    if key not in _HELP:
        out = subprocess.run(["bash", script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"bash {script} --help: {out.stderr[-500:]}"
        _HELP[key] = out.stdout + (REPO / script).read_text(encoding="utf-8")
    return _HELP[key]


@pytest.mark.parametrize("page", PAGES)
def test_every_command_a_page_shows_exists_with_its_flags(page):
    commands = _commands(_text(page))
    for line in commands:
        _check_command(page, line)


def test_the_command_check_sees_commands_and_catches_a_wrong_one():
    assert len([c for p in PAGES for c in _commands(_text(p))]) >= 60  # the pages' commands are found
    with pytest.raises(AssertionError, match="no option --no-such-flag"):
        _check_command("x.md", "python -m eval score --gold g --pred p --out o --no-such-flag")
    with pytest.raises(AssertionError, match="not a command"):
        _check_command("x.md", "python -m data_prep blokcs a.pdf")
    with pytest.raises(AssertionError, match="no Makefile target"):
        _check_command("x.md", "make docz")
    with pytest.raises(AssertionError, match="does not name --dry-runn"):
        _check_command("x.md", "bash launch/grpo_8b.sh --dry-runn")
    with pytest.raises(AssertionError, match="no option --frobnicate"):
        _check_command("x.md", "python -m launch.budget memory --frobnicate")
    joined = _commands("```\npython -m eval resolve --pred p --gold g\n   [--snap] --out o\n```\n")
    assert joined == ["python -m eval resolve --pred p --gold g [--snap] --out o"]


@pytest.mark.parametrize("page", PAGES)
def test_every_file_a_page_names_exists(page):
    text = _text(page)
    named = {s for s in re.findall(r"`([^`\n]+)`", text) if REPO_PATH.match(s)}
    base = (REPO / page).parent
    links = {(base / t).resolve().relative_to(REPO).as_posix()
             for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t}  # fmt: skip
    if page.startswith("docs/"):
        links = set()  # mkdocs --strict checks the site's own links and anchors
    missing = [p for p in sorted(named | links) if not (REPO / p).exists() and p not in PENDING_FILES]
    assert not missing, f"{page} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_every_extra_a_page_names_exists(page):
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = set(re.findall(r"\.\[([\w-]+)\]", _text(page)))
    assert named <= extras, f"{page} names extras pyproject.toml does not define: {sorted(named - extras)}"


def test_the_readme_is_the_front_door():
    text = _text("README.md")
    assert len(text.encode("utf-8")) <= README_MAX_BYTES
    first = "\n".join(text.splitlines()[:40])
    assert re.search(r"(?m)^make demo\b", first) and re.search(r"(?m)^make test\b", first)
    assert "docs/img/samples.png" in text and "docs/img/trl_reward_curve.png" in text
    assert re.search(r"(?m)^## Requirements$", text)
    assert "QUOTECITE_REPO" not in text  # the settings reference is the site's, generated
    for page in ("getting-started", "concepts", "cluster", "training-trl", "evaluation", "rivals", "plugins",
                 "settings", "testing", "benchmarks", "METHOD"):  # fmt: skip
        assert f"(docs/{page}.md)" in text, f"README's table of where to go next lacks docs/{page}.md"


def test_every_page_is_in_the_site_navigation():
    cfg = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for x in node:
                yield from walk(x)
        elif isinstance(node, dict):
            for x in node.values():
                yield from walk(x)

    nav = set(walk(cfg["nav"]))
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages == nav
    assert {"Training with TRL": "training-trl.md"} in [x for s in cfg["nav"] if isinstance(s, dict)
                                                          for v in s.values() if isinstance(v, list) for x in v]  # fmt: skip
    assert (
        cfg["theme"]["font"] == "false"
        and "social" not in str(cfg["plugins"])
        and "privacy" not in str(cfg["plugins"])
    )


def test_the_settings_page_is_generated_from_the_settings_module():
    from launch.settings import SETTINGS, render_markdown

    page = _text("docs/settings.md")
    assert not re.search(r"(?m)^\| `QUOTECITE_", page), "a typed copy of the settings table"
    spec = importlib.util.spec_from_file_location("docs_hooks_generated", REPO / "docs/_hooks/generated.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert hook.SETTINGS_MARKER in page
    rendered = hook.on_page_markdown(page, None, None, None)
    assert render_markdown() in rendered and hook.SETTINGS_MARKER not in rendered
    assert all((f"`{s.name}`" in rendered) == (s.group != "test") for s in SETTINGS)  # test knobs: --test


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as ``make docs`` builds it (``mkdocs build --strict``), into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_the_site_builds_strict_and_offline(site):
    from launch.settings import SETTINGS

    home = (site / "index.html").read_text(encoding="utf-8")
    assert "quotecite" in home and "fonts.googleapis.com" not in home and "fonts.gstatic.com" not in home
    settings = html.unescape((site / "settings.html").read_text(encoding="utf-8"))
    assert all((s.name in settings) == (s.group != "test") for s in SETTINGS)  # the generated table, built
    plugins = html.unescape(re.sub(r"<[^>]+>", "", (site / "plugins.html").read_text(encoding="utf-8")))
    for example in sorted((REPO / "examples/plugins").glob("*.py")):  # the guide shows the tested files themselves
        first_def = next(line for line in example.read_text().splitlines() if line.startswith(("class ", "def ")))
        assert first_def in plugins, example.name
    api = html.unescape(re.sub(r"<[^>]+>", "", (site / "api/reward.html").read_text(encoding="utf-8")))
    assert "LexicalJudge" in api and "score_batch" in api  # mkdocstrings rendered the docstrings
    assert ":class:" not in api  # Sphinx roles are shown as the plain name (docs/_hooks/generated.py)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_home_page_in_headless_chromium(site, tmp_path):
    """The built home page opened from ``file://`` as a reader would: its stylesheet and scripts load from the site
    itself (the header has Material's indigo), the navigation names every section, the two commands show."""
    from PIL import Image

    home = site / "index.html"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--virtual-time-budget=5000", "--window-size=1280,900"]  # fmt: skip
    shot = tmp_path / "home.png"
    subprocess.run([*argv, f"--screenshot={shot}", f"file://{home}"], capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 900)
    assert image.getpixel((640, 10)) == (64, 81, 181)  # the header, drawn by the site's own CSS
    dark = sum(1 for x in range(0, 1280, 4) for y in range(100, 900, 4) if sum(image.getpixel((x, y))) < 300)
    assert dark > 500  # text on the page
    dom = subprocess.run([*argv, "--dump-dom", f"file://{home}"], capture_output=True, text=True, timeout=120).stdout
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", dom)))
    for title in ("Getting started", "Concepts", "Training on a Slurm cluster", "Training with TRL", "Plug-in guide",
                  "Settings", "Benchmarks", "Deviations from the paper", "make demo", "make test"):  # fmt: skip
        assert title in text, title
    static = home.read_text(encoding="utf-8")
    assert not re.search(r'<(?:script|link|img)[^>]+(?:src|href)="(?:https?:)?//', static)  # nothing from the network
