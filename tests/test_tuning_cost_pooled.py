"""The benchmark's pooled tuning cost against independent references: the expected maximum of normals against its
closed forms and tables, the pooled lead against a two-stage pool over sources written out by hand on synthetic cells
whose curves are closed forms, and the crossings against a brute-force search."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis.tuning import MAX_STUDENTISED_DF
from study.benchmark.tuning_cost import (control_curve, crossings, expected_maximum_of_normals, figure_tuning_price,
                                         pooled_tuning_cost, tuning_cost_sentences)

# cell: (source, reference mean μ, control rise d at n = 2, search a − b/n, trials, the search's SE at n = 1, 2)
CELLS = {"a1": ("A", 0.80, 0.004, (0.82, 0.10), 6, 0.010), "a2": ("A", 0.60, -0.002, (0.63, 0.12), 8, 0.020),
         "b1": ("B", 0.90, 0.003, (0.91, 0.05), 6, 0.005), "c1": ("C", 0.50, 0.006, (0.49, 0.08), 6, 0.015),
         "c2": ("C", 0.70, 0.001, (0.74, 0.15), 7, 0.008)}


def test_expected_maximum_matches_closed_forms_and_tables():
    e = expected_maximum_of_normals(10)
    assert e[0] == pytest.approx(0.0, abs=1e-9)
    assert e[1] == pytest.approx(1 / math.sqrt(math.pi), abs=1e-7)
    assert e[2] == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-7)
    assert e[4] == pytest.approx(1.16296, abs=1e-5)  # Tippett (1925)
    assert e[9] == pytest.approx(1.53875, abs=1e-5)


def test_control_beyond_its_runs_follows_the_normal_model_or_stays_flat():
    measured = [0.70, 0.71]
    assert control_curve(measured, 3)[2] == pytest.approx(0.70 + 0.01 * 1.5)  # e₃/e₂ = 3/2
    assert control_curve(measured, 5)[4] == pytest.approx(0.70 + 0.01 * 1.16296 * math.sqrt(math.pi), abs=1e-6)
    np.testing.assert_allclose(control_curve(measured, 4, "flat"), [0.70, 0.71, 0.71, 0.71])
    np.testing.assert_allclose(control_curve([0.5, 0.6, 0.7], 2), [0.5, 0.6])
    np.testing.assert_allclose(control_curve([0.5], 3), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError):
        control_curve(measured, 3, "guess")


def _write_cell(root, name, mu, rise, search, trials, se):
    a, b = search
    n = np.arange(1, trials + 1)
    value = a - b / n
    half = stats.t.ppf(0.975, MAX_STUDENTISED_DF) * se * mu
    banded = n <= 2
    rows = [pd.DataFrame({"method": "fixed_adacos", "kind": "control", "n": [1, 2], "expected_test": [mu, mu + rise],
                          "low": np.nan, "high": np.nan, "expected_val": np.nan, "seconds": 1.0}),
            pd.DataFrame({"method": "arcface", "kind": "search", "n": n, "expected_test": value,
                          "low": np.where(banded, value - half, np.nan), "high": np.where(banded, value + half, np.nan),
                          "expected_val": np.nan, "seconds": n * 1.0})]
    folder = root / name / "reports" / "tables"
    folder.mkdir(parents=True)
    pd.concat(rows).to_csv(folder / "tuning_curves.csv", index=False)


def _rows(cells: dict) -> pd.DataFrame:
    base = {"primary": True, "regime": "short", "relative": 0.01, "relative_se": 0.01, "longer_of": np.nan,
            "rates": 2, "iterations": 100, "reference_converged": True, "converged": True}
    return pd.DataFrame([{**base, "cell": cell, "configuration": cell, "source": source, "reference_test_mean": mu,
                          "method": method}
                         for cell, (source, mu, *_rest) in cells.items() for method in ("arcface_tuned", "p2sgrad")])


@pytest.fixture(scope="module")
def synthetic_cells(tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    for name, (_source, mu, rise, search, trials, se) in CELLS.items():
        _write_cell(root, name, mu, rise, search, trials, se)
    rows = pd.concat([_rows(CELLS), _rows({"gone": ("B", 0.5, 0, (0, 0), 6, 0)})], ignore_index=True)
    return rows, root


def _hand_pool(leads: dict, errors: dict, confidence: float) -> tuple[float, float, float, float]:
    """The two-stage pool written out: source means, their mean ± t_{k−1}·s/√k, and the prediction half-width
    t_{k−1}·√(s²(1 + 1/k) + (1 − mean 1/nᵢ)·max(0, s²_within − noise))."""
    by_source: dict = {}
    for cell, lead in leads.items():
        by_source.setdefault(CELLS[cell][0], []).append(cell)
    means = [sum(leads[c] for c in cells) / len(cells) for cells in by_source.values()]
    k = len(means)
    mean = sum(means) / k
    spread = sum((m - mean) ** 2 for m in means) / (k - 1)
    q = stats.t.ppf(0.5 + confidence / 2, k - 1)
    within_df = len(leads) - k
    within = sum((leads[c] - m) ** 2 for m, cells in zip(means, by_source.values()) for c in cells) / within_df
    noise = sum((1 - 1 / len(cells)) * sum(errors[c] ** 2 for c in cells) for cells in by_source.values()) / within_df
    share = 1 - sum(1 / len(cells) for cells in by_source.values()) / k
    predicted = q * math.sqrt(spread * (1 + 1 / k) + share * max(0.0, within - noise))
    return mean, q * math.sqrt(spread / k), predicted, k


@pytest.mark.parametrize("beyond", ["flat", "normal"])
def test_pooled_lead_is_the_hand_computed_pool_over_sources(synthetic_cells, beyond):
    rows, root = synthetic_cells
    table = pooled_tuning_cost(rows, root, 0.95, beyond_seeds=beyond)
    assert list(table["n"]) == [1, 2, 3, 4, 5, 6]  # cut to the fewest trials any cell ran
    assert [cell for cell, _ in table.attrs["left_out"]] == ["gone"]
    ratio = {1: 0.0, 2: 1.0, 3: 1.5, 4: 1.02938 / 0.56419, 5: 1.16296 / 0.56419, 6: 1.26721 / 0.56419}
    for row in table.itertuples():
        n = row.n
        leads, errors = {}, {}
        for cell, (_source, mu, rise, (a, b), _trials, se) in CELLS.items():
            control = mu + rise * (min(n, 2) - 1 if beyond == "flat" else ratio[n])
            leads[cell] = (a - b / n - control) / mu
            errors[cell] = se if n <= 2 else 0.0
        mean, half, predicted, k = _hand_pool(leads, errors, 0.95)
        assert row.mean == pytest.approx(mean, abs=2e-4 if beyond == "normal" else 1e-12)
        assert row.high - row.mean == pytest.approx(half, rel=1e-3)
        assert row.prediction_high - row.mean == pytest.approx(predicted, rel=1e-3)
        assert (row.sources, row.cells, row.control_measured) == (k, 5, n <= 2)


def _brute_first(values, target):
    for index, value in enumerate(values):
        if value >= target:
            return index + 1
    return None


def test_crossings_match_a_brute_force_search():
    rng = np.random.default_rng(7)
    for _ in range(200):
        size = int(rng.integers(1, 12))
        mean = np.cumsum(rng.normal(0.004, 0.01, size)) - 0.02
        half = rng.uniform(0.0, 0.03, size)
        table = pd.DataFrame({"n": np.arange(1, size + 1), "mean": mean, "low": mean - half, "high": mean + half})
        found = crossings(table, margin=0.02)
        assert found["trials"] == size
        for name, target in (("zero", 0.0), ("margin", 0.02)):
            assert found[name] == {"n": _brute_first(mean, target), "low": _brute_first(mean + half, target),
                                   "high": _brute_first(mean - half, target)}


def test_sentences_state_the_numbers_and_never_within(synthetic_cells, tmp_path):
    rows, root = synthetic_cells
    table = pooled_tuning_cost(rows, root, 0.95)
    facts = crossings(table)
    sentences = tuning_cost_sentences(table, facts)
    assert len(sentences) == 2 and "Pooled over 3 sources (5 cells)" in sentences[0]
    assert f"{100 * table['mean'].iloc[-1]:+.1f}%" in sentences[1] and "extrapolated" in sentences[1]
    low = table.assign(mean=-0.5, low=-0.6, high=-0.4)
    assert "never reaches zero within 6 trials" in tuning_cost_sentences(low, crossings(low))[0]
    path = figure_tuning_price(table, tmp_path / "price.png", 60)
    assert path.stat().st_size > 1000
