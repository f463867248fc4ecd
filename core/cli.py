"""A tiny sub-command dispatcher shared by ``python -m data_prep``, ``python -m reward`` and ``python -m eval``.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``; modules are
imported only when their command runs, so ``--help`` stays fast and a GPU-only import never breaks the others.
Our own errors (:class:`~core.errors.QuoteciteError`: bad input is its subclass
:class:`~core.errors.InputError`, an unknown plug-in name :class:`~core.registry.UnknownNameError`), a
missing file and a write the system refuses (a full disk, a read-only folder: :data:`core.io.WRITE_ERRNOS`)
print one line ``error: ...`` and exit 2; anything else (a ``KeyError`` or ``TypeError`` from a bug included) is a
bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from core.errors import QuoteciteError


def main(prog: str, description: str, commands: dict[str, tuple[str, str]], argv: list[str] | None = None) -> int:
    """``commands``: name -> (module path, one-line help)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in commands.items():
        sub.add_parser(name, help=help_, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        if argv and argv[0] not in ("-h", "--help"):
            parser.print_usage(sys.stderr)
            import difflib

            close = difflib.get_close_matches(argv[0], commands, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            print(f"{prog}: error: unknown command {argv[0]!r}{hint}", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    module = importlib.import_module(commands[argv[0]][0])
    cmd_parser = argparse.ArgumentParser(prog=f"{prog} {argv[0]}", description=commands[argv[0]][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except (QuoteciteError, FileNotFoundError) as e:
        print(f"{prog} {argv[0]}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        from core.io import WRITE_ERRNOS

        if e.errno not in WRITE_ERRNOS:
            raise  # anything else is a bug: its traceback is wanted
        where = f"{e.filename}: " if e.filename else ""
        print(f"{prog} {argv[0]}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
