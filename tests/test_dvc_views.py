"""DVC's views of the study out of the box: a headline metric that keeps `dvc metrics show` and `dvc exp show`
within 120 columns, plots with a colour per method and its band, and stage outputs that a fresh clone lacks
rather than holds half of."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from study.report.writer import REPORT_PARTS, headline_metrics

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
PLOT_PAGE = ROOT / "reports" / "plots_template.html"
# The commands docs/usage.md gives, each meant to fit a 120-column terminal.
HEADLINE_ONLY = ["exp", "show", "--no-pager", "--drop", "Created|.*[./]"]
CHANGED_PARAMS = ["exp", "show", "--no-pager", "--only-changed", "--drop", "Created|.*/"]

# A summary shaped like reports/metrics.json (study.report.writer.metrics_summary), at full precision.
SUMMARY = {
    "verdict": {"recommendation": "fixed_adacos", "reason": "equivalent", "metric": "test_map_at_r",
                "reference": "fixed_adacos", "reference_test_mean": 0.39360815811157224,
                "tuned_method": "arcface_tuned", "tuned_test_mean": 0.3927071218490601,
                "tuned": {"difference": -0.0009010362625122059, "low": -0.004677360527981045,
                          "high": 0.0028752880029566334, "p_holm": 1.0, "equivalent": True}},
    "break_even": {"arcface": {"fixed_adacos": {"trials": None, "low": 6, "high": None, "reached": False},
                               "dynamic_adacos": {"trials": 5, "low": 2, "high": 9, "reached": True}}},
    "fixed_adacos": {"test_map_at_r": {"mean": 0.39360815811157224, "std": 0.0191, "n": 10}},
}


def run_dvc(args: list[str], cwd: Path) -> str:
    """`dvc ARGS` in `cwd` at 120 columns; its output, or a failure with it."""
    env = {**os.environ, "COLUMNS": "120", "LINES": "100", "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def stage_bodies():
    """(name, body) of every stage of dvc.yaml, a foreach stage's `do` standing for its items."""
    for name, stage in PIPELINE["stages"].items():
        yield name, stage.get("do", stage)


def entry_path(entry) -> str:
    return next(iter(entry)) if isinstance(entry, dict) else entry


# --- metrics ----------------------------------------------------------------------------------


def test_headline_holds_the_verdict_rounded_as_the_report_states_it():
    headline = headline_metrics(SUMMARY)
    assert headline == {"recommendation": "fixed_adacos", "difference": -0.0009, "low": -0.0047, "high": 0.0029,
                        "fixed_adacos": 0.3936, "tuned": 0.3927, "break_even": None}
    reached = json.loads(json.dumps(SUMMARY))
    reached["break_even"]["arcface"]["fixed_adacos"].update(trials=4, reached=True, shown=False)
    assert headline_metrics(reached)["break_even"] is None  # a point estimate the interval does not show
    reached["break_even"]["arcface"]["fixed_adacos"].update(shown=True)
    assert headline_metrics(reached)["break_even"] == 4  # against Fixed AdaCos, not Dynamic AdaCos's 5
    # A difference that rounds to zero from below is 0.0, not the "-0" dvc metrics show would print.
    tiny = json.loads(json.dumps(SUMMARY))
    tiny["verdict"]["tuned"]["low"] = -0.00001
    assert math.copysign(1.0, headline_metrics(tiny)["low"]) == 1.0 and json.dumps(headline_metrics(tiny)["low"]) == "0.0"


def test_headline_of_a_study_without_a_search_leaves_its_numbers_empty():
    untuned = {"verdict": {"recommendation": "undecided", "reference_test_mean": 0.5, "tuned": None},
               "break_even": {}}
    assert headline_metrics(untuned) == {"recommendation": "undecided", "difference": None, "low": None,
                                         "high": None, "fixed_adacos": 0.5, "tuned": None, "break_even": None}


