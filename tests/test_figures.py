"""The report's and the benchmark's figures on a phone, and each method's colour across them: every text at least 9 px
where the HTML report is 420 px wide, no label over a curve, a method in one colour in every figure and panel, Fixed
AdaCos drawn on top. The figures are drawn from test_report's small synthetic study and from small benchmark tables."""

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.text import Text
from PIL import Image

import study.benchmark.figures as benchmark_figures
import study.report.figures as report_figures
import study.report.tuning_figures as tuning_figures
from study.report.palette import METHOD_STYLES, method_styles
from test_report import ENVIRONMENT, PARAMS, analyse, make_study

# report.html.j2 at a 420 px screen: 1rem (16 px) of body padding either side leaves a 388 px column, and a figure
# wider than that is shrunk to fit (checked in headless Chromium: the image shows 388 px wide inside its 1 px border).
COLUMN_PX = 420 - 2 * 16
SMALLEST_PX = 9.0


@pytest.fixture(scope="module")
def analysis():
    return analyse(*make_study())


def _recording(monkeypatch, *modules):
    """Every figure the modules save, with the PNG written, as (figure, path)."""
    saved = []
    for module in modules:
        original = module.save_figure

        def record(figure, path, dpi, original=original):
            saved.append((figure, original(figure, path, dpi)))
            return path
        monkeypatch.setattr(module, "save_figure", record)
    return saved


@pytest.fixture(scope="module")
def report_figures_drawn(analysis, tmp_path_factory):
    """Every figure of the report, as the writer draws them."""
    folder = tmp_path_factory.mktemp("figures")
    dpi = PARAMS.report.dpi
    styles = method_styles(analysis, PARAMS.report.palette)
    with pytest.MonkeyPatch.context() as monkeypatch:
        saved = _recording(monkeypatch, report_figures, tuning_figures)
        conditions = tuning_figures.measurement_conditions(PARAMS, ENVIRONMENT)
        tuning_figures.figure_tuning(analysis, styles, "n", folder / "tuning_trials.png", dpi)
        tuning_figures.figure_tuning(analysis, styles, "seconds", folder / "tuning_seconds.png", dpi, conditions)
        tuning_figures.figure_expected_best_val(analysis, styles, folder / "expected_best_val.png", dpi)
        report_figures.figure_convergence(analysis, styles, folder / "convergence.png", dpi)
        report_figures.figure_crossings(analysis, styles, folder / "crossings.png", dpi)
        report_figures.figure_angles(analysis, styles, folder / "angles.png", dpi)
        report_figures.figure_dynamic_scale(analysis, styles, folder / "dynamic_scale.png", dpi)
        report_figures.figure_landscape(analysis, PARAMS, folder / "landscape.png", dpi)
        report_figures.figure_final_test(analysis, styles, folder / "final_test.png", dpi)
    assert len(saved) == 9
    return {path.stem: figure for figure, path in saved}, {path.stem: path for _, path in saved}


