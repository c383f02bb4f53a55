"""One colour, line style and marker per method, the same in every figure and panel: the report's, the benchmark's
and DVC's plots (whose vega-lite template, .dvc/plots/method_bands.json, takes its mapping from here through
`python -m study.report.plots_template`).

The colours are Okabe and Ito's colour-blind-safe set (its yellow left out: too pale for a line on white) and two
dark ones of Paul Tol's muted set (wine, indigo) for the searched losses past ArcFace; grey for a method the code does
not know. They are assigned by hand, not by position in a study's list of methods, so that a method never changes
colour between figures or studies: the AdaCos pair in blues, ArcFace (tuned and at its defaults) in vermillion and
orange, every other method in a hue of its own. Any two of them differ by at least 20 in CIEDE2000 as printed, and by
at least 10 as seen with deuteranopia, protanopia or tritanopia (Machado et al. 2009's simulation);
tests/test_palette.py checks both. Where colour alone cannot tell two methods apart, their line styles and markers do,
and Fixed AdaCos, the reference every comparison is made against, is drawn solid and last, on top of the rest."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from study.config import HYPERPARAMETER_FREE_LOSSES, TUNABLE_LOSSES
from study.results import tuned_method

REFERENCE = "fixed_adacos"
# What `report.palette: colorblind` (the default) draws: the fixed assignment below. Another palette name takes
# its colours from seaborn in the same fixed order, so methods still keep their colour across figures.
DEFAULT_PALETTE = "colorblind"


@dataclass(frozen=True)
class Style:
    """How one method is drawn in every figure: its colour, its dash pattern (on and off lengths in line widths, as
    matplotlib scales them; none: solid) and its marker."""

    colour: object
    dashes: tuple[float, ...]
    marker: str

    @property
    def linestyle(self):
        """The dash pattern as a matplotlib line style."""
        return "-" if not self.dashes else (0, self.dashes)

    def line(self) -> dict:
        """Matplotlib keyword arguments for the method's line."""
        return {"color": self.colour, "linestyle": self.linestyle, "marker": self.marker}

    def stroke_dash(self, width: float) -> list[float]:
        """The dash pattern in pixels for vega-lite's strokeDash, for a line `width` pixels wide."""
        return [round(length * width, 2) for length in self.dashes]


# Every method the code knows: the hyperparameter-free losses, ArcFace at the paper's values (the default fixed run)
# and each searchable loss at its best trial's values. Their order is the order of colours another palette gives.
METHOD_STYLES: dict[str, Style] = {
    "fixed_adacos": Style("#0072B2", (), "o"),  # Okabe–Ito blue, solid: the reference
    "arcface_tuned": Style("#D55E00", (3.7, 1.6), "s"),  # vermillion
    "dynamic_adacos": Style("#56B4E9", (5.0, 1.5, 1.0, 1.5), "^"),  # sky blue
    "p2sgrad": Style("#009E73", (1.0, 1.6), "D"),  # bluish green
    "softmax": Style("#000000", (5.0, 1.5, 1.0, 1.5, 1.0, 1.5), "v"),  # black
    "arcface_default": Style("#E69F00", (8.0, 2.0), "P"),  # orange
    "cosface_tuned": Style("#CC79A7", (3.0, 1.2, 1.0, 1.2), "X"),  # reddish purple
    "sphereface_tuned": Style("#882255", (2.0, 1.0), "<"),  # Tol's wine
    "normface_tuned": Style("#332288", (6.0, 1.5, 2.0, 1.5), ">"),  # Tol's indigo
}
# A method the code does not know (a fixed run the user named) is grey, in a style of its own chosen by its name.
OTHER_COLOUR = "#6E6E6E"
OTHER_DASHES = ((4.0, 1.0, 1.0, 1.0, 1.0, 1.0), (2.5, 2.5), (7.0, 1.5, 1.5, 1.5), (1.5, 1.0, 1.5, 3.0))
OTHER_MARKERS = ("h", "p", "*", "d", "8", "H")
GREY = Style((0.5, 0.5, 0.5), (), "o")
# The other panels' curves behind a small multiple's own: light enough that the panel's own curve and band stay on top.
CONTEXT = {"color": "#c9c9c9", "linewidth": 1.1, "zorder": 1}


def known_methods() -> list[str]:
    """Every method name the code can produce, in the palette's order."""
    searched = [tuned_method(loss) for loss in TUNABLE_LOSSES]
    return list(dict.fromkeys([*METHOD_STYLES, *HYPERPARAMETER_FREE_LOSSES, "arcface_default", *searched]))


def method_style(method: str, palette: str = DEFAULT_PALETTE) -> Style:
    """The method's style: its fixed one where the code knows the method, else grey in a style its name picks."""
    known = METHOD_STYLES.get(method)
    if known is None:
        pick = zlib.crc32(method.encode("utf-8"))
        return Style(OTHER_COLOUR, OTHER_DASHES[pick % len(OTHER_DASHES)], OTHER_MARKERS[pick % len(OTHER_MARKERS)])
    if palette == DEFAULT_PALETTE:
        return known
    import seaborn as sns  # only for a palette other than the default

    colours = sns.color_palette(palette, n_colors=len(METHOD_STYLES))
    return Style(tuple(colours[list(METHOD_STYLES).index(method)]), known.dashes, known.marker)


def styles_of(methods, palette: str = DEFAULT_PALETTE) -> dict[str, Style]:
    """The style of each of `methods`, the same in every figure."""
    return {method: method_style(method, palette) for method in dict.fromkeys(methods)}


def method_styles(analysis, palette: str = DEFAULT_PALETTE) -> dict[str, Style]:
    """The style of each method of a study (a StudyAnalysis), a searched loss's curves taking its tuned method's."""
    return styles_of([*analysis.methods, *(tuned_method(loss) for loss in analysis.searched_losses)], palette)


def drawing_order(methods) -> list[str]:
    """`methods` in the order to draw them where their lines share a panel: Fixed AdaCos last, on top."""
    methods = list(dict.fromkeys(methods))
    return [m for m in methods if m != REFERENCE] + [m for m in methods if m == REFERENCE]
