"""A generated bilingual (English/Chinese) sample PDF and the facts it contains.

The project's own tests and ``make demo`` need a document whose content is known exactly, with every layout
element the pipeline handles: a title, section headings, header and footer lines, English and Chinese
paragraphs, a bulleted list, a ruled table with a caption above and a note below, a vector bar chart with a
caption below, and a page carrying ``/Rotate 90``. :func:`write_sample_pdf` draws it with reportlab
(``invariant=1``, so the bytes are identical on every run) and :data:`SAMPLE_FACTS` lists what is in it.

Chinese text uses WenQuanYi Micro Hei (Apache-2.0), a TrueType font shipped by the ``paperang-p2-fonts-cjk``
package, *embedded* in the PDF (reportlab subsets it): the sample renders the same on every machine, with or without
a system CJK font. (A non-embedded standard CJK font such as ``STSong-Light`` is drawn blank where no system font
can stand in for it, and PyMuPDF's ``china-s`` spaces Latin letters out.)

Coordinates: the drawing code works in *display* points (origin top-left of the page as shown, after
``/Rotate``), the same space as every bbox in this project; the rotated page maps them back into its unrotated
content space with one transform.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen import canvas as rl_canvas

from core.io import atomic_path

SAMPLE_N_PAGES = 4
"""Number of pages of the sample PDF."""

ROTATED_PAGE = 4
"""1-based page of the sample that carries ``/Rotate 90`` (displayed landscape, text upright)."""

CJK_FONT = "WenQuanYiMicroHei"
"""Name of the (embedded) font used for Chinese text: the PDF's ``/BaseFont`` is ``/<subset tag>+`` this."""

CJK_FONT_PACKAGE = "paperang_p2_fonts_cjk"
"""The installed package that ships :data:`CJK_FONT` (``pip install paperang-p2-fonts-cjk``)."""


def cjk_font_file() -> Path:
    """The TrueType collection holding :data:`CJK_FONT` (face 0), from :data:`CJK_FONT_PACKAGE`."""
    import importlib.resources

    try:
        path = Path(str(importlib.resources.files(CJK_FONT_PACKAGE) / "fonts" / "wqy-microhei.ttc"))
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise RuntimeError(
            f"the sample's CJK font is missing: install the project's dependencies (package {CJK_FONT_PACKAGE})"
        )
    return path


def _register_cjk_font() -> None:
    if CJK_FONT not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(TTFont(CJK_FONT, str(cjk_font_file()), subfontIndex=0))


@dataclass(frozen=True)
class SampleFact:
    """One verbatim item of the sample PDF.

    Attributes:
        key: short name used by tests and the demo.
        page: 1-based page.
        type: the block type a correct parse gives the region holding it (:data:`~data_prep.types.BLOCK_TYPES`).
        text: the exact text as written into the PDF. A table row is its cells joined by ``" | "`` (the form
            in which table blocks carry their text).
    """

    key: str
    page: int
    type: str
    text: str


@dataclass(frozen=True)
class SampleQA:
    """A question answerable from the sample, its answer, and the keys of the facts that are its evidence."""

    question: str
    answer: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class SampleFacts:
    """Everything later stages need to build demo questions, quotes and gold boxes for the sample PDF."""

    title: str
    facts: tuple[SampleFact, ...]
    qa: tuple[SampleQA, ...]

    def fact(self, key: str) -> SampleFact:
        """The fact named ``key`` (KeyError when absent)."""
        for f in self.facts:
            if f.key == key:
                return f
        raise KeyError(f"no sample fact {key!r}; known: {', '.join(f.key for f in self.facts)}")

    def evidence(self, qa: SampleQA) -> tuple[SampleFact, ...]:
        """The facts that support ``qa``."""
        return tuple(self.fact(k) for k in qa.evidence)


# ---------------------------------------------------------------------------------------------- content
TITLE = "Solar Panel Field Study 2024"
HEADER_LEFT = "QuoteCite Sample Report"
HEADER_RIGHT = "样例报告 2024"