def _benchmark_tables():
    """Small tables shaped like the benchmark's pooled, cell and tuner tables (study.benchmark.meta)."""
    nan = np.nan  # cosface_tuned: a loss with no cell in the pool drawn (searched only in short cells)
    pooled = pd.DataFrame({"method": ["arcface_tuned", "cosface_tuned", "dynamic_adacos", "p2sgrad", "softmax",
                                      "arcface_default"],
                           "mean": [0.003, nan, -0.001, 0.002, -0.15, -0.02],  # softmax's beyond the window
                           "low": [-0.002, nan, -0.006, -0.004, -0.2, -0.04],
                           "high": [0.008, nan, 0.004, 0.008, -0.1, 0.0],
                           "prediction_low": [-0.012, nan, -0.01, -0.01, -0.3, -0.06],
                           "prediction_high": [0.018, nan, 0.008, 0.014, 0.0, 0.02], "margin": 0.02})
    rows = pd.DataFrame({"by_people": [True, True, False, False], "source": ["digits", "mnist5k", "glyphs", "glyphs"],
                         "train_classes": [10, 10, 100, 1000], "configuration": ["closed", "closed", "open C = 100",
                                                                                  "open C = 1000"],
                         "relative": [0.004, -0.002, 0.01, 0.2], "relative_se": [0.003, 0.004, 0.005, 0.01],
                         "df": [2, 2, 2, 2], "near_floor": [False, False, False, True]})
    facts = {"method": "arcface_tuned", "margin": 0.02, "mean": 0.003, "low": -0.002, "high": 0.008,
             "prediction_low": -0.012, "prediction_high": 0.018, "sources": 3}
    tuners = pd.DataFrame({"configuration": ["digits closed"] * 3 + ["glyphs open C = 100"] * 3,
                           "cell": [f"cell{i}" for i in range(6)], "iterations_per_trial": [100.0, 100.0, 60.0] * 2,
                           "reference_test_mean": [0.95] * 3 + [0.6] * 3, "iterations_budget": [1200.0] * 6})
    n = np.arange(1, 13)
    curves = {f"cell{i}": pd.DataFrame({"n": n, "expected_test": 0.5 + 0.4 * (1 - np.exp(-n / (3 + i))),
                                        "low": np.where(n <= 4, 0.45 + 0.4 * (1 - np.exp(-n / 3)), np.nan),
                                        "high": np.where(n <= 4, 0.55 + 0.4 * (1 - np.exp(-n / 3)), np.nan)})
              for i in range(6)}
    labels = {f"cell{i}": ["random search", "TPE", "TPE with a median pruner"][i % 3] for i in range(6)}
    return pooled, rows, facts, tuners, curves, labels


@pytest.fixture(scope="module")
def benchmark_figures_drawn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("benchmark")
    pooled, rows, facts, tuners, curves, labels = _benchmark_tables()
    with pytest.MonkeyPatch.context() as monkeypatch:
        saved = _recording(monkeypatch, benchmark_figures)
        benchmark_figures.figure_methods(pooled, folder / "methods.png", 120)
        benchmark_figures.figure_forest(rows, facts, folder / "forest_arcface_tuned.png", 120)
        benchmark_figures.figure_tuners(tuners, curves, labels, folder / "tuners.png", 120)
    return {path.stem: figure for figure, path in saved}, {path.stem: path for _, path in saved}


def _texts(figure):
    """Every text the figure draws: titles, labels, tick labels, legends, annotations."""
    FigureCanvasAgg(figure).draw()
    return [text for text in figure.findobj(Text) if text.get_visible() and text.get_text().strip()
            and (text.axes is None or text.axes.get_visible())]


@pytest.mark.parametrize("drawn", ["report_figures_drawn", "benchmark_figures_drawn"])
def test_every_text_is_at_least_9_px_on_a_420_px_screen(drawn, request):
    """Text of p points in a PNG drawn at `dpi` is p/72·dpi px high in the PNG, and the page shows the PNG at
    min(1, 388 / its width) of that."""
    figures, paths = request.getfixturevalue(drawn)
    dpi = 120
    for name, figure in figures.items():
        with Image.open(paths[name]) as image:
            width = image.size[0]
        shrink = min(1.0, COLUMN_PX / width)
        smallest = min(_texts(figure), key=lambda text: text.get_fontsize())
        pixels = smallest.get_fontsize() / 72 * dpi * shrink
        assert pixels >= SMALLEST_PX, (name, width, smallest.get_text(), smallest.get_fontsize(), round(pixels, 2))


def _overlaps(box, line, renderer_transform) -> bool:
    """Whether any point along `line` (its segments sampled every pixel or so) lies inside `box` (display units)."""
    xy = renderer_transform(line)
    if len(xy) < 2:
        return bool(len(xy)) and box.contains(*xy[0])
    points = []
    for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:]):
        steps = max(int(math.hypot(x1 - x0, y1 - y0)), 1)
        t = np.linspace(0.0, 1.0, steps + 1)
        points.append(np.column_stack([x0 + t * (x1 - x0), y0 + t * (y1 - y0)]))
    points = np.concatenate(points)
    points = points[np.isfinite(points).all(axis=1)]
    inside = ((points[:, 0] > box.x0 + 0.5) & (points[:, 0] < box.x1 - 0.5)
              & (points[:, 1] > box.y0 + 0.5) & (points[:, 1] < box.y1 - 0.5))
    return bool(inside.any())