def test_the_headline_is_dvcs_only_metric_and_metrics_json_a_plain_output_of_the_report():
    metrics = [entry_path(entry) for _, body in stage_bodies() for entry in body.get("metrics", [])]
    assert metrics == ["reports/headline.json"]
    report = PIPELINE["stages"]["report"]
    outs = {entry_path(entry): entry for entry in report["outs"]}
    assert outs["reports/metrics.json"]["reports/metrics.json"] == {"cache": False, "persist": True}
    assert report["metrics"][0]["reports/headline.json"] == {"cache": False, "persist": True}
    assert "headline.json" in REPORT_PARTS  # swapped in with the rest of the report


@pytest.fixture(scope="module")
def project_with_history(tmp_path_factory):
    """The pipeline, params and headline committed twice (a second study with other params and numbers)."""
    if shutil.which("git") is None:
        pytest.skip("dvc exp show needs git")
    root = tmp_path_factory.mktemp("exp_show")
    for name in ("dvc.yaml", "params.yaml", ".dvc/config"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    headline = root / "reports" / "headline.json"
    headline.parent.mkdir()
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    tuned = json.loads(json.dumps(SUMMARY))
    tuned["verdict"].update(recommendation="arcface_tuned", tuned_test_mean=0.40591234)
    tuned["verdict"]["tuned"].update(difference=0.01231234, low=0.00511234, high=0.01951234)
    tuned["break_even"]["arcface"]["fixed_adacos"].update(trials=17, reached=True, shown=True)
    for summary, change in ((SUMMARY, None), (tuned, ("  epochs: 64", "  epochs: 96"))):
        if change:
            params = root / "params.yaml"
            params.write_text(params.read_text(encoding="utf-8").replace(*change), encoding="utf-8")
        headline.write_text(json.dumps(headline_metrics(summary), indent=2), encoding="utf-8")
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        subprocess.run([*git, "commit", "-q", "-m", "study"], cwd=root, check=True)
    return root


@pytest.mark.parametrize("command", [["metrics", "show"], [*HEADLINE_ONLY, "-n", "2"], [*CHANGED_PARAMS, "-n", "2"]],
                         ids=["metrics show", "exp show, headline", "exp show, changed params"])
def test_the_readmes_dvc_commands_fit_120_columns(project_with_history, command):
    table = run_dvc(command, project_with_history)
    assert "…" not in table, table  # no cell cut short
    assert max(map(len, table.splitlines())) <= 120, table
    for key in ("recommendation", "difference", "low", "high", "tuned", "break_even"):
        assert key in table
    if "--only-changed" in command:
        assert "train.epochs" in table and "train.lr" not in table  # the params that differ, and only those


# --- plots ------------------------------------------------------------------------------------


def plot_tables() -> dict[str, pd.DataFrame]:
    """The long tables dvc.yaml's plots read, shaped as the report writes them, with the quirks they may have:
    bounds empty where no interval is valid, and a `split` column."""
    tuning = pd.DataFrame(
        [("fixed_adacos", "control", n, 0.39 + 0.004 * n, 0.38 + 0.003 * n, 0.41 + 0.004 * n) for n in (1, 2, 3)]
        + [("dynamic_adacos", "control", n, 0.385 + 0.004 * n, 0.37 + 0.003 * n, 0.40 + 0.004 * n) for n in (1, 2, 3)]
        + [("softmax", "control", 1, 0.33, math.nan, math.nan)]  # one seed: no interval
        + [("arcface", "search", n, 0.30 + 0.01 * n, *((0.29 + 0.01 * n, 0.31 + 0.01 * n) if n <= 4
                                                     else (math.nan, math.nan))) for n in range(1, 9)],
        columns=["method", "kind", "n", "expected_test", "low", "high"])
    curves = pd.DataFrame(
        [(method, split, iteration, base + 0.001 * iteration, base - 0.01 + 0.001 * iteration,
          base + 0.01 + 0.001 * iteration)
         for method, base in (("fixed_adacos", 0.3), ("arcface_tuned", 0.35))
         for split in (0, 1) for iteration in (0, 10, 20, 30)],
        columns=["method", "split", "iteration", "mean", "low", "high"])
    return {"reports/tables/tuning_curves.csv": tuning, "reports/tables/curves.csv": curves}


def plots_in_a_copy(root: Path) -> dict:
    """`dvc plots show --json` on plot_tables() with the repository's dvc.yaml and plot templates: each plot's
    filled vega-lite spec by its file."""
    plotted = {entry_path(plot) for plot in PIPELINE["plots"]}
    tables = plot_tables()
    assert plotted == set(tables), "dvc.yaml plots other tables than these tests know"
    for name, frame in tables.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(root / name, index=False)
    for path in ["dvc.yaml", "params.yaml", *(p.relative_to(ROOT) for p in (ROOT / ".dvc" / "plots").glob("*.json"))]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, root / path)
    (root / ".dvc" / "config").write_text("[core]\n    no_scm = true\n    check_update = false\n", encoding="utf-8")
    shown = json.loads(run_dvc(["plots", "show", "--json"], root))["data"]
    return {name: entries[0]["content"] for name, entries in shown.items()}


