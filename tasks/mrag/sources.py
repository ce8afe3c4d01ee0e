"""The knowledge bases' raw material, read from installed packages at build time (nothing is downloaded):

- text:       the English Wikipedia articles in gensim's test data (CC BY-SA 3.0), cleaned (``wikitext.py``:
              dates, dashes and conversions inside templates are kept) and split into passages;
- table:      tables bundled with vega_datasets, each serialised in chunks of rows under its header;
- text-image: images bundled with scikit-image, with captions written here from their documentation.

Only files whose licence allows reuse are read; ``LICENCES`` names the basis of each one.
"""

from __future__ import annotations

import bz2
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mmreason.tasks.mrag.wikitext import clean_article

WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MIN_ARTICLE_CHARS = 2_000  # shorter pages are redirects and stubs
PASSAGE_WORDS = 100
TABLE_ROWS_PER_CHUNK = 4

# vega_datasets does not state per-file licences; these tables are historical or public-domain data
# (the package's own code is BSD-3). Others (airports, stocks, weather ...) are left out.
TABLES = {
    "cars": "Cars: fuel efficiency, cylinders, horsepower, weight and origin of car models (1970-1982)",
    "barley": "Barley: yields of barley varieties at Minnesota sites in 1931 and 1932",
    "wheat": "Wheat: Playfair's price of wheat and weekly wages in England by year (1565-1821)",
    "crimea": "Crimea: Nightingale's monthly British army deaths in the Crimean War by cause (1854-1856)",
    "iris": "Iris: Fisher's sepal and petal measurements of iris flowers by species",
    "burtin": "Burtin: minimum inhibitory concentration of penicillin, streptomycin and neomycin per bacterium",
}

# Captions written from each image's documentation in skimage.data (the function's docstring).
IMAGES = {
    "astronaut.png": "Astronaut Eileen Collins, an American astronaut who first piloted the space shuttle STS-63 in 1995, "
    "photographed in front of a flag; a NASA photograph.",
    "coffee.png": "A cup of coffee on a saucer, photographed at Pikolo Espresso Bar; smooth porcelain on a wood grain table.",
    "chelsea.png": "Chelsea the cat, a tabby cat photographed close up.",
    "coins.png": "Greek coins from Pompeii against a grey background, from the Brooklyn Museum collection.",
    "camera.png": "A grey-level photograph of a person with a camera on a tripod.",
    "rocket.jpg": "The launch of DSCOVR on a SpaceX Falcon 9 rocket from Cape Canaveral Air Force Station, Florida.",
    "hubble_deep_field.jpg": "The Hubble eXtreme Deep Field: the Hubble telescope's farthest view of the universe, full of galaxies.",
    "moon.png": "A low-contrast grey image of the surface of the moon with craters.",
    "horse.png": "A black and white silhouette of a horse.",
    "retina.jpg": "A fundus photograph of a normal left human retina, with its blood vessels.",
    "clock_motion.png": "A wall clock photographed while moving the camera horizontally: motion blur.",
    "brick.png": "A small section of a brick wall.",
    "grass.png": "A grey-level close-up of grass.",
    "gravel.png": "A grey-level close-up of gravel.",
    "text.png": "Grey-level printed text used for corner detection.",
}

LICENCES = {
    "text": "CC BY-SA 3.0 (Wikipedia articles shipped in gensim's test data)",
    "table": "historical / public-domain data as bundled by vega_datasets (BSD-3 package)",
    **{f"image:{name}": "CC0 or public domain per the skimage.data documentation" for name in IMAGES},
}


@dataclass
class Item:
    """One retrievable unit of a knowledge base."""

    id: str
    kb: str  # "text" | "table" | "image"
    title: str
    text: str
    image: str | None = None  # file path (text-image items)
    fields: dict[str, str] = field(default_factory=dict)  # a table row's cells (question generation)


def wiki_path() -> Path:
    import gensim

    return Path(gensim.__file__).parent / "test" / "test_data" / WIKI_FILE


def skimage_dir() -> Path:
    import skimage

    return Path(skimage.__file__).parent / "data"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _passages(title: str, text: str) -> list[str]:
    """~PASSAGE_WORDS-word passages on paragraph boundaries (a long paragraph is split by words)."""
    out, words = [], []
    for para in (p.strip() for p in text.split("\n")):
        if not para or para.startswith(("*", "|", "{", "=")) or len(para) < 40:
            continue
        words += para.split()
        while len(words) >= PASSAGE_WORDS:
            out.append(" ".join(words[:PASSAGE_WORDS]))
            words = words[PASSAGE_WORDS:]
    if len(words) >= 20:
        out.append(" ".join(words))
    return out


def text_items(max_articles: int | None = None) -> list[Item]:
    from gensim.corpora.wikicorpus import extract_pages

    items = []
    with bz2.open(wiki_path()) as f:
        articles = 0
        for title, markup, _ in extract_pages(f, filter_namespaces=("0",)):
            text = clean_article(markup)
            if len(text) < MIN_ARTICLE_CHARS:
                continue
            text = re.sub(r"\n\s*[\w ]{1,40}\s*\n", "\n", text)  # stray headings left by filter_wiki
            for k, passage in enumerate(_passages(title, text)):
                items.append(Item(f"text:{title}:{k}", "text", title, passage))
            articles += 1
            if max_articles is not None and articles >= max_articles:
                break
    return items


def _cell(value, yearly: bool = False) -> str:
    """A table cell as text: a date of a yearly column as its year, a first-of-month date as "March 1855"
    (words a question uses), other dates in full; floats without trailing zeros."""
    if hasattr(value, "strftime"):
        if yearly:
            return value.strftime("%Y")
        return value.strftime("%B %Y") if value.day == 1 else value.strftime("%Y-%m-%d")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _yearly_columns(frame) -> set[str]:
    """Date columns whose every value is 1 January (years stored as dates, e.g. the cars' model year)."""
    out = set()
    for column in frame.columns:
        values = [v for v in frame[column] if hasattr(v, "strftime")]
        if values and all(v.month == 1 and v.day == 1 for v in values):
            out.add(str(column))
    return out


def table_items() -> list[Item]:
    from vega_datasets import local_data

    items = []
    for name, title in TABLES.items():
        frame = getattr(local_data, name)()
        columns = [str(c) for c in frame.columns]
        yearly = _yearly_columns(frame)
        rows = [{c: _cell(v, c in yearly) for c, v in zip(columns, record)} for record in frame.itertuples(index=False)]
        for start in range(0, len(rows), TABLE_ROWS_PER_CHUNK):
            chunk = rows[start : start + TABLE_ROWS_PER_CHUNK]
            body = "\n".join(" | ".join(r[c] for c in columns) for r in chunk)
            text = f"Table {title}\n{' | '.join(columns)}\n{body}"
            items.append(Item(f"table:{name}:{start}", "table", title, text))
        for k, row in enumerate(rows):  # rows as fields, for question generation (not indexed)
            items.append(Item(f"row:{name}:{k}", "row", title, "", fields=row))
    return items


def image_items() -> list[Item]:
    folder = skimage_dir()
    items = []
    for name, caption in IMAGES.items():
        path = folder / name
        if path.exists():
            items.append(Item(f"image:{name}", "image", name.rsplit(".", 1)[0], caption, image=str(path)))
    return items


def source_files() -> dict[str, str]:
    """The files read, with their sha256 (recorded in the index manifest)."""
    files = {"wiki": wiki_path()}
    files.update({f"image:{n}": skimage_dir() / n for n in IMAGES})
    return {k: sha256(p) for k, p in files.items() if os.path.exists(p)}
