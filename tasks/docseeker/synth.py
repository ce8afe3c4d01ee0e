"""Synthetic long documents with questions answered on known evidence pages.

``generate(out_dir, docs, pages_min, pages_max, seed)`` draws multi-page reports with PIL (a title page,
then sections of paragraphs, tables and bar charts in DejaVu fonts), saves each as a PDF (one raster
page per sheet, 100 dpi, US Letter by default) and writes ``data.jsonl`` in the loader's row shape:

    {"id", "document": "doc-00003.pdf", "question", "answer", "evidence_pages": [1-based],
     "evidence_base": 1, "answer_format": "str" | "int", "qtype",
     "analysis", "localization", "reasoning"}     # the ALR annotation, for SFT

Question kinds (one per document, drawn by the seed): a table cell, the tallest bar of a chart, a fact
stated in a paragraph, the sum of two figures stated on two different pages, the document title, and
the page count (no specific evidence page: ``[-1]``). Same (docs, pages, seed, page size) -> same files.

``style="marks"``: small "slides" (112 x 140 px: 20 visual tokens each at a 20-token budget) for
learning checks on a small model, where the evidence page is found from what such a model can see. Every
page has a coloured banner across its top two fifths and a coloured box in its bottom two fifths (banner colours distinct within a
document, box colours too, a box never the colour of its own banner), over grey filler lines. The question
names one banner colour: "What colour is the box on the page with the red banner?"; the evidence is that
page and the answer its box's colour, so citing the page needs the banner and answering needs the box.
The ALR trace (``trace="list"``) reads every page's banner in order ("Page 1: blue. Page 2: red. ... The
red banner is on page 2."), then the box of the page it found; ``trace="local"`` reads each page's banner
and box on one line and marks the line whose banner is the asked colour ("Page 2: red, yellow. red? yes.").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmreason.paths import generated_jsonl, write_jsonl

DPI = 100  # pages are drawn at 100 px per inch and rendered back at the media layer's default 100 dpi
PAGE_SIZE = (850, 1100)  # US Letter at 100 dpi (width, height)
MARGIN = 70

ORGS = (
    "Northwind Institute",
    "Harbor Logistics",
    "Granite Energy",
    "Meridian Health",
    "Alder Robotics",
    "Cobalt Water Board",
    "Summit Rail",
    "Juniper Analytics",
)
TOPICS = (
    "Operations",
    "Market Overview",
    "Regional Results",
    "Research Programme",
    "Staffing",
    "Outlook",
    "Risk Review",
    "Infrastructure",
    "Customer Survey",
    "Sustainability",
    "Procurement",
    "Finance",
)
REGIONS = ("North", "South", "East", "West", "Central", "Coastal")
METRICS = ("revenue (k$)", "shipments", "incidents", "new customers", "energy use (MWh)", "hires")
CATEGORIES = ("Alpha", "Bravo", "Cedar", "Delta", "Ember", "Falcon", "Garnet")
PROJECTS = ("Lighthouse", "Kestrel", "Bluebird", "Orchard", "Quarry", "Tamarind", "Vantage", "Willow")
NOUNS = (
    "network",
    "programme",
    "budget",
    "schedule",
    "fleet",
    "supplier",
    "survey",
    "facility",
    "team",
    "forecast",
    "contract",
    "inventory",
    "workshop",
    "pipeline",
    "audit",
)
VERBS = ("improved", "reduced", "extended", "reviewed", "supported", "delayed", "expanded", "stabilised")
ADJS = ("regional", "quarterly", "external", "internal", "planned", "revised", "shared", "annual")


def _font_dir() -> Path:
    import matplotlib

    return Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf"


@dataclass
class Fonts:
    """The DejaVu faces bundled with matplotlib (a project dependency), so every machine draws alike."""

    title: Any
    heading: Any
    body: Any
    small: Any

    @classmethod
    def load(cls, scale: float = 1.0) -> Fonts:
        from PIL import ImageFont

        d = _font_dir()

        def face(name: str, size: int):
            return ImageFont.truetype(str(d / name), max(6, round(size * scale)))

        return cls(
            face("DejaVuSans-Bold.ttf", 34),
            face("DejaVuSans-Bold.ttf", 22),
            face("DejaVuSerif.ttf", 15),
            face("DejaVuSans.ttf", 12),
        )


@dataclass
class Page:
    """One page's content: drawn blocks in order, and facts a question can ask about."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)  # (kind, payload)


# ---- text --------------------------------------------------------------------------------------