def test_each_plot_colours_by_method_and_keeps_every_row_for_its_band(tmp_path):
    for name, spec in plots_in_a_copy(tmp_path).items():
        rows = spec["data"]["values"]
        assert {row["method"] for row in rows} == set(plot_tables()[name]["method"])
        assert all({"low", "high"} <= set(row) for row in rows)
        # The colour follows the method (named as a search where the row is one), never DVC's revision: each row's
        # colour is computed from its series, and every mark draws that colour unscaled.
        series = next(t["calculate"] for t in spec["transform"] if t.get("as") == "series")
        colour = next(t["calculate"] for t in spec["transform"] if t.get("as") == "colour")
        assert "datum.method" in series and "datum.series" in colour and "rev" not in colour
        painted = re.findall(r'"(?:stroke|fill|color)": (\{[^{}]*\})', json.dumps(spec["vconcat"]))
        assert painted and all(json.loads(channel) == {"field": "colour", "type": "nominal", "scale": None}
                               for channel in painted), painted


def render_svg(spec: dict, tmp_path: Path) -> str:
    """The spec drawn by the vega and vega-lite builds the offline plots page inlines, run in Node."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    page = PLOT_PAGE.read_text(encoding="utf-8")
    for name in ("vega", "vega-lite"):
        script = re.search(rf"<script>/\*! {name}@\S+ build/{name}\.min\.js \(npm\) \*/\n(.*?)</script>", page, re.S)
        (tmp_path / f"{name}.js").write_text(script.group(1), encoding="utf-8")
    (tmp_path / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    (tmp_path / "render.js").write_text(RENDER_JS, encoding="utf-8")
    done = subprocess.run(["node", "render.js"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return (tmp_path / "plot.svg").read_text(encoding="utf-8")


# Loaded into the global scope, each UMD build sets its global (vega, vegaLite) as on the plots page.
RENDER_JS = """
const fs = require('fs'), vm = require('vm');
for (const file of ['vega.js', 'vega-lite.js']) vm.runInThisContext(fs.readFileSync(file, 'utf8'));
const compiled = vegaLite.compile(JSON.parse(fs.readFileSync('spec.json', 'utf8'))).spec;
new vega.View(vega.parse(compiled), {renderer: 'none'}).toSVG().then(svg => fs.writeFileSync('plot.svg', svg));
"""


def marks(svg: str, kind: str) -> list[str]:
    """The <path> elements of every mark of that kind (line, area) in vega's SVG."""
    groups = re.findall(rf'<g class="mark-{kind} role-mark[^"]*"[^>]*>(.*?)</g>', svg, re.S)
    return [path for group in groups for path in re.findall(r"<path[^>]*>", group)]


