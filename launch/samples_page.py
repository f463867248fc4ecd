"""``python -m launch.samples_page RUN_DIR [--out FILE] [--embed]``: the samples browser (:mod:`eval.samples_page`)
of a training run, ``RUN_DIR/samples.html``. The n-th batch of a segment is step ``resume_step + n``; a later segment
supersedes the steps after its resume step, as ``launch/merge.py`` does for the curves."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.samples_page")

import argparse
from pathlib import Path

from core.errors import InputError
from core.io import refuse_page_output
from eval.samples_page import PAGE, folder_steps
from eval.samples_page import write_samples_page as render_page
from launch.segments import load_segments, segments_dir
from reward.samples import SAMPLES_DIR, load_steps


def collect_steps(run_dir: str | Path) -> list[tuple[int, Path, dict]]:
    """``(step, samples folder, batch record)`` of every sampled step of the run, by step, without duplicates."""
    run = Path(run_dir)  # not a folder: no steps, and the page's writer says what is wrong
    if not segments_dir(run).is_dir():
        return folder_steps(run)
    found: dict[int, tuple[Path, dict]] = {}
    for seg in load_segments(run):
        found = {s: v for s, v in found.items() if s <= seg.resume_step}  # the requeued segment redid the others
        folder = segments_dir(run) / seg.name / SAMPLES_DIR
        if folder.is_dir():
            for rec in load_steps(folder):
                found[seg.resume_step + int(rec["step"])] = (folder, rec)
    return [(s, *found[s]) for s in sorted(found)]


def write_samples_page(run_dir: str | Path, out: str | Path | None = None, embed: bool = False) -> Path:
    """Write the page of every sampled step of the run (:func:`collect_steps`); returns its path."""
    return render_page(run_dir, out, embed, steps=collect_steps(run_dir))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launch.samples_page", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", help="run folder (segments/*/samples) or a metrics folder (samples/)")
    ap.add_argument("--out", default=None, help=f"output HTML (default RUN_DIR/{PAGE})")
    ap.add_argument("--embed", action="store_true", help="embed the crops in the page (no files beside it)")
    a = ap.parse_args(argv)
    try:
        refuse_page_output(Path(a.out) if a.out else Path(a.run_dir) / PAGE, a.run_dir)
        out = write_samples_page(a.run_dir, a.out, a.embed)
    except InputError as e:
        print(f"error: {e}")
        return 2
    print(f"samples page: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