def sentence(rng: random.Random) -> str:
    return (
        f"The {rng.choice(ADJS)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} "
        f"across {rng.randint(2, 40)} {rng.choice(('sites', 'weeks', 'teams', 'routes', 'units'))}."
    )


def paragraph(rng: random.Random, n: int | None = None) -> str:
    return " ".join(sentence(rng) for _ in range(n or rng.randint(3, 6)))


def wrap(draw, text: str, font, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if draw.textlength(trial, font=font) <= width or not line:
            line = trial
        else:
            lines.append(line)
            line = word
    return lines + ([line] if line else [])


# ---- drawing -----------------------------------------------------------------------------------


def draw_table(draw, fonts: Fonts, x: int, y: int, width: int, table: dict) -> int:
    """A ruled table with a bold header row; returns the y below it."""
    draw.text((x, y), table["title"], font=fonts.heading, fill=(20, 20, 20))
    y += 34
    cols = len(table["columns"]) + 1
    cell_w, cell_h = width // cols, 28
    header = ["Region", *table["columns"]]
    for r, row in enumerate([header, *table["rows"]]):
        fill = (225, 230, 240) if r == 0 else (255, 255, 255)
        for c, value in enumerate(row):
            box = (x + c * cell_w, y, x + (c + 1) * cell_w, y + cell_h)
            draw.rectangle(box, fill=fill, outline=(90, 90, 90))
            draw.text((box[0] + 8, box[1] + 6), str(value), font=fonts.small, fill=(10, 10, 10))
        y += cell_h
    return y + 20


def draw_chart(draw, fonts: Fonts, x: int, y: int, width: int, chart: dict) -> int:
    """A bar chart with axis, value labels and category names; returns the y below it."""
    draw.text((x, y), chart["title"], font=fonts.heading, fill=(20, 20, 20))
    y += 36
    height = 220
    base = y + height
    draw.line((x, y, x, base), fill=(40, 40, 40), width=2)
    draw.line((x, base, x + width, base), fill=(40, 40, 40), width=2)
    top = max(chart["values"])
    slot = width // len(chart["values"])
    for i, (label, value) in enumerate(zip(chart["labels"], chart["values"])):
        h = int((height - 20) * value / top)
        left = x + i * slot + slot // 5
        draw.rectangle((left, base - h, left + slot * 3 // 5, base), fill=(60, 110, 180))
        draw.text((left, base - h - 16), str(value), font=fonts.small, fill=(10, 10, 10))
        draw.text((left, base + 6), label, font=fonts.small, fill=(10, 10, 10))
    return base + 36


def draw_page(page: Page, number: int, fonts: Fonts, size: tuple[int, int]):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    width = size[0] - 2 * MARGIN
    y = MARGIN
    for kind, payload in page.blocks:
        if y > size[1] - MARGIN:
            break
        if kind == "title":
            for line in wrap(draw, payload, fonts.title, width):
                draw.text((MARGIN, y), line, font=fonts.title, fill=(15, 25, 60))
                y += 46
            y += 20
        elif kind == "heading":
            draw.text((MARGIN, y), payload, font=fonts.heading, fill=(15, 25, 60))
            y += 40
        elif kind == "text":
            for line in wrap(draw, payload, fonts.body, width):
                draw.text((MARGIN, y), line, font=fonts.body, fill=(25, 25, 25))
                y += 22
            y += 14
        elif kind == "table":
            y = draw_table(draw, fonts, MARGIN, y, width, payload)
        elif kind == "chart":
            y = draw_chart(draw, fonts, MARGIN, y, width, payload)
    footer = f"- {number} -"
    draw.text(
        ((size[0] - draw.textlength(footer, font=fonts.small)) / 2, size[1] - 45),
        footer,
        font=fonts.small,
        fill=(80, 80, 80),
    )
    return image


# ---- composing a document and its question -----------------------------------------------------

KINDS = ("table", "chart", "fact", "sum", "title", "count")
KIND_WEIGHTS = (3, 3, 3, 2, 1, 1)


def _code(rng: random.Random) -> str:
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randint(1000, 9999)}"


def _table(rng: random.Random) -> dict:
    start = rng.randint(2015, 2022)
    regions = rng.sample(REGIONS, 4)
    return {
        "metric": rng.choice(METRICS),
        "columns": [str(start + k) for k in range(3)],
        "rows": [[r, *(rng.randint(10, 990) for _ in range(3))] for r in regions],
    }


def _chart(rng: random.Random) -> dict:
    labels = rng.sample(CATEGORIES, rng.randint(4, 6))
    values = rng.sample(range(5, 95), len(labels))  # distinct, so the tallest bar is unique
    return {
        "quantity": rng.choice(("Units sold", "Open tickets", "Trips", "Sensors installed")),
        "labels": labels,
        "values": values,
    }


def _question_kind(rng: random.Random, n_pages: int) -> str:
    allowed = [(k, w) for k, w in zip(KINDS, KIND_WEIGHTS) if n_pages >= {"sum": 3, "title": 1, "count": 1}.get(k, 2)]
    return rng.choices([k for k, _ in allowed], weights=[w for _, w in allowed])[0]


def compose(rng: random.Random, n_pages: int) -> tuple[list[Page], dict]:
    """The pages of one document and its question row (without id/document), evidence 1-based."""
    title = (
        f"{rng.choice(ORGS)} {rng.choice(('Annual Report', 'Operations Review', 'Field Study', 'Board Briefing'))}"
        f" {rng.randint(2015, 2025)}"
    )
    kind = _question_kind(rng, n_pages)
    content = list(range(2, n_pages + 1))  # 1-based numbers of the pages after the title page
    blocks = {p: rng.choice(("table", "chart", "text", "text")) for p in content}
    projects = rng.sample(PROJECTS, 4)
    facts: dict[int, list[str]] = {p: [] for p in content}
    evidence: list[int] = []
    if kind in ("table", "chart"):
        evidence = [rng.choice(content)]
        blocks[evidence[0]] = kind
    elif kind == "fact":
        evidence = [rng.choice(content)]
        code = _code(rng)
        facts[evidence[0]].append(f"The reference code of the {projects[0]} project is {code}.")
    elif kind == "sum":
        evidence = sorted(rng.sample(content, 2))
        budgets = [rng.randint(20, 480), rng.randint(20, 480)]
        for p, project, b in zip(evidence, projects[:2], budgets):
            facts[p].append(f"The {project} project was allocated a budget of {b} thousand dollars.")
    elif kind == "title":
        evidence = [1]
    for p in rng.sample(content, min(2, len(content))):  # distractors: codes of other projects
        if kind != "fact" or p not in evidence or rng.random() < 0.5:
            facts[p].append(f"The reference code of the {rng.choice(projects[2:])} project is {_code(rng)}.")

    pages = [
        Page(
            [
                ("title", title),
                ("text", f"Prepared by the {rng.choice(TOPICS).lower()} office. " + paragraph(rng, 3)),
                ("heading", "Summary"),
                ("text", paragraph(rng, 8)),
                ("text", paragraph(rng, 6)),
            ]
        )
    ]
    tables, charts, target = 0, 0, None
    for section, p in enumerate(content, start=1):
        page = Page([("heading", f"{section}. {rng.choice(TOPICS)}")])
        text = paragraph(rng, rng.randint(5, 8)).split(". ")
        for fact in facts[p]:
            text.insert(rng.randint(0, len(text)), fact.rstrip("."))
        page.blocks.append(("text", ". ".join(t.rstrip(".") for t in text) + "."))
        if blocks[p] == "table":
            tables += 1
            table = _table(rng)
            table["title"] = f"Table {tables}: {table['metric']} by region"
            page.blocks.append(("table", table))
            if kind == "table" and p == evidence[0]:
                target = table
        elif blocks[p] == "chart":
            charts += 1
            chart = _chart(rng)
            chart["title"] = f"Figure {charts}: {chart['quantity']} by unit"
            page.blocks.append(("chart", chart))
            if kind == "chart" and p == evidence[0]:
                target = chart
        page.blocks.append(("text", paragraph(rng)))
        page.blocks.append(("heading", f"{section}.1 {rng.choice(TOPICS)}"))
        page.blocks += [("text", paragraph(rng)) for _ in range(3)]  # drawing stops at the bottom margin
        pages.append(page)
    row = _question(rng, kind, title, n_pages, evidence, target, facts, projects)
    return pages, row


def _question(rng, kind, title, n_pages, evidence, target, facts, projects) -> dict:
    """Question, answer and an ALR annotation (analysis / localization / reasoning) for one document."""
    pages = ", ".join(str(p) for p in evidence)
    if kind == "table":
        row = rng.choice(target["rows"])
        c = rng.randrange(3)
        year, value = target["columns"][c], row[1 + c]
        name = target["title"].split(":")[0]
        q = f"In {name}, what is the {target['metric']} of the {row[0]} region in {year}?"
        a, fmt = str(value), "int"
        alr = (
            f"The question asks for one cell of {name}: the {row[0]} row in the {year} column.",
            f"Page {pages} holds {name}, titled '{target['title']}'.",
            f"In that table the {row[0]} row reads {value} under {year}, so the answer is {value}.",
        )
    elif kind == "chart":
        best = max(range(len(target["values"])), key=lambda i: target["values"][i])
        name = target["title"].split(":")[0]
        q = f"According to {name}, which unit has the highest value?"
        a, fmt = target["labels"][best], "str"
        alr = (
            f"The question asks which bar of {name} is the tallest.",
            f"Page {pages} shows {name}, a bar chart titled '{target['title']}'.",
            f"The tallest bar is {a} with {target['values'][best]}; every other bar is lower.",
        )
    elif kind == "fact":
        fact = next(f for f in facts[evidence[0]] if projects[0] in f)
        a, fmt = fact.rsplit(" ", 1)[1].rstrip("."), "str"
        q = f"What is the reference code of the {projects[0]} project?"
        alr = (
            f"The question asks for the reference code of the {projects[0]} project.",
            f"Page {pages} states: '{fact}' Other pages give codes of other projects only.",
            f"The sentence on page {pages} gives the code directly: {a}.",
        )
    elif kind == "sum":
        values = [
            int(next(f for f in facts[p] if proj in f).split("budget of ")[1].split()[0])
            for p, proj in zip(evidence, projects[:2])
        ]
        q = f"What is the combined budget of the {projects[0]} and {projects[1]} projects, in thousand dollars?"
        a, fmt = str(sum(values)), "int"
        alr = (
            f"The question needs two budgets, of {projects[0]} and of {projects[1]}, added together.",
            f"Page {evidence[0]} gives the {projects[0]} budget ({values[0]}); page {evidence[1]} gives the "
            f"{projects[1]} budget ({values[1]}).",
            f"{values[0]} + {values[1]} = {a} thousand dollars.",
        )
    elif kind == "title":
        q, a, fmt = "What is the title of this document?", title, "str"
        alr = (
            "The question asks for the document's title.",
            "Page 1 is the title page; the title is printed at its top in large type.",
            f"The title reads '{title}'.",
        )
    else:  # count: answered by the page labels, not by any one page
        q, a, fmt = "How many pages does this document have?", str(n_pages), "int"
        evidence = [-1]
        alr = (
            "The question asks for the number of pages, a property of the whole document.",
            f"No single page holds the answer; the pages are labelled Page 1 to Page {n_pages}.",
            f"The last label is Page {n_pages}, so the document has {n_pages} pages.",
        )
    return {
        "question": q,
        "answer": a,
        "evidence_pages": evidence,
        "evidence_base": 1,
        "answer_format": fmt,
        "qtype": kind,
        "num_pages": n_pages,
        "analysis": alr[0],
        "localization": alr[1],
        "reasoning": alr[2],
    }


# ---- the "marks" style: a coloured banner names the evidence page ------------------------------

MARK_COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 70, 220),
    "yellow": (240, 210, 20),
    "orange": (245, 130, 20),
    "purple": (140, 40, 170),
}
MARK_PAGE_SIZE = (112, 140)  # 4 x 5 merged 28-px patches: 20 visual tokens at a 20-token page budget


