"""``python -m eval COMMAND``: predictions -> citations -> metrics -> report."""

import sys

from core.cli import main

COMMANDS = {
    "infer": ("eval.cmd_infer", "generate predictions with vLLM (GPU) for a gold file"),
    "resolve": ("eval.cmd_resolve", "turn responses into citations (quotes, question or coordinate controls)"),
    "score": ("eval.cmd_score", "score predictions against gold: box metrics, judge metrics, tables, plots"),
    "compare": ("eval.cmd_compare", "paired bootstrap on recall and exact McNemar on SAA between two runs"),
    "convert": ("eval.cmd_convert", "convert a rival system's outputs (LAT, MultAttnAttrib) into prediction JSONL"),
    "report": ("eval.cmd_report", "write report.html: pages with gold and cited boxes, quotes, judge scores"),
}

if __name__ == "__main__":
    sys.exit(main("python -m eval", __doc__, COMMANDS))
