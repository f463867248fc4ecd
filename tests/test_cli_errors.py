"""The command-line dispatcher prints our own errors as one line and lets every other exception (a bug) through."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.cli import main
from core.errors import InputError, QuoteciteError
from core.registry import Registry, UnknownNameError

REPO_ROOT = Path(__file__).resolve().parents[1]

RAISES = {
    "input": "raise InputError('gold.jsonl:3: no field \"question\"')",
    "unknown": "Registry('judge').get('htp')",
    "outage": "raise Outage('judge at http://127.0.0.1:9/v1 is down')",
    "missing": "open(args.where / 'absent.json')",
    "bug_key": "{}['question']",
    "bug_type": "len(3)",
}


@pytest.fixture
def commands(tmp_path, monkeypatch):
    """A throwaway command module that raises what ``--what`` names."""
    (tmp_path / "qc_throwaway_cmd.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            from core.errors import QuoteciteError
            from core.registry import Registry
            from core.errors import InputError


            class Outage(QuoteciteError):
                pass


            def add_arguments(parser):
                parser.add_argument("--what", required=True)
                parser.add_argument("--where", type=Path, default=Path({str(tmp_path)!r}))


            def run(args):
            """
        )
        + "".join(f"    if args.what == {k!r}:\n        {v}\n" for k, v in RAISES.items())
        + "    return 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"go": ("qc_throwaway_cmd", "raise an error")}


@pytest.mark.parametrize(
    "what, message",
    [
        ("input", 'error: gold.jsonl:3: no field "question"'),
        ("unknown", "error: unknown judge 'htp' (known: )"),
        ("outage", "error: judge at http://127.0.0.1:9/v1 is down"),
        ("missing", "absent.json"),
    ],
)
def test_our_errors_and_a_missing_file_are_one_line_and_exit_2(commands, capsys, what, message):
    assert main("prog", "", commands, ["go", "--what", what]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prog go: error: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("what, exc", [("bug_key", KeyError), ("bug_type", TypeError)])
def test_a_bug_keeps_its_traceback(commands, capsys, what, exc):
    with pytest.raises(exc):
        main("prog", "", commands, ["go", "--what", what])
    assert "error:" not in capsys.readouterr().err


def test_an_unknown_name_is_bad_input_and_still_a_key_error():
    r = Registry[int]("parser")
    r.register("pdftext")(lambda: 1)
    with pytest.raises(UnknownNameError) as e:
        r.get("pdftxt")
    assert isinstance(e.value, KeyError) and isinstance(e.value, InputError) and isinstance(e.value, QuoteciteError)
    assert str(e.value) == "unknown parser 'pdftxt'; did you mean 'pdftext'? (known: pdftext)"  # not quoted


def _run_by_path_modules() -> list[str]:
    return sorted(str(p.relative_to(REPO_ROOT)) for d in ("core", "data_prep", "reward", "eval", "quotecite", "launch")
                  for p in (REPO_ROOT / d).glob("*.py")
                  if p.name.startswith("cmd_") or 'if __name__ == "__main__":' in p.read_text()
                  or "run by its path" in p.read_text())  # fmt: skip


RUN_BY_PATH = {"launch/layout.py": "the server wrapper: the job runs it by its path on every node it starts on"}
"""Programs made to run by their path (standard library only); every other command module refuses it."""


def test_the_programs_made_to_run_by_their_path_do():
    for path in RUN_BY_PATH:
        r = subprocess.run(
            [sys.executable, path, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0 and "usage:" in r.stdout, r.stderr


@pytest.mark.parametrize("path", [p for p in _run_by_path_modules() if not p.endswith("__main__.py") and p not in
                                  RUN_BY_PATH])  # fmt: skip
def test_a_command_module_run_by_its_path_says_how_to_run_it(path):
    # `python eval/cmd_score.py` used to exit 0 having done nothing (or a launch module to die importing `launch`)
    r = subprocess.run([sys.executable, path, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run this from the repository as: "), r.stderr