MARK_TRACES = ("list", "local")


def compose_marks(rng: random.Random, n_pages: int, trace: str = "list") -> tuple[list[dict], dict]:
    """Banner and box colours of each page, and the question row (evidence 1-based) with its ALR trace
    in ``trace`` style (``mark_trace``); the style changes only the trace text, never a draw of ``rng``."""
    if trace not in MARK_TRACES:
        raise ValueError(f"trace must be one of {', '.join(MARK_TRACES)}, got {trace!r}")
    names = list(MARK_COLOURS)
    if n_pages > len(names) - 1:
        raise ValueError(f"the marks style has {len(names)} colours: at most {len(names) - 1} pages, got {n_pages}")
    banners = rng.sample(names, n_pages)
    boxes: list[str] = []
    for banner in banners:  # distinct box colours, none the colour of its own banner
        boxes.append(rng.choice([c for c in names if c != banner and c not in boxes]))
    page = rng.randrange(n_pages)
    banner, box = banners[page], boxes[page]
    pages = [{"banner": b, "box": x, "lines": rng.randint(1, 3)} for b, x in zip(banners, boxes)]
    row = {
        "question": f"What colour is the box on the page with the {banner} banner?",
        "answer": box,
        "evidence_pages": [page + 1],
        "evidence_base": 1,
        "answer_format": "str",
        "qtype": "mark",
        "num_pages": n_pages,
        "analysis": f"Find the {banner} banner.",
        **mark_trace(trace, banner, banners, boxes),
        "banners": banners,
        "boxes": boxes,
    }
    return pages, row