EN_SENTENCE = "The Shenzhen site produced the highest annual yield of all three test sites."
ZH_SENTENCE = "深圳站点的组件在高温高湿环境下仍保持稳定的发电效率。"
TABLE_CAPTION = "Table 1: Annual energy yield of the three test sites."
TABLE_HEADER = ("Site", "Capacity (kW)", "Yield (MWh)", "Efficiency (%)")
TABLE_ROWS = (
    ("Beijing", "120", "158.4", "19.2"),
    ("Shanghai", "95", "117.6", "18.7"),
    ("Shenzhen", "150", "214.5", "20.1"),
    ("Average", "121.7", "163.5", "19.3"),
)
TABLE_NOTE = "Note: Yield is measured at the inverter output and excludes curtailed hours."
FIGURE_CAPTION = "Figure 1: Monthly energy output of the Shenzhen site in 2024 (MWh)."
FIGURE_VALUES = (12.1, 13.4, 16.0, 17.8, 19.5, 20.6, 21.3, 21.0, 19.2, 18.1, 14.6, 12.9)
ROTATED_SENTENCE = "During the dry season the panels were cleaned every 14 days by the maintenance crew."
LIST_ITEMS = (
    "Monocrystalline panels were installed at every site.",
    "Each inverter logged its output every fifteen minutes.",
    "Weather data came from the nearest public station.",
)

PAGE1_EN = (
    "This report summarises a one-year field study of rooftop solar panels installed at three sites in China. "
    "The study compares the annual energy yield, the conversion efficiency and the maintenance effort of "
    "identical systems exposed to different climates.",
    "All systems use the same panel model and inverter type, so differences in output reflect the local "
    "weather and the cleaning schedule rather than the hardware. " + EN_SENTENCE,
)
PAGE1_ZH = (
    "本报告总结了在中国三个地点开展的屋顶太阳能电池板为期一年的实地研究。研究比较了不同气候条件下相同系统的"
    "年发电量、转换效率以及维护工作量。",
    "北京站点冬季日照时间较短，发电量明显下降。" + ZH_SENTENCE + "上海站点的表现介于两者之间。",
)
PAGE2_EN = (
    "Table 1 lists the installed capacity, the annual yield and the mean conversion efficiency of each site. "
    "The Shenzhen system is the largest and also the most efficient, while the Shanghai system is the smallest."
)
PAGE2_ZH = "表格中的效率为全年平均值，计算时已扣除逆变器损耗。各站点的装机容量不同，因此应比较单位容量的发电量。"
FIGURE_SENTENCE = "Figure 1 shows that the monthly output of the Shenzhen site peaks in July and is lowest in January."
PAGE3_EN = FIGURE_SENTENCE + " The summer months deliver almost twice the energy of the winter months."
PAGE3_ZH = "七月份的发电量最高，一月份最低。夏季的发电量几乎是冬季的两倍。"
PAGE4_EN = (
    "This appendix page is stored with a rotation of ninety degrees and is displayed in landscape orientation. "
    + ROTATED_SENTENCE
    + " No panel was replaced during the study."
)

SAMPLE_FACTS = SampleFacts(
    title=TITLE,
    facts=(
        SampleFact("en_sentence", 1, "text", EN_SENTENCE),
        SampleFact("zh_sentence", 1, "text", ZH_SENTENCE),
        SampleFact("list_item", 1, "list", LIST_ITEMS[1]),
        SampleFact("table_caption", 2, "table_caption", TABLE_CAPTION),
        SampleFact("table_row", 2, "table", " | ".join(TABLE_ROWS[2])),
        SampleFact("table_note", 2, "table_footnote", TABLE_NOTE),
        SampleFact("figure_sentence", 3, "text", FIGURE_SENTENCE),
        SampleFact("figure_caption", 3, "figure_caption", FIGURE_CAPTION),
        SampleFact("rotated_sentence", ROTATED_PAGE, "text", ROTATED_SENTENCE),
    ),
    qa=(
        SampleQA("Which test site had the highest annual yield?", "Shenzhen", ("en_sentence", "table_row")),
        SampleQA("What was the annual yield of the Shenzhen site in MWh?", "214.5 MWh", ("table_row",)),
        SampleQA(
            "In which month does the Shenzhen site's output peak?", "July", ("figure_sentence", "figure_caption")
        ),
        SampleQA("How often were the panels cleaned during the dry season?", "Every 14 days", ("rotated_sentence",)),
    ),
)
"""The verbatim facts of the sample PDF and demo question/answer pairs over them."""


# ---------------------------------------------------------------------------------------------- drawing
@dataclass(frozen=True)
class _Style:
    """Fonts and sizes of the sample (points)."""

    body_font: str = "Helvetica"
    bold_font: str = "Helvetica-Bold"
    body_size: float = 10.5
    leading: float = 14.0
    title_size: float = 22.0
    heading_size: float = 14.0
    small_size: float = 8.5
    margin: float = 64.0


