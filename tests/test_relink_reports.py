"""benchmarks/relink_reports.py rewrites a committed report as today's writer does: checked on a page inlining real
matplotlib figures, against the bytes it inlined and the figure the writer saves."""

import base64
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "relink_reports.py"


@pytest.fixture(scope="module")
def relink_reports():
    spec = importlib.util.spec_from_file_location("relink_reports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def old_report(folder: Path, names: list[str]) -> Path:
    """A report folder as the writer left it before: RGBA figures, each inlined in report.html as base64."""
    (folder / "figures").mkdir(parents=True)
    images = []
    for slope, name in enumerate(names, start=1):
        figure = Figure(figsize=(3, 2))
        figure.subplots().plot(np.arange(10), slope * np.arange(10))
        figure.savefig(folder / "figures" / name, format="png", dpi=80)
        encoded = base64.b64encode((folder / "figures" / name).read_bytes()).decode()
        images.append(f'<figure><img src="data:image/png;base64,{encoded}" alt="{name}"></figure>')
    page = folder / "report.html"
    page.write_text("<html><body><p>5 &lt; 6</p>" + "".join(images) + "</body></html>", encoding="utf-8")
    return page


def test_a_page_links_the_figures_it_inlined_and_each_figure_becomes_a_palette_png(relink_reports, tmp_path):
    page = old_report(tmp_path / "cell" / "reports", ["a.png", "b.png"])
    assert relink_reports.relink(page)
    assert page.read_text(encoding="utf-8") == ('<html><body><p>5 &lt; 6</p><figure><img src="figures/a.png" '
                                                'alt="a.png"></figure><figure><img src="figures/b.png" '
                                                'alt="b.png"></figure></body></html>')
    assert not relink_reports.relink(page)  # a second run changes nothing
    figure = page.parent / "figures" / "b.png"
    with Image.open(figure) as image:
        drawn = np.asarray(image.convert("RGB"), dtype=int)
    assert relink_reports.repaint(figure) and not relink_reports.repaint(figure)
    with Image.open(figure) as image:
        assert image.mode == "P"
        assert np.abs(np.asarray(image.convert("RGB"), dtype=int) - drawn).mean() < 2.0


def test_a_page_inlining_a_figure_found_nowhere_beside_it_is_left_as_it_was(relink_reports, tmp_path):
    page = old_report(tmp_path / "reports", ["a.png", "b.png"])
    (page.parent / "figures" / "b.png").write_bytes(b"another drawing")
    before = page.read_bytes()
    with pytest.raises(SystemExit, match="inlines a figure that no PNG beside it holds"):
        relink_reports.relink(page)
    assert page.read_bytes() == before
