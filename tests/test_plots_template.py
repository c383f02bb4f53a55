"""`dvc plots show` draws offline: the committed HTML template inlines vega, vega-lite and vega-embed, and is what
`python -m study.report.plots_template` writes; reports/ holds outputs only."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from study.report import plots_template

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "reports" / "plots_template.html"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)
# What each UMD build assigns on the page (vega-embed expects the other two as globals).
GLOBALS = {"vega": ".vega={}", "vega-lite": ".vegaLite={}", "vega-embed": ".vegaEmbed="}


def pinned_packages() -> dict[str, str]:
    return plots_template.PACKAGES


def assert_offline(page: str) -> None:
    assert not EXTERNAL.search(page), EXTERNAL.search(page).group(0)
    # dvc-render fills {scripts} with its CDN <script src=...> tags; the offline page must not ask for them.
    assert "{scripts}" not in page


def test_template_is_self_contained():
    page = TEMPLATE.read_text(encoding="utf-8")
    assert page.count("{plot_divs}") == 1  # dvc-render refuses a template without it
    assert_offline(page)


def test_template_inlines_the_pinned_libraries():
    page = TEMPLATE.read_text(encoding="utf-8")
    packages = pinned_packages()
    assert list(packages) == ["vega", "vega-lite", "vega-embed"]
    positions = []
    for name, version in packages.items():
        banner = f"<script>/*! {name}@{version} build/{name}.min.js (npm) */"
        assert page.count(banner) == 1, f"{name}@{version} is not inlined; rerun python -m study.report.plots_template"
        positions.append(page.index(banner))
        assert GLOBALS[name] in page[positions[-1]:]
    assert positions == sorted(positions)  # each script after the ones it needs
    assert "npm pack " + " ".join(f"{n}@{v}" for n, v in packages.items()) in page  # the header says how


def test_the_page_is_what_the_builder_writes():
    """The committed page is the builder's PAGE around the inlined scripts, so its header names the command that
    rebuilds it, and the builder writes it where .dvc/config and dvc.yaml's plots look."""
    page = TEMPLATE.read_text(encoding="utf-8")
    scripts = re.search(r"\n(    <script>/\*! vega@.*    </script>)\n", page, re.DOTALL).group(1)
    pinned = [f"{name}@{version}" for name, version in pinned_packages().items()]
    assert page == plots_template.PAGE.format(versions=", ".join(pinned), command="npm pack " + " ".join(pinned),
                                              scripts=scripts)
    assert "python -m study.report.plots_template" in page
    assert (ROOT / plots_template.PAGE_PATH).resolve() == TEMPLATE
    assert (ROOT / plots_template.SPEC_PATH).is_file()


def test_reports_holds_outputs_only():
    """The builder lives in the library (study/report/plots_template.py); reports/ holds what the study writes."""
    code = [path.relative_to(ROOT).as_posix() for path in (ROOT / "reports").rglob("*")
            if path.suffix in (".py", ".sh", ".js", ".ipynb")]
    assert code == []


def test_pinned_majors_match_dvc_render():
    vega = pytest.importorskip("dvc_render.vega")
    cdn = dict(re.findall(r"npm/([a-z-]+)@(\d+)\.", vega.VegaRenderer.SCRIPTS))
    assert set(cdn) == {"vega", "vega-lite", "vega-embed"}
    assert {name: version.split(".")[0] for name, version in pinned_packages().items()} == cdn


def test_dvc_config_names_the_template():
    config = (ROOT / ".dvc" / "config").read_text()
    section = re.search(r"^\[plots\]\n((?:[ \t]+.*\n?)*)", config, re.MULTILINE)
    assert section, ".dvc/config has no [plots] section"
    named = re.search(r"^\s*html_template\s*=\s*(.+?)\s*$", section.group(1), re.MULTILINE)
    assert named, ".dvc/config sets no plots.html_template"
    # DVC resolves a relative html_template against .dvc/, not the repository root.
    assert (ROOT / ".dvc" / named.group(1)).resolve() == TEMPLATE


def test_dvc_plots_show_writes_an_offline_page(tmp_path):
    """`dvc plots show` in a copy of the repository's plots, its config, the page template and the plot templates."""
    pytest.importorskip("dvc")
    yaml = pytest.importorskip("yaml")
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    # A plot is named by its file, or by an id whose `y` maps each file to its columns.
    files = {file for plot in plots for name, spec in plot.items()
             for file in (spec["y"] if isinstance(spec.get("y"), dict) else [name])}
    templates = [path.relative_to(ROOT).as_posix() for path in (ROOT / ".dvc" / "plots").glob("*.json")]
    for path in ["dvc.yaml", "params.yaml", ".dvc/config", TEMPLATE.relative_to(ROOT).as_posix(), *templates, *files]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    config = tmp_path / ".dvc" / "config"  # no git in the copy, and no update check
    text = config.read_text()
    core = "[core]\n    no_scm = true\n    check_update = false\n"
    config.write_text(text.replace("[core]\n", core, 1) if "[core]\n" in text else core + text)
    done = subprocess.run([sys.executable, "-m", "dvc", "plots", "show"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "dvc_plots" / "index.html").read_text(encoding="utf-8")
    assert_offline(page)
    assert "{plot_divs}" not in page and "{refresh_tag}" not in page
    assert page.count("vegaEmbed('#") == len(plots)
    assert GLOBALS["vega"] in page and GLOBALS["vega-embed"] in page