class _Painter:
    """Draws on a reportlab canvas in display points (origin top-left of the displayed page)."""

    def __init__(self, c: rl_canvas.Canvas, width: float, height: float, style: _Style) -> None:
        self.c = c
        self.w = width
        self.h = height
        self.s = style
        self.y = style.margin + 30.0  # cursor: top of the next line, display points from the top

    def text(self, x: float, y_top: float, text: str, font: str, size: float, color=(0, 0, 0)) -> None:
        """Draw one line whose em box starts ``y_top`` points below the top edge."""
        self.c.setFillColorRGB(*color)
        self.c.setFont(font, size)
        self.c.drawString(x, self.h - y_top - size * 0.8, text)

    def header_footer(self, page: int) -> None:
        s = self.s
        self.text(s.margin, 28, HEADER_LEFT, s.body_font, s.small_size, (0.3, 0.3, 0.3))
        right_w = pdfmetrics.stringWidth(HEADER_RIGHT, CJK_FONT, s.small_size)
        self.text(self.w - s.margin - right_w, 28, HEADER_RIGHT, CJK_FONT, s.small_size, (0.3, 0.3, 0.3))
        self.c.setStrokeColorRGB(0.6, 0.6, 0.6)
        self.c.setLineWidth(0.5)
        self.c.line(s.margin, self.h - 42, self.w - s.margin, self.h - 42)
        footer = f"Page {page} of {SAMPLE_N_PAGES}"
        fw = pdfmetrics.stringWidth(footer, s.body_font, s.small_size)
        self.text((self.w - fw) / 2, self.h - 36, footer, s.body_font, s.small_size, (0.3, 0.3, 0.3))

    def title(self, text: str, size: float, gap_after: float = 10.0) -> None:
        font = CJK_FONT if any(ord(ch) > 0x2E80 for ch in text) else self.s.bold_font
        self.text(self.s.margin, self.y, text, font, size)
        self.y += size * 1.25 + gap_after

    def paragraph(self, text: str, cjk: bool = False, gap_after: float = 10.0, indent: float = 0.0) -> None:
        s = self.s
        width = self.w - 2 * s.margin - indent
        font = CJK_FONT if cjk else s.body_font
        lines = _wrap_cjk(text, font, s.body_size, width) if cjk else simpleSplit(text, font, s.body_size, width)
        for line in lines:
            self.text(s.margin + indent, self.y, line, font, s.body_size)
            self.y += s.leading
        self.y += gap_after

    def bullets(self, items: tuple[str, ...]) -> None:
        s = self.s
        for item in items:
            self.text(s.margin + 6, self.y, "\u2022", s.body_font, s.body_size)
            self.paragraph(item, gap_after=3.0, indent=18.0)
        self.y += 7.0

    def table(self, header: tuple[str, ...], rows: tuple[tuple[str, ...], ...]) -> None:
        s = self.s
        col_w = (160.0, 100.0, 100.0, 100.0)
        row_h = 20.0
        x0 = s.margin
        y0 = self.y
        all_rows = (header, *rows)
        self.c.setStrokeColorRGB(0, 0, 0)
        self.c.setLineWidth(0.8)
        total_w = sum(col_w)
        for r in range(len(all_rows) + 1):
            yy = self.h - (y0 + r * row_h)
            self.c.line(x0, yy, x0 + total_w, yy)
        xx = x0
        for cw in (0.0, *col_w):
            xx += cw
            self.c.line(xx, self.h - y0, xx, self.h - (y0 + len(all_rows) * row_h))
        for r, row in enumerate(all_rows):
            font = s.bold_font if r == 0 else s.body_font
            xx = x0
            for cell, cw in zip(row, col_w, strict=True):
                self.text(xx + 6, y0 + r * row_h + 5.5, cell, font, s.body_size - 0.5)
                xx += cw
        self.y = y0 + len(all_rows) * row_h + 6.0

    def bar_chart(self, values: tuple[float, ...], height: float = 190.0) -> None:
        """A bar chart made only of vector paths (axes and filled rectangles), no text."""
        s = self.s
        x0, width = s.margin + 20, self.w - 2 * s.margin - 40
        top = self.y
        base = top + height
        self.c.setStrokeColorRGB(0, 0, 0)
        self.c.setLineWidth(1.0)
        self.c.line(x0, self.h - base, x0 + width, self.h - base)
        self.c.line(x0, self.h - base, x0, self.h - top)
        bar_w = width / len(values)
        vmax = max(values)
        for i, v in enumerate(values):
            bh = (height - 10) * v / vmax
            self.c.setFillColorRGB(0.2, 0.45 + 0.03 * (i % 4), 0.75)
            self.c.rect(x0 + i * bar_w + bar_w * 0.15, self.h - base, bar_w * 0.7, bh, stroke=0, fill=1)
        self.y = base + 10.0


