"""The command-line dispatcher prints our own errors as one line and lets every other exception (a bug) through."""

from __future__ import annotations

import textwrap

import pytest

from core.cli import main
from core.errors import InputError, QuoteciteError
from core.registry import Registry, UnknownNameError

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
