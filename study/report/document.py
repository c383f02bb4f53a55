"""The report as a document: sections of paragraphs, tables, figures and bullets, rendered through the Jinja2
templates in templates/ to Markdown and to an HTML page that shows the figures beside it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import pandas as pd
from markdown_it import MarkdownIt
from markupsafe import Markup


@dataclass
class Table:
    """A table of already formatted cells, with an optional caption; in HTML a table of more than LONG_TABLE_ROWS
    rows is collapsed behind a one-line `summary` (by default its size)."""

    frame: pd.DataFrame
    caption: str = ""
    summary: str = ""


@dataclass
class FigureRef:
    """A figure file (relative to the report folder) and what it shows."""

    path: str
    caption: str


@dataclass
class Bullets:
    """A bulleted list of short lines."""

    items: list[str]


@dataclass
class Section:
    """A heading and its blocks: paragraphs (str), Table, FigureRef or Bullets."""

    heading: str
    blocks: list = field(default_factory=list)


# Cells up to this many characters never wrap in HTML ("0.6 s", "not within 8"); longer ones wrap between their parts,
# an interval "[+0.0012, +0.0040]" or a "mean ± std" kept whole.
SHORT_CELL = 12
# Tables of this many columns or more become one card per row on narrow screens, where they cannot fit as a grid.
STACKED_COLUMNS = 4
# Tables of this many columns or more may be wider than the text column, up to the window's width.
WIDE_COLUMNS = 8
# Tables of more rows than this are collapsed in HTML behind a one-line summary: as cards on a 420 px screen the
# per-metric comparison (40 rows of 15 columns) alone was 37,000 px long.
LONG_TABLE_ROWS = 10
_INLINE = MarkdownIt("commonmark", {"html": False})  # raw HTML in a caption is text, not markup
# In rendered (escaped) cell text: a bracketed interval, or "a ± b"; neither holds a tag.
_UNBREAKABLE = re.compile(r"\[[^\[\]<>]*\]|[^\s<>]+ ± [^\s<>]+")


# A reader skims: a paragraph (or a bullet) longer than this is split at its sentence ends into several.
MAX_PARAGRAPH_WORDS = 120
# A sentence ends at . ! or ? before a space and a capital, a bold mark, a quote or a parenthesis ("e.g. a" and
# "0.5" do not end one).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*\"(])")


def short_paragraphs(text: str) -> list[str]:
    """`text` as paragraphs of at most MAX_PARAGRAPH_WORDS words, split only between sentences (one longer sentence
    stays whole)."""
    if len(text.split()) <= MAX_PARAGRAPH_WORDS:
        return [text]
    paragraphs, current = [], []
    for sentence in _SENTENCE_END.split(text):
        if current and len(" ".join(current + [sentence]).split()) > MAX_PARAGRAPH_WORDS:
            paragraphs.append(" ".join(current))
            current = []
        current.append(sentence)
    return _bold_kept(paragraphs + [" ".join(current)])


def _bold_kept(paragraphs: list[str]) -> list[str]:
    """Paragraphs split out of one, with a bold span (`**`) that crosses a split closed before it and opened again
    after it, so that no paragraph shows a stray `**`."""
    kept, open_ = [], False
    for paragraph in paragraphs:
        paragraph = f"**{paragraph}" if open_ else paragraph
        open_ = paragraph.count("**") % 2 == 1
        kept.append(f"{paragraph}**" if open_ else paragraph)
    return kept


def _readable(sections: list[Section]) -> list[Section]:
    """The sections with every long paragraph and bullet split by short_paragraphs."""
    def blocks(section: Section) -> list:
        out = []
        for block in section.blocks:
            if isinstance(block, str):
                out += short_paragraphs(block)
            elif isinstance(block, Bullets):
                out.append(Bullets([part for item in block.items for part in short_paragraphs(item)]))
            else:
                out.append(block)
        return out

    return [Section(section.heading, blocks(section)) for section in sections]


def _kind(block) -> str:
    return {Table: "table", FigureRef: "figure", Bullets: "bullets"}.get(type(block), "paragraph")


def _markdown_cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _inline_html(text) -> str:
    """Inline Markdown (**bold**, *emphasis*, `code`) as HTML, everything else escaped."""
    return _INLINE.renderInline(str(text))


def _cell_html(text) -> str:
    """A table cell as inline HTML whose intervals and "mean ± std" never break across lines: a long cell wraps
    only between its parts."""
    return _UNBREAKABLE.sub(lambda match: f'<span class="nowrap">{match.group(0)}</span>', _inline_html(text))


def _table_summary(table: Table) -> str:
    """The one line a collapsed table shows: its own summary, else how big it is."""
    rows, columns = table.frame.shape
    return table.summary or f"Show the table: {rows} rows of {columns} columns"


@functools.cache
def _environment() -> jinja2.Environment:
    """The templates and their filters, set up once per process."""
    environment = jinja2.Environment(loader=jinja2.PackageLoader("study.report", "templates"),
                                     autoescape=jinja2.select_autoescape(["html.j2"]), undefined=jinja2.StrictUndefined,
                                     trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    environment.filters.update(
        kind=_kind, cell=_markdown_cell, inline=lambda text: Markup(_inline_html(text)),
        cell_html=lambda text: Markup(_cell_html(text)),
        rows=lambda frame: list(frame.itertuples(index=False)), columns=lambda frame: list(frame.columns),
        summary=_table_summary)
    environment.globals.update(SHORT_CELL=SHORT_CELL, STACKED_COLUMNS=STACKED_COLUMNS,
                               WIDE_COLUMNS=WIDE_COLUMNS, LONG_TABLE_ROWS=LONG_TABLE_ROWS, zip=zip)
    return environment


def render_markdown(title: str, sections: list[Section]) -> str:
    """The sections as a Markdown document; figures are linked by their relative paths."""
    text = _environment().get_template("report.md.j2").render(title=title, sections=_readable(sections))
    return text.rstrip() + "\n"


def render_html(title: str, sections: list[Section], base_dir: Path) -> str:
    """The sections as one HTML page, styles inline; figures are linked by their paths relative to `base_dir`, the
    folder the page is written to, so the page opens offline with that folder (as Markdown's links do)."""
    # Linked rather than inlined as base64: each PNG is stored once, and a report folder stays a few hundred kB.
    missing = [block.path for section in sections for block in section.blocks
               if isinstance(block, FigureRef) and not (Path(base_dir) / block.path).is_file()]
    if missing:
        raise FileNotFoundError(f"the HTML report links figures that are not in {base_dir}: {', '.join(missing)}; "
                                "write the figures before the page")
    return _environment().get_template("report.html.j2").render(title=title, sections=_readable(sections))