def attribute(element: str, name: str) -> str | None:
    found = re.search(rf'\b{name}="([^"]*)"', element)
    return found.group(1) if found else None


@pytest.mark.skipif(shutil.which("node") is None, reason="drawing the plots needs Node.js")
def test_the_plots_draw_a_colour_and_a_band_per_method_and_a_legend_that_names_each(tmp_path):
    specs = plots_in_a_copy(tmp_path / "project")
    tuning = render_svg(specs["reports/tables/tuning_curves.csv"], tmp_path / "tuning")
    lines = marks(tuning, "line")
    colours = {attribute(line, "stroke") for line in lines}
    assert len(lines) == len(colours) == 4  # arcface's search and three controls, each its own colour
    # The legend names each method present (drawn as text marks in the palette's order), and no other.
    texts = set(re.findall(r"<text[^>]*>([^<]*)</text>", tuning))
    assert {"ArcFace search", "Fixed AdaCos", "Dynamic AdaCos", "Softmax"} <= texts
    assert not {"P2SGrad", "CosFace search", "ArcFace default"} & texts
    bands = marks(tuning, "area")
    assert {attribute(band, "fill") for band in bands} < colours  # softmax's one seed has no band
    assert all(attribute(band, "opacity") == "0.15" for band in bands)  # light, so overlapping bands stay readable
    # An empty bound draws nothing, rather than a band down to 0: the y axis stays near the scores (0.3 to 0.43).
    y_axis = re.search(r"Y-axis titled '[^']*' for a linear scale with values from ([\d.]+) to ([\d.]+)", tuning)
    assert float(y_axis.group(1)) >= 0.25
    curves = render_svg(specs["reports/tables/curves.csv"], tmp_path / "curves")
    # Two class splits: a line and a band each, in the colour of their method.
    assert len(marks(curves, "line")) == 4 and len({attribute(p, "stroke") for p in marks(curves, "line")}) == 2
    assert len(marks(curves, "area")) == 4


# --- a fresh clone ----------------------------------------------------------------------------


def tracked_files(path: str) -> list[str]:
    """The git-tracked files under `path` that are still there (a deletion not yet committed does not count)."""
    listed = subprocess.run(["git", "ls-files", "--", path], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.splitlines() if (ROOT / name).exists()]


def test_no_dependency_on_other_stages_outputs_holds_a_git_tracked_file():
    """In a fresh clone a stage's outputs are missing, which `dvc repro --dry --allow-missing` accepts; a folder
    holding some of them and a tracked file (the .gitignore DVC writes next to its outputs) would be there with
    that file alone, which DVC reads as a changed dependency and reruns."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    outs = {entry_path(entry) for _, body in stage_bodies() for entry in body.get("outs", [])}
    for _, body in stage_bodies():
        for dep in map(entry_path, body.get("deps", [])):
            if any(out.startswith(dep.rstrip("/") + "/") for out in outs):  # a folder of other stages' outputs
                assert tracked_files(dep) == [], f"{dep} holds git-tracked files; ignore it from the root .gitignore"


# --- the one study's views, in a fresh clone ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of the working tree as it would be committed (see conftest.working_tree_clone)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    from conftest import working_tree_clone

    return working_tree_clone(tmp_path_factory.mktemp("clone"))


def stage_names_of(pipeline: dict, params: dict) -> set[str]:
    names = set()
    for name, stage in pipeline["stages"].items():
        if "foreach" in stage:
            section, key = stage["foreach"].strip("${}").split(".")
            names |= {f"{name}@{item}" for item in params[section][key]}
        else:
            names.add(name)
    return names


def test_a_fresh_clones_dvc_status_shows_the_default_study_alone_within_60_lines(clone):
    """The benchmark's cells and a sweep's studies live in DVC projects of their own, which the repository's DVC
    leaves out: `dvc status` lists the default study's stages (their outputs missing in a clone) and nothing else."""
    shown = run_dvc(["status"], clone)
    stages = {line.rstrip(":") for line in shown.splitlines() if line and not line[0].isspace()}
    params = yaml.safe_load((clone / "params.yaml").read_text(encoding="utf-8"))
    assert stages <= stage_names_of(PIPELINE, params), shown
    assert len(shown.splitlines()) <= 60, (f"{len(shown.splitlines())} lines (a `modified:` line means dvc.lock lags "
                                           f"the code: see tests/test_lock.py):\n{shown}")


