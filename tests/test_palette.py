"""Each method's colour, line style and marker (study.report.palette): every method the code knows has one, the
colours are told apart by normal and colour-blind eyes (CIEDE2000 after Machado et al.'s simulation, both
implemented here and checked against their published numbers), and DVC's plot template maps each method to the same
colour in every plot and panel, read back from vega's own rendering where Node.js is installed."""

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from study.config import HYPERPARAMETER_FREE_LOSSES, RunsConfig, TUNABLE_LOSSES
from study.report.palette import (GREY, METHOD_STYLES, OTHER_COLOUR, REFERENCE, drawing_order, known_methods,
                                  method_style, styles_of)
from study.report.plots_template import PAGE_PATH, SPEC_PATH, plot_spec, series_styles
from study.results import tuned_method

ROOT = Path(__file__).resolve().parents[1]


def _linear(srgb):
    srgb = np.asarray(srgb, dtype=float)
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def _gamma(linear):
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)


def lab(srgb) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour in [0, 1]."""
    to_xyz = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                       [0.0193339, 0.1191920, 0.9503041]])
    xyz = to_xyz @ _linear(srgb) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def ciede2000(lab1, lab2) -> float:
    """The CIEDE2000 colour difference, as written out by Sharma, Wu and Dalal (2005), eqs. 1-22."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1, c2 = np.hypot(a1, b1), np.hypot(a2, b2)
    h1, h2 = np.degrees(np.arctan2(b1, a1)) % 360, np.degrees(np.arctan2(b2, a2)) % 360
    dh = 0.0 if c1 * c2 == 0 else (h2 - h1 + 180) % 360 - 180
    d_big_h = 2 * np.sqrt(c1 * c2) * np.sin(np.radians(dh / 2))
    l_mean, c_mean = (l1 + l2) / 2, (c1 + c2) / 2
    if c1 * c2 == 0:
        h_mean = h1 + h2
    elif abs(h1 - h2) <= 180:
        h_mean = (h1 + h2) / 2
    else:
        h_mean = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (1 - 0.17 * np.cos(np.radians(h_mean - 30)) + 0.24 * np.cos(np.radians(2 * h_mean))
         + 0.32 * np.cos(np.radians(3 * h_mean + 6)) - 0.20 * np.cos(np.radians(4 * h_mean - 63)))
    rotation = 30 * np.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * np.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / np.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * c_mean, 1 + 0.015 * c_mean * t
    r_t = -np.sin(np.radians(2 * rotation)) * r_c
    return float(np.sqrt(((l2 - l1) / s_l) ** 2 + ((c2 - c1) / s_c) ** 2 + (d_big_h / s_h) ** 2
                         + r_t * (c2 - c1) / s_c * d_big_h / s_h))


# Machado, Oliveira and Fernandes (2009), severity 1.0, applied to linear RGB.
DICHROMACY = {
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}


