"""``python -m quotecite COMMAND``: the whole pipeline (demo) and the plug-in list of every stage."""

import sys

from core.cli import main

COMMANDS = {
    "demo": ("quotecite.demo", "run the whole pipeline on a generated sample document on the CPU"),
    "plugins": (
        "quotecite.cmd_plugins",
        "list the registered parsers, encoders, resolvers, judges, metrics, interfaces",
    ),
}

if __name__ == "__main__":
    sys.exit(main("python -m quotecite", __doc__, COMMANDS))
