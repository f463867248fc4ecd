"""``eval report --runs`` with the four interfaces side by side (eval/interfaces.py): language, coordinate, LAT and
attention runs scored on the sample PDF, each row with our metrics and the rivals' (LAT, MultAttrEval)."""

from __future__ import annotations

import json
import math

from data_prep.sample import SAMPLE_FACTS


def test_report_runs_shows_every_interface_with_ours_and_the_rivals_metrics(sample_pdf, tmp_path, capsys):
    from core.cli import main as cli_main
    from data_prep.cache import DocCache, build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from eval.__main__ import COMMANDS
    from eval.attention import prediction
    from eval.cmd_score import score, write_outputs
    from eval.lat import lat_citations
    from eval.schemas import Cited, Element, Gold, Prediction
    from reward.lat import parse_coe

    cache = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path / "cache")
    docs = DocCache(cache.path.parent)
    table = next(b for b in cache.blocks if "Shenzhen | 150" in b.text)
    cap = next(b for b in cache.blocks if b.text == SAMPLE_FACTS.fact("table_caption").text)
    e = (Element(table.page, tuple(table.bbox)),)
    g = Gold(0, cache.key, "Which test site had the highest annual yield?", "Shenzhen", "en", "t", e, e, ("table",))
    row = SAMPLE_FACTS.fact("table_row").text

    def grid(b):
        w, h = cache.page_sizes[b.page - 1]
        return [math.floor(b.bbox[0] / w * 1000), math.floor(b.bbox[1] / h * 1000),
                math.ceil(b.bbox[2] / w * 1000), math.ceil(b.bbox[3] / h * 1000)]  # fmt: skip

    def box(b):
        return json.dumps({"bbox_2d": grid(b), "Image_index": b.page})

    coe = (f"<think>{cap.text}\nBounding box: {box(cap)} {row}\nBounding box: {box(table)}</think>\n"
           f"<answer>Shenzhen\nBounding box: {box(table)}</answer>")  # fmt: skip
    lat_cits = lat_citations(parse_coe(coe), cache.page_sizes)[0]
    att = prediction(0, "Shenzhen", [(table.block_id, "image", 1.0)], {table.block_id: table})
    preds = {
        "language": Prediction(
            0,
            "language",
            json.dumps({"answer": "Shenzhen", "quotes": [row]}),
            "Shenzhen",
            (Cited(table.page, tuple(table.bbox), block_id=table.block_id),),
        ),  # fmt: skip
        "coordinate": Prediction(0, "coordinate", "", "Beijing", (Cited(cap.page, tuple(cap.bbox)),)),
        "lat": Prediction(0, "lat", coe, "Shenzhen", tuple(Cited(c["page"], tuple(c["bbox"])) for c in lat_cits)),
        "attention": Prediction(
            0,
            "attention",
            att["response"],
            "Shenzhen",
            tuple(Cited(c["page"], tuple(c["bbox"]), block_id=c["block_id"]) for c in att["citations"]),
        ),  # fmt: skip
    }
    dirs = []
    for name, p in preds.items():
        run = score([g], [p], docs=docs)
        write_outputs(run, tmp_path / name, name, report=False)
        dirs.append(str(tmp_path / name))
    assert cli_main("eval", "", COMMANDS, ["report", "--runs", *dirs, "--out", str(tmp_path / "side")]) == 0
    text = (tmp_path / "side" / "tables.md").read_text()
    section = text.split("## Interfaces side by side")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in section.splitlines() if line.startswith("| ") and not line.startswith("| run")}  # fmt: skip
    assert {k: v[1] for k, v in rows.items()} == {n: n for n in preds}  # each run's interface
    header = ["run", "interface", "n", "Rec.5", "Prec", "F1", "Ans", "SAA", "LAT EM", "LAT IoU@0.5", "LAT SA",
              "MAE P", "MAE R", "MAE F1"]  # fmt: skip
    col = {h: i for i, h in enumerate(header)}
    assert rows["lat"][col["LAT SA"]] == "100.0" and rows["language"][col["LAT SA"]] == "-"  # SA: LAT runs only
    assert rows["coordinate"][col["LAT EM"]] == "0.0" and rows["lat"][col["LAT EM"]] == "100.0"
    assert rows["attention"][col["Rec.5"]] == "100.0" and rows["coordinate"][col["Rec.5"]] == "0.0"
    # the table-row quote against the table's text layer (cells without the " | " separators): its tier, and the
    # under-quoting penalty |row| / |table| on recall
    from eval.multattreval import length, similarity, tier

    with cache.open_pdf() as doc:
        table_text = doc.text_in_bbox(table.page, table.bbox)
    d = tier(similarity(row, table_text))
    assert d > 0
    assert rows["language"][col["MAE P"]] == f"{100 * d:.1f}"
    assert rows["language"][col["MAE R"]] == f"{100 * d * length(row) / length(table_text):.1f}"
    one = (tmp_path / "lat" / "tables.md").read_text()  # eval score's own tables of one run
    assert "## The rivals' own metrics" in one and "| 100.0 | 100.0 | 100.0 |" in one
    assert "step embedder text-layer:minilm" in one
    capsys.readouterr()
