"""What every figure of the reports shares: its size and text sizes, small multiples, bands, legends and saving, all
with matplotlib's object-oriented API (`Figure`, no pyplot), so no display and no global backend are involved.

Sizes are set for the narrowest screen the HTML report is read on. At 420 px the page's column is 388 px (420 less
1rem of padding each side), and a figure wider than that is shrunk to fit it: text of p points in a figure w inches
wide shows at p / 72 · dpi · 388 / (w · dpi) = p · 388 / (72 w) px, whatever the dpi. At w = 5.0 in (5.1 in once
saved with a tight bounding box) the smallest text drawn, 9 pt, shows at 9.5 px, tick and legend text (9.5 pt) at
10.0 px; the earlier 6.2-in figures (6.3 in saved) would have needed 10.6 pt for 9 px, and drew 8.5 pt at 7.3 px."""

from __future__ import annotations

import functools
import io
import math
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from PIL import Image

import study.report.formats as fmt
from study.report.palette import Style

FIGURE_WIDTH = 5.0
FIGURE_SIZE = (FIGURE_WIDTH, 3.9)
PANEL_HEIGHT = 2.3
TEXT_SIZES = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "figure.titlesize": 10.5,
              "figure.labelsize": 10, "legend.fontsize": 9.5, "xtick.labelsize": 9.5, "ytick.labelsize": 9.5}
# Characters of 9.5 pt legend text per inch of figure width (about 0.55 em a character).
LEGEND_CHARACTERS_PER_INCH = 13