def _wrap_cjk(text: str, font: str, size: float, width: float) -> list[str]:
    """Greedy character wrap for Chinese (no spaces to break at)."""
    lines, cur = [], ""
    for ch in text:
        if cur and pdfmetrics.stringWidth(cur + ch, font, size) > width:
            lines.append(cur)
            cur = ""
        cur += ch
    if cur:
        lines.append(cur)
    return lines


def write_sample_pdf(path: str | Path) -> Path:
    """Write the 4-page bilingual sample PDF to ``path`` (atomically) and return the path.

    Page 1: title, English and Chinese paragraphs, a bulleted list. Page 2: a ruled 4x5 table with the caption
    "Table 1: ..." above and a "Note: ..." footnote below. Page 3: a vector bar chart with "Figure 1: ..." below.
    Page 4: ``/Rotate 90`` (landscape as displayed, text upright) with a paragraph. Every page has a header line
    and a "Page N of 4" footer. The bytes are identical on every call (reportlab ``invariant=1``).
    """
    path = Path(path)
    _register_cjk_font()
    style = _Style()
    pw, ph = A4
    with atomic_path(path) as tmp:
        c = rl_canvas.Canvas(str(tmp), pagesize=A4, invariant=1)
        c.setTitle(TITLE)
        c.setAuthor("quotecite")
        c.setCreator("data_prep.sample")

        # Page 1: title, paragraphs, list.
        p = _Painter(c, pw, ph, style)
        p.header_footer(1)
        p.title(TITLE, style.title_size, gap_after=14)
        p.title("1. Introduction", style.heading_size)
        for para in PAGE1_EN:
            p.paragraph(para)
        p.title("2. 研究背景", style.heading_size)
        for para in PAGE1_ZH:
            p.paragraph(para, cjk=True)
        p.title("3. Methods", style.heading_size)
        p.bullets(LIST_ITEMS)
        c.showPage()

        # Page 2: table with caption above and note below.
        p = _Painter(c, pw, ph, style)
        p.header_footer(2)
        p.title("4. Results", style.heading_size)
        p.paragraph(PAGE2_EN, gap_after=16)
        p.text(style.margin, p.y, TABLE_CAPTION, style.bold_font, style.body_size)
        p.y += style.leading + 4
        p.table(TABLE_HEADER, TABLE_ROWS)
        p.text(style.margin, p.y, TABLE_NOTE, style.body_font, style.small_size)
        p.y += style.leading + 18
        p.paragraph(PAGE2_ZH, cjk=True)
        c.showPage()

        # Page 3: bar chart with caption below.
        p = _Painter(c, pw, ph, style)
        p.header_footer(3)
        p.title("5. Monthly output", style.heading_size)
        p.paragraph(PAGE3_EN, gap_after=18)
        p.bar_chart(FIGURE_VALUES)
        p.text(style.margin, p.y, FIGURE_CAPTION, style.bold_font, style.body_size)
        p.y += style.leading + 20
        p.paragraph(PAGE3_ZH, cjk=True)
        c.showPage()

        # Page 4: stored portrait with /Rotate 90, drawn so that it reads upright in landscape.
        # reportlab's page size is the displayed size: landscape here, so the stored MediaBox is portrait.
        c.setPageSize((ph, pw))
        c.setPageRotation(90)
        # Display (X, Y_up) -> content space (x, y) for a 90 degree clockwise /Rotate: x = W - Y_up, y = X.
        c.translate(pw, 0)
        c.rotate(90)
        p = _Painter(c, ph, pw, style)
        p.header_footer(4)
        p.title("Appendix A: Maintenance log", style.heading_size)
        p.paragraph(PAGE4_EN)
        c.showPage()
        c.save()
    return path