def mark_trace(trace: str, asked: str, banners: list[str], boxes: list[str]) -> dict[str, str]:
    """The localization and reasoning of a marks document's ALR trace.

    ``list``: every banner in order, then the look-up as one step ("Page 1: blue. Page 2: red. The red
    banner is on page 2." / "The box on page 2 is yellow."): the page cited must be found in a list
    written tens of tokens earlier. ``local``: one line per page with its banner, its box and the asked
    colour compared with the banner right there ("Page 2: red, yellow. red? yes."), then
    "Evidence: page 2. Answer: yellow." copied from the one line marked yes, so no step looks further
    back than the line it is on (or the line marked yes).
    """
    page = banners.index(asked) + 1
    if trace == "list":
        return {
            "localization": " ".join(f"Page {k}: {b}." for k, b in enumerate(banners, start=1))
            + f" The {asked} banner is on page {page}.",
            "reasoning": f"The box on page {page} is {boxes[page - 1]}.",
        }
    lines = [
        f"Page {k}: {b}, {x}. {asked}? {'yes' if b == asked else 'no'}."
        for k, (b, x) in enumerate(zip(banners, boxes), start=1)
    ]
    return {"localization": "\n".join(lines), "reasoning": f"Evidence: page {page}. Answer: {boxes[page - 1]}."}