@pytest.mark.parametrize("drawn", ["report_figures_drawn", "benchmark_figures_drawn"])
def test_no_label_lies_over_a_curve(drawn, request):
    """A word drawn inside a panel ("AdaCos ahead from 60", a break-even, a target's percentage) must not cover any
    line of the panel; lines clipped to the panel count only where they are drawn."""
    figures, _ = request.getfixturevalue(drawn)
    for name, figure in figures.items():
        FigureCanvasAgg(figure).draw()
        renderer = figure.canvas.get_renderer()
        for ax in figure.axes:
            panel = ax.get_window_extent(renderer)

            def on_screen(line, panel=panel):
                xy = line.get_transform().transform(line.get_path().vertices) if len(line.get_xydata()) else []
                xy = np.asarray(xy, dtype=float).reshape(-1, 2)
                if line.get_clip_on():
                    xy = np.clip(xy, [panel.x0, panel.y0], [panel.x1, panel.y1])
                return xy
            for text in ax.texts:
                if not text.get_visible() or not text.get_text().strip():
                    continue
                box = text.get_window_extent(renderer)
                for line in ax.lines:
                    assert not _overlaps(box, line, on_screen), (name, text.get_text(), line.get_gid(),
                                                                  line.get_label())


def _line_colour(figure, gid: str) -> str:
    (line,) = [line for ax in figure.axes for line in ax.lines if line.get_gid() == gid]
    return to_hex(line.get_color()).upper()


def test_a_method_with_no_cell_in_the_pool_drawn_says_so_in_its_row(benchmark_figures_drawn):
    """A loss searched only in short cells has a row in the converged pool's figure and nothing to draw there."""
    figure = benchmark_figures_drawn[0]["methods"]
    empty = {text.get_gid(): text.get_text().strip() for ax in figure.axes for text in ax.texts
             if str(text.get_gid()).startswith("empty:")}
    assert empty == {"empty:cosface_tuned": "no cell in this pool"}


def test_a_method_has_the_same_colour_in_every_figure_and_panel(report_figures_drawn, benchmark_figures_drawn):
    """Read back from the drawn lines: each method's curve has its palette colour in the tuning, convergence, angle
    and benchmark figures alike (DVC's template is checked in test_palette.py)."""
    figures, _ = report_figures_drawn
    benchmark, _ = benchmark_figures_drawn
    seen = {
        "arcface_tuned": [_line_colour(figures["tuning_trials"], "search:arcface"),
                          _line_colour(figures["tuning_seconds"], "search:arcface"),
                          _line_colour(figures["convergence"], "curve:arcface_tuned"),
                          _line_colour(benchmark["methods"], "method:arcface_tuned")],
        "fixed_adacos": [_line_colour(figures["tuning_trials"], "control:fixed_adacos"),
                         _line_colour(figures["convergence"], "curve:fixed_adacos"),
                         _line_colour(figures["angles"], "angle:theta_med_deg:fixed_adacos"),
                         _line_colour(figures["angles"], "angle:cos_nontarget_mean:fixed_adacos")],
        "dynamic_adacos": [_line_colour(figures["tuning_trials"], "control:dynamic_adacos"),
                           _line_colour(figures["convergence"], "curve:dynamic_adacos"),
                           _line_colour(figures["angles"], "angle:theta_med_deg:dynamic_adacos"),
                           _line_colour(benchmark["methods"], "method:dynamic_adacos")],
        "softmax": [_line_colour(figures["convergence"], "curve:softmax"),
                    _line_colour(benchmark["methods"], "method:softmax")],
    }
    for method, colours in seen.items():
        assert set(colours) == {METHOD_STYLES[method].colour.upper()}, (method, colours)


def test_fixed_adacos_is_drawn_on_top_where_lines_share_a_panel(report_figures_drawn):
    figures, _ = report_figures_drawn
    for ax in figures["angles"].axes:
        lines = {line.get_gid().rsplit(":", 1)[1]: line for line in ax.lines
                 if str(line.get_gid()).startswith("angle:")}
        if lines:
            top = max(lines.values(), key=lambda line: line.get_zorder())
            assert top is lines["fixed_adacos"]
            assert lines["fixed_adacos"].get_linewidth() < min(
                line.get_linewidth() for method, line in lines.items() if method != "fixed_adacos")