def test_dvc_params_diff_and_exp_show_know_the_default_studys_params_alone(clone):
    params = run_dvc(["params", "diff", "--all", "--json"], clone)
    assert set(json.loads(params)) == {"params.yaml"}
    columns = run_dvc(["exp", "show", "--no-pager", "--csv", "-n", "1"], clone).splitlines()[0].split(",")
    files = {column.split(":")[0] for column in columns if ":" in column}  # params and metrics, by their file
    assert files <= {"params.yaml", "reports/headline.json"}, files
    assert [column for column in columns if column.startswith(("benchmarks/", "sweeps/"))] == [], columns


@pytest.mark.slow
def test_a_finished_benchmark_cell_is_finished_for_study_benchmark_and_for_dvc(clone, monkeypatch, capsys):
    """SLOW (about 15 s): every committed cell, by `study benchmark --list` and by `dvc status` in the benchmark's own
    DVC project (benchmarks/cells), which gives a changed dependency to every stage of a cell to run that it would run
    again, and to no stage of a finished one (frozen), whose outputs a clone lacks only as data."""
    from conftest import changed_studies
    from study.benchmark.pipelines import DEFAULT_OUT
    from study.cli import main

    cells = clone / DEFAULT_OUT
    if not (cells / ".dvc").is_dir():
        pytest.fail(f"{DEFAULT_OUT} is not the benchmark's own DVC project: run `study benchmark` (or write_benchmark) "
                    "once, and commit its .dvc/ and .dvcignore")
    monkeypatch.chdir(clone)
    assert main(["benchmark", "--list"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    listed = {words[0]: words[-1] for words in lines}
    # A finished cell's iterations come from its report where its source cannot be counted here (emoji without the font)
    assert [words[0] for words in lines if words[-1] == "finished" and words[3] == "?"] == []
    changed = changed_studies(json.loads(run_dvc(["status", "--json"], cells)))
    present = {name for name in listed if (cells / name / "dvc.yaml").is_file()}
    assert any(listed[name] == "finished" for name in present)
    assert {name for name in present if listed[name] != "finished"} == changed & present


@pytest.mark.slow
def test_after_a_params_change_the_dry_run_docs_usage_gives_works_in_a_fresh_clone(tmp_path):
    """docs/usage.md: after a params change `dvc status` names the changed params, and the command it gives lists
    what would rerun (`dvc repro --dry --allow-missing` alone stops at a missing input)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    from conftest import working_tree_clone

    clone = working_tree_clone(tmp_path)
    subprocess.run([sys.executable, "-m", "study.cli", "preset", "default", "--set", "train.epochs=3"], cwd=clone,
                   check=True, capture_output=True)
    assert "params.yaml" in run_dvc(["status"], clone)
    documented = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert "dvc repro prepare && dvc repro --dry --allow-missing --force-downstream" in documented
    run_dvc(["repro", "prepare"], clone)
    dry = run_dvc(["repro", "--dry", "--allow-missing", "--force-downstream"], clone)
    # train.epochs reaches every training stage and all after them
    assert all(f"Running stage '{stage}'" in dry for stage in ("search@arcface", "runs@fixed_adacos", "tuned@arcface",
                                                                "evaluate", "report")), dry
