"""``python -m data_prep COMMAND``: documents -> blocks -> embeddings cache, and data-set builders."""

import sys

from core.cli import main

COMMANDS = {
    "blocks": ("data_prep.cmd_blocks", "parse PDFs into blocks, embed them, and store them in the cache"),
    "show": ("data_prep.cmd_show", "draw a cached document's blocks over a page image (PNG)"),
    "longdocurl": ("data_prep.cmd_longdocurl", "build the GRPO training set (parquet) from LongDocURL"),
    "citevqa": ("data_prep.cmd_citevqa", "rehydrate and verify the CiteVQA evaluation subset into gold JSONL"),
}

if __name__ == "__main__":
    sys.exit(main("python -m data_prep", __doc__, COMMANDS))
