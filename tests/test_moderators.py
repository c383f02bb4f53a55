"""The moderator analysis (study/analysis/moderators.py) against independent references: numpy's weighted polyfit in
the no-random-effects limit, ordinary least squares where the model reduces to it, a known slope and the interval's
coverage on simulated benchmarks, and the leave-one-source-out loop redone by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis.moderators import (MODERATORS, images_per_class, moderator_sentence, moderator_table,
                                       source_meta_regression, with_images_per_class)


def _rows(rng, counts, slope_on_log_classes=0.0, source_sd=0.01, se=0.01) -> pd.DataFrame:
    """Tuned rows of a made-up benchmark: `counts` configurations per source, the difference moving with log10 C."""
    sources = np.repeat([f"source{i}" for i in range(len(counts))], counts)
    classes = rng.choice([10, 50, 100, 300, 1000], size=sources.size)
    effect = dict(zip(np.unique(sources), rng.normal(0.0, source_sd, len(counts))))
    relative = (0.01 + slope_on_log_classes * np.log10(classes) + np.array([effect[s] for s in sources])
                + rng.normal(0.0, se, sources.size))
    reference = rng.uniform(0.4, 0.95, sources.size)
    return pd.DataFrame({"cell": [f"cell{i}" for i in range(sources.size)], "source": sources,
                         "relative": relative, "relative_se": np.full(sources.size, se), "train_classes": classes,
                         "images_per_class": rng.choice([10.0, 20.0, 25.0, 40.0], sources.size),
                         "reference_test_mean": reference, "by_people": rng.random(sources.size) < 0.5,
                         "s_ratio_median": np.exp(rng.normal(0.0, 0.5, sources.size)),
                         "low": (relative - 2.0 * se) * reference})


def test_no_random_effects_limit_is_numpy_weighted_polyfit():
    rng = np.random.default_rng(1)
    x, se = rng.normal(size=12), rng.uniform(0.01, 0.05, 12)
    y = 0.2 - 0.3 * x + rng.normal(0.0, se)
    fit = source_meta_regression(y, se, x, np.repeat(list("abcdef"), 2), tau2=0.0)
    slope, intercept = np.polyfit(x, y, 1, w=1.0 / se)  # polyfit weights multiply the residuals: 1/σ
    assert fit["slope"] == pytest.approx(slope, rel=1e-10)
    assert fit["intercept"] == pytest.approx(intercept, rel=1e-10)


def test_one_configuration_per_source_with_equal_errors_is_ordinary_least_squares():
    # V = (se² + τ²)·I, REML's τ² = s² − se², so Knapp–Hartung's factor is 1 and the interval is the OLS t interval.
    rng = np.random.default_rng(2)
    x = rng.normal(size=8)
    y = 0.05 * x + rng.normal(0.0, 0.05, 8)
    fit = source_meta_regression(y, np.full(8, 0.001), x, [f"s{i}" for i in range(8)], confidence=0.9)
    reference = stats.linregress(x, y)
    half = stats.t.ppf(0.95, 6) * reference.stderr
    assert fit["slope"] == pytest.approx(reference.slope, rel=1e-9)
    assert (fit["low"], fit["high"]) == pytest.approx((reference.slope - half, reference.slope + half), rel=1e-5)
    assert fit["df"] == 6


def test_a_known_slope_is_recovered_within_its_interval():
    rows = _rows(np.random.default_rng(3), [3] * 40, slope_on_log_classes=0.02)
    fit = source_meta_regression(rows["relative"], rows["relative_se"], np.log10(rows["train_classes"]),
                                 rows["source"])
    assert fit["low"] <= 0.02 <= fit["high"] and fit["low"] > 0
    assert fit["df"] == 38 and fit["tau2"] > 0


def test_interval_covers_at_its_level_with_six_sources():
    rng = np.random.default_rng(4)
    sources = np.repeat(list("abcdef"), [1, 1, 1, 3, 2, 1])
    covered = []
    for _ in range(200):
        x, se = rng.normal(size=9), rng.uniform(0.005, 0.04, 9)
        effect = dict(zip("abcdef", rng.normal(0.0, 0.02, 6)))
        y = 0.03 * x + np.array([effect[s] for s in sources]) + rng.normal(0.0, se)
        fit = source_meta_regression(y, se, x, sources)
        covered.append(fit["low"] <= 0.03 <= fit["high"])
    assert np.mean(covered) >= 0.91  # 200 draws: a 95% interval falls below 0.91 by chance with p < 0.01


def test_leave_one_source_out_by_brute_force():
    rows = _rows(np.random.default_rng(5), [1, 2, 1, 3, 1, 2], slope_on_log_classes=0.01)
    table = moderator_table(rows, 0.95).set_index("moderator")
    level = table["level"].iloc[0]
    for name, (read, *_words) in MODERATORS.items():
        slopes, errors = [], []
        for source in rows["source"].unique():
            kept, left = rows[rows["source"] != source], rows[rows["source"] == source]
            fit = source_meta_regression(kept["relative"], kept["relative_se"], read(kept), kept["source"], level)
            slopes.append(fit["slope"])
            errors.extend(left["relative"] - fit["intercept"] - fit["slope"] * read(left))
        assert table.loc[name, "leave_one_source_out_min"] == pytest.approx(min(slopes), rel=1e-9)
        assert table.loc[name, "leave_one_source_out_max"] == pytest.approx(max(slopes), rel=1e-9)
        assert table.loc[name, "leave_one_source_out_rmse"] == pytest.approx(math.sqrt(np.mean(np.square(errors))))
        full = table.loc[name, "slope"]
        assert table.loc[name, "leave_one_source_out_same_sign"] == all(np.sign(slopes) == np.sign(full))


def test_supported_only_where_the_corrected_interval_excludes_zero_and_the_sign_holds():
    rows = _rows(np.random.default_rng(6), [2] * 12, slope_on_log_classes=0.05, source_sd=0.005, se=0.005)
    table = moderator_table(rows, 0.95).set_index("moderator")
    assert table["level"].iloc[0] == pytest.approx(0.99)  # Bonferroni over the five declared moderators
    for name, row in table.iterrows():
        assert row["supported"] == bool((row["low"] > 0 or row["high"] < 0) and row["leave_one_source_out_same_sign"])
    assert table.loc["log10 training classes", "supported"]
    sentence = moderator_sentence(table.reset_index(), rows)
    assert sentence.startswith("Tuning ArcFace pays more the more training classes")


def test_without_support_the_sentence_names_where_tuning_led_and_a_missing_moderator_is_dropped():
    rows = _rows(np.random.default_rng(7), [1, 1, 2, 1, 1, 1], source_sd=0.0)
    rows["relative"], rows["low"] = 0.0, -0.01
    rows.loc[0, ["relative", "low"]] = [0.05, 0.03 * rows.loc[0, "reference_test_mean"]]  # interval beyond +2%
    rows.loc[1, "relative"] = 0.03  # beyond by its point estimate only
    rows.loc[2, "images_per_class"] = math.nan
    table = moderator_table(rows, 0.95)
    dropped = table.set_index("moderator").loc["log10 images per class"]
    assert not dropped["supported"] and dropped["note"] == "dropped: unknown for cell2"
    assert not table["supported"].any()
    sentence = moderator_sentence(table, rows)
    first, second = (f"{rows.loc[i, 'source']} (C = {rows.loc[i, 'train_classes']:,})" for i in (0, 1))
    assert f"with its interval on {first}, and by its point estimate only on {second}" in sentence
    assert "no tested property" in sentence and "log10 images per class" not in sentence


def test_images_per_class_reads_the_reports_split_table(tmp_path):
    (tmp_path / "a" / "reports").mkdir(parents=True)
    (tmp_path / "a" / "reports" / "report.md").write_text(
        "| split | samples | classes |\n|---|---|---|\n| train | 1078 | 10 |\n| val | 360 | 10 |\n")
    assert images_per_class(tmp_path / "a") == pytest.approx(107.8)
    assert math.isnan(images_per_class(tmp_path / "missing"))
    rows = with_images_per_class(pd.DataFrame({"cell": ["a", "missing"]}), tmp_path)
    assert rows["images_per_class"].iloc[0] == pytest.approx(107.8) and math.isnan(rows["images_per_class"].iloc[1])