def draw_marks_page(page: dict, size: tuple[int, int]):
    """Banner across the top 2/5 of the page, grey filler lines, and a box centred in the bottom 2/5; on the
    112 x 140 page each is whole 28-px patches (8 banner, 4 box), so every patch holds one colour."""
    from PIL import Image, ImageDraw

    w, h = size
    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, w - 1, round(h * 0.4) - 1), fill=MARK_COLOURS[page["banner"]])
    draw.rectangle((round(w * 0.25), round(h * 0.6), round(w * 0.75) - 1, h - 1), fill=MARK_COLOURS[page["box"]])
    for k in range(page["lines"]):  # grey filler "text" between them
        y = round(h * (0.43 + 0.05 * k))
        draw.rectangle((round(w * 0.1), y, round(w * (0.9 - 0.1 * (k % 2))), y + max(1, h // 70)), fill=(150, 150, 150))
    return image


def generate(
    out_dir: str | Path,
    docs: int,
    pages_min: int = 3,
    pages_max: int = 8,
    seed: int = 0,
    page_size: tuple[int, int] = PAGE_SIZE,
    style: str = "report",
    trace: str = "list",
) -> Path:
    """Write ``docs`` PDFs and ``data.jsonl`` under ``out_dir``; returns the JSONL path.

    ``style``: ``report`` (multi-section reports) or ``marks`` (coloured banners; see the module doc).
    ``trace``: the marks style's ALR trace, ``list`` or ``local`` (``mark_trace``); the documents, questions
    and answers do not depend on it.
    An existing ``data.jsonl`` with ``docs`` rows is reused (the folder name should carry the arguments).
    """
    if style not in ("report", "marks"):
        raise ValueError(f"style must be report or marks, got {style!r}")
    if trace not in MARK_TRACES or (trace != "list" and style != "marks"):
        raise ValueError(
            f"trace must be one of {', '.join(MARK_TRACES)} (a non-default trace only with style "
            f"marks), got trace={trace!r} with style={style!r}"
        )
    if not 1 <= pages_min <= pages_max:
        raise ValueError(f"pages must satisfy 1 <= MIN <= MAX, got {pages_min}..{pages_max}")
    out = Path(out_dir)
    done = generated_jsonl(out, docs)
    if done is not None:
        return done
    out.mkdir(parents=True, exist_ok=True)
    fonts = Fonts.load(page_size[0] / PAGE_SIZE[0])
    rows = []
    for i in range(docs):
        if style == "marks":
            rng = random.Random(f"docseeker-marks/{seed}/{i}")
            marks, row = compose_marks(rng, rng.randint(pages_min, pages_max), trace)
            images = [draw_marks_page(p, page_size) for p in marks]
        else:
            rng = random.Random(f"docseeker/{seed}/{i}")
            pages, row = compose(rng, rng.randint(pages_min, pages_max))
            images = [draw_page(p, k, fonts, page_size) for k, p in enumerate(pages, start=1)]
        name = f"doc-{i:05d}.pdf"
        tmp = out / (name + ".tmp")
        images[0].save(tmp, "PDF", save_all=True, append_images=images[1:], resolution=DPI, quality=90)
        tmp.replace(out / name)
        rows.append({"id": f"docseeker-{seed}-{i}", "document": name, **row})
    return write_jsonl(out / "data.jsonl", rows)