def readable(draw):
    """Draw (and save) a figure with the report's text sizes, restored afterwards."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with matplotlib.rc_context(TEXT_SIZES):
            return draw(*args, **kwargs)
    return drawn


def band(ax, x, low, high, style: Style, fill: float = 0.16) -> bool:
    """An interval band as a light fill with thin edges in the method's own line style, drawn only where both ends
    exist (an interval that is not valid at some n is missing there, not zero); False when there is none."""
    valid = np.isfinite(np.asarray(low, dtype=float)) & np.isfinite(np.asarray(high, dtype=float))
    if not valid.any():
        return False
    x, low, high = (np.asarray(values, dtype=float)[valid] for values in (x, low, high))
    ax.fill_between(x, low, high, color=style.colour, alpha=fill, linewidth=0, zorder=2)
    for edge in (low, high):
        ax.plot(x, edge, color=style.colour, linestyle=style.linestyle, linewidth=0.7, alpha=0.8, zorder=2)
    return True


def staggered_markers(index: int, count: int, points: int, marks: int = 8):
    """`markevery` for the index-th of `count` lines of `points` points: about `marks` markers each, every line's at
    other points, so lines that lie on one another still show each one's markers."""
    step = max(points // marks, 1)
    return (index * step // max(count, 1)) % step, step


def new_figure(ncols: int = 1, size=FIGURE_SIZE, **subplot_options):
    """A figure with one row of `ncols` axes, light grid lines drawn beneath the data."""
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(1, ncols, squeeze=False, **subplot_options)[0]
    for ax in axes:
        _grid_lines(ax)
    return figure, axes


def _grid_lines(ax) -> None:
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)


def small_multiples(panels: int, ncols: int = 2, panel_height: float = PANEL_HEIGHT, width: float = FIGURE_WIDTH,
                    extra_height: float = 0.8, **subplot_options):
    """A figure of `panels` small multiples, `ncols` to a row (`extra_height` inches for titles, legend and colour
    bar): the figure, the panels' axes, and the last row's spare axes (blank, free for the legend)."""
    ncols = max(1, min(ncols, panels))
    nrows = math.ceil(panels / ncols)
    figure = Figure(figsize=(width, panel_height * nrows + extra_height), layout="constrained")
    grid = figure.subplots(nrows, ncols, squeeze=False, **subplot_options)
    axes = list(grid.ravel())
    for ax in axes[:panels]:
        _grid_lines(ax)
    for index, ax in enumerate(axes[panels:], start=panels):
        ax.set_axis_off()
        if nrows > 1:  # the panel above a blank slot keeps its x tick labels, which sharex would hide
            grid[nrows - 2, index % ncols].xaxis.set_tick_params(labelbottom=True)
    return figure, axes[:panels], axes[panels:]


def label_bottom(axes, label: str) -> None:
    """`label` as the x label of every panel with none below it (matplotlib's supxlabel would collide with a legend
    under the figure)."""
    places = [(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in axes]
    for ax, (row, column) in zip(axes, places):
        if not any(other_column == column and other_row > row for other_row, other_column in places):
            ax.set_xlabel(label)


def _wrapped(label: str, width_inches: float) -> str:
    """A legend label broken into lines that fit `width_inches` (the marker and its gap take about half an inch)."""
    characters = max(int((width_inches - 0.5) * LEGEND_CHARACTERS_PER_INCH), 12)
    return "\n".join(textwrap.fill(line, characters) for line in str(label).split("\n"))


def legend(figure: Figure, handles, labels, spare=(), ncols: int = 1) -> None:
    """A legend in the first blank panel, or under the whole figure where it cannot cover data; labels are wrapped to
    the room they have, so that the legend never widens the figure (which would shrink its text on a phone)."""
    if not handles:
        return
    width = figure.get_figwidth()
    if spare:
        room = spare[0].get_subplotspec().colspan
        labels = [_wrapped(label, width * len(room) / spare[0].get_subplotspec().get_gridspec().ncols)
                  for label in labels]
        spare[0].legend(handles, labels, loc="center", frameon=False, borderaxespad=0)
    else:
        ncols = min(ncols, len(handles))
        labels = [_wrapped(label, width / ncols) for label in labels]
        figure.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False)


def legend_below(figure: Figure, ax, ncols: int = 2) -> None:
    """The legend of `ax` under the whole figure, where it cannot cover data."""
    handles, labels = ax.get_legend_handles_labels()
    legend(figure, handles, labels, ncols=ncols)


def unique_handles(axes) -> tuple[list, list]:
    """The legend entries of several panels, each label once."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return list(entries.values()), list(entries)


def legend_with_band(figure: Figure, axes, spare, band_label: str) -> None:
    """The panels' legend entries, each once, and a grey swatch that stands for every panel's band."""
    handles, labels = unique_handles(axes)
    handles.append(Patch(facecolor="#888888", alpha=0.3, edgecolor="#555555", linewidth=0.7))
    labels.append(band_label)
    legend(figure, handles, labels, spare, ncols=2)


def plain_log_ticks(axis, decades_only: bool = False) -> None:
    """Log-scale ticks at 1, 2, 5 × 10^k (or, over many decades, at 10^k alone, so that labels do not run into one
    another) written as plain numbers with thousands separated (20, 1,000), not 2×10^1."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if decades_only else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def focus_y(ax, values, pad_fraction: float = 0.15) -> None:
    """Y limits around `values` (the curves' means), so a wide few-seed band cannot flatten them; bands are clipped."""
    finite = np.asarray([v for v in values if not fmt.missing(v)], dtype=float)
    if finite.size:
        low, high = finite.min(), finite.max()
        pad = max((high - low) * pad_fraction, 0.005)
        ax.set_ylim(low - pad, high + pad)


# A figure's colours: lines, bands and their anti-aliased edges fit a 256-colour palette (pixels off by 0.02-1.0 of
# 255 on average), and a palette PNG is about a third the size of matplotlib's RGBA one, for every report committed.
PALETTE_COLOURS = 256


def save_figure(figure: Figure, path: Path, dpi: int) -> Path:
    """Write the figure as a palette PNG, its folder made if missing; return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn = io.BytesIO()
    figure.savefig(drawn, format="png", dpi=dpi, bbox_inches="tight")
    drawn.seek(0)
    return save_palette_png(drawn, path)


def save_palette_png(png: Path | io.BytesIO, path: Path) -> Path:
    """Write the PNG image `png` (a file or its bytes) to `path` in PALETTE_COLOURS colours, on white, keeping its
    dpi; `path` may be `png` itself. Return the path."""
    with Image.open(png) as image:
        image.load()
    # On white, as the page shows it (a transparent pixel keeps no colour of its own in RGB).
    opaque = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image.convert("RGBA")).convert("RGB")
    palette = opaque.quantize(PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    palette.save(path, format="png", optimize=True, **({"dpi": image.info["dpi"]} if "dpi" in image.info else {}))
    return path