def seen_with(vision: str, hex_colour: str) -> np.ndarray:
    """The sRGB colour as `vision` sees it (None: as printed)."""
    srgb = np.array([int(hex_colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    return srgb if vision == "normal" else _gamma(np.array(DICHROMACY[vision]) @ _linear(srgb))


@pytest.mark.parametrize("first, second, expected", [  # Sharma et al. 2005, Table 1: pairs 1, 7, 15, 17, 25, 34
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0011), 7.2195),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((2.0776, 0.0795, -1.135), (0.9033, -0.0636, -0.5514), 0.9082),
])
def test_the_colour_difference_matches_sharmas_published_pairs(first, second, expected):
    assert ciede2000(first, second) == pytest.approx(expected, abs=1e-4)


def test_the_dichromacy_simulation_keeps_grey_and_merges_red_and_green_for_deuteranopes():
    """Machado's matrices leave greys grey (rows sum to 1) and make pure red and green close for a deuteranope."""
    for matrix in DICHROMACY.values():
        np.testing.assert_allclose(np.sum(matrix, axis=1), 1.0, atol=1e-5)
    red, green = lab(seen_with("deuteranopia", "#D55E00")), lab(seen_with("deuteranopia", "#009E73"))
    assert ciede2000(lab(seen_with("normal", "#D55E00")), lab(seen_with("normal", "#009E73"))) > 40
    assert ciede2000(red, green) < 25  # the simulation does merge what a deuteranope confuses


def test_every_method_the_code_knows_has_its_own_style():
    from study.losses import LOSSES  # torch

    named = {*HYPERPARAMETER_FREE_LOSSES, *RunsConfig().fixed, *RunsConfig().methods,
             *(tuned_method(loss) for loss in TUNABLE_LOSSES)}
    named |= {loss if loss in HYPERPARAMETER_FREE_LOSSES else tuned_method(loss) for loss in LOSSES}
    assert named <= set(METHOD_STYLES) and set(known_methods()) == set(METHOD_STYLES)
    for attribute in ("colour", "dashes", "marker"):
        values = [getattr(style, attribute) for style in METHOD_STYLES.values()]
        assert len(set(values)) == len(values), attribute
    assert METHOD_STYLES[REFERENCE].linestyle == "-"  # the reference alone is solid


@pytest.mark.parametrize("vision, threshold", [("normal", 20.0), ("deuteranopia", 10.0), ("protanopia", 10.0),
                                               ("tritanopia", 10.0)])
def test_any_two_method_colours_are_told_apart(vision, threshold):
    """CIEDE2000 of 20 is two clearly different hues; 10 still tells lines apart beside their own dash patterns. The
    grey of a method the palette does not know is held to the same bound."""
    colours = {method: style.colour for method, style in METHOD_STYLES.items()} | {"other": OTHER_COLOUR}
    closest = min((ciede2000(lab(seen_with(vision, colours[a])), lab(seen_with(vision, colours[b]))), a, b)
                  for a, b in itertools.combinations(colours, 2))
    assert closest[0] >= threshold, closest


def test_no_colour_is_too_pale_for_a_line_on_white():
    for method, style in METHOD_STYLES.items():
        assert lab(seen_with("normal", style.colour))[0] <= 75, method  # Okabe-Ito's yellow (L* 89) is left out


def test_a_method_keeps_its_style_whatever_the_study_and_the_order():
    assert styles_of(["softmax", "fixed_adacos"]) == {"softmax": METHOD_STYLES["softmax"],
                                                      "fixed_adacos": METHOD_STYLES["fixed_adacos"]}
    assert styles_of(["fixed_adacos", "softmax"])["softmax"] == styles_of(["softmax"])["softmax"]
    # A user's own fixed run: grey, in a style its name picks, the same every time.
    assert method_style("arcface_paper").colour == OTHER_COLOUR
    assert method_style("arcface_paper") == method_style("arcface_paper")
    assert GREY.colour != OTHER_COLOUR


def test_another_palette_keeps_each_methods_place_in_it():
    import seaborn as sns

    colours = sns.color_palette("deep", n_colors=len(METHOD_STYLES))
    for index, (method, style) in enumerate(METHOD_STYLES.items()):
        assert method_style(method, "deep") == type(style)(tuple(colours[index]), style.dashes, style.marker)


def test_fixed_adacos_is_drawn_last():
    assert drawing_order(["fixed_adacos", "dynamic_adacos", "softmax"]) == ["dynamic_adacos", "softmax",
                                                                              "fixed_adacos"]
    assert drawing_order(["softmax"]) == ["softmax"]


def _lookup(expression: str) -> dict:
    """The mapping of a `({...})[datum.series] || fallback` vega expression."""
    match = re.fullmatch(r"\((\{.*\})\)\[datum\.series\] \|\| .+", expression)
    assert match, expression
    return json.loads(match.group(1))


def test_the_committed_dvc_template_is_the_palettes():
    """`python -m study.report.plots_template --spec` writes .dvc/plots/method_bands.json; the committed file must be
    what it writes now, and its per-row mapping must give every method its palette colour."""
    committed = json.loads((ROOT / SPEC_PATH).read_text(encoding="utf-8"))
    assert committed == json.loads(json.dumps(plot_spec())), "rerun python -m study.report.plots_template --spec"
    transforms = {step["as"]: step["calculate"] for step in committed["transform"] if "calculate" in step}
    colours, dashes = _lookup(transforms["colour"]), _lookup(transforms["dash"])
    for method, style in METHOD_STYLES.items():
        assert colours[method] == style.colour
    for loss in TUNABLE_LOSSES:
        assert colours[f"{loss} (search)"] == METHOD_STYLES[tuned_method(loss)].colour
    assert dashes[REFERENCE] == [] and all(dashes[name] for name in dashes if name != REFERENCE)
    assert transforms["colour"].endswith(f"|| '{OTHER_COLOUR}'")


def _encodings(node):
    """Every encoding channel of a vega-lite spec, walked through layers, facets and concatenations."""
    if isinstance(node, dict):
        for channel, value in node.get("encoding", {}).items():
            yield channel, value
        for value in node.values():
            yield from _encodings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _encodings(value)


def test_the_dvc_template_sets_colours_per_row_not_by_a_scale():
    """A colour scale gives the names present in each plot the palette's colours in sorted order, so a method changed
    colour between panels: every colour and dash channel takes the row's own value (scale null)."""
    spec = plot_spec()
    channels = [(channel, value) for channel, value in _encodings(spec)
                if channel in ("color", "stroke", "fill", "strokeDash")]
    assert channels and {channel for channel, _ in channels} >= {"stroke", "fill", "strokeDash"}
    for channel, value in channels:
        assert value.get("scale", "missing") is None and value["field"] in ("colour", "dash"), (channel, value)


RENDER = """
global.self = global;
const fs = require('fs');
globalThis.vega = require('./node_modules/vega');
const vl = require('./vega-lite.js');
const [specFile, dataFile, x, y] = process.argv.slice(2);
const text = fs.readFileSync(specFile, 'utf8').replace('"<DVC_METRIC_DATA>"', fs.readFileSync(dataFile, 'utf8'))
  .replaceAll('<DVC_METRIC_X>', x).replaceAll('<DVC_METRIC_Y>', y);
const view = new vega.View(vega.parse(vl.compile(JSON.parse(text)).spec), {renderer: 'none'});
view.runAsync().then(() => {
  const lines = [];
  const walk = (item, mark) => {
    if (item.marktype === 'line' && item.items) item.items.forEach(line => lines.push(
      {mark: item.name, series: line.datum.series, stroke: line.stroke, dash: line.strokeDash}));
    (item.items || []).forEach(child => walk(child));
  };
  walk(view.scenegraph().root);
  console.log(JSON.stringify(lines));
});
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run vega")
def test_dvc_draws_each_method_in_the_same_colour_in_every_plot_with_fixed_adacos_on_top(tmp_path):
    """Both of dvc.yaml's plots drawn by the pinned vega and vega-lite of the offline page, with tables that hold
    different methods (the tuning curves' searches and controls, the val curves' methods and a user's own run): each
    line's colour is its method's, whatever else the plot holds, and Fixed AdaCos's line comes last."""
    page = (ROOT / PAGE_PATH).read_text(encoding="utf-8")
    for name, target in (("vega", "node_modules/vega/index.js"), ("vega-lite", "vega-lite.js")):
        script = re.search(r"<script>/\*! " + re.escape(name) + r"@\S+ build/\S+ \(npm\) \*/\n(.*?)\n    </script>",
                           page, re.DOTALL).group(1)
        (tmp_path / target).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / target).write_text(script, encoding="utf-8")
    (tmp_path / "render.js").write_text(RENDER, encoding="utf-8")
    tuning = [{"method": method, "kind": kind, "n": str(n), "expected_test": str(0.3 + 0.01 * n), "low": "",
               "high": "", "rev": "workspace"}
              for method, kind in (("fixed_adacos", "control"), ("dynamic_adacos", "control"), ("arcface", "search"),
                                   ("cosface", "search")) for n in (1, 2, 3)]
    curves = [{"method": method, "iteration": str(i), "mean": str(0.1 * i), "low": str(0.1 * i - 0.01),
               "high": str(0.1 * i + 0.01), "rev": "workspace"}
              for method in ("softmax", "arcface_tuned", "fixed_adacos", "dynamic_adacos", "my_run") for i in (0, 1)]
    drawn = {}
    for name, rows, x, y in (("tuning", tuning, "n", "expected_test"), ("curves", curves, "iteration", "mean")):
        (tmp_path / f"{name}.json").write_text(json.dumps(rows), encoding="utf-8")
        done = subprocess.run(["node", "render.js", str(ROOT / SPEC_PATH), f"{name}.json", x, y], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        drawn[name] = json.loads(done.stdout.strip().splitlines()[-1])
    styles = series_styles()
    for name, lines in drawn.items():
        assert lines, name
        for line in lines:
            colour = styles[line["series"]][0] if line["series"] in styles else OTHER_COLOUR
            assert line["stroke"] == colour, (name, line)
        assert lines[-1]["series"] == REFERENCE  # drawn last: on top
        assert len({line["mark"] for line in lines if line["series"] == REFERENCE}) == 1
    tuning_colours = {line["series"]: line["stroke"] for line in drawn["tuning"]}
    curve_colours = {line["series"]: line["stroke"] for line in drawn["curves"]}
    assert tuning_colours["fixed_adacos"] == curve_colours["fixed_adacos"] == METHOD_STYLES[REFERENCE].colour
    assert tuning_colours["dynamic_adacos"] == curve_colours["dynamic_adacos"]
    assert tuning_colours["arcface (search)"] == curve_colours["arcface_tuned"]
