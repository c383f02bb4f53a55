"""The study beside the benchmark: its own tuned ArcFace − Fixed AdaCos (as a share of Fixed AdaCos's score) next to
what the committed benchmark predicts for a new data source, and what both say together."""

from __future__ import annotations

import json
import math
from pathlib import Path

from study.analysis import (REFERENCE_METHOD, TEST_PREFIX, paired_differences, shrink_towards_pool,
                            standard_error_floor)
from study.analysis.study import StudyAnalysis
from study.report.document import Section
from study.report.formats import metric_name

# Where the benchmark's aggregate writes its numbers, relative to the repository root (where DVC runs the report).
BENCHMARK_NUMBERS = Path("reports/benchmark/benchmark.json")
HEADLINE_METHOD = "arcface_tuned"
# What this report reads of the benchmark's pooled row for tuned ArcFace (study/benchmark/meta.py, POOLED_NUMBERS).
POOLED_KEYS = ("metric", "mean", "prediction_low", "prediction_high", "prediction_standard_error", "sources")
# The benchmark's pools by training length (study/benchmark/meta.py SCOPES): their keys' prefixes.
REGIMES = {"converged": "", "short": "short_"}


def _pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.1f}%"


def _pct_interval(low: float, high: float) -> str:
    return "[n/a]" if not (math.isfinite(low) and math.isfinite(high)) else f"[{_pct(low)}, {_pct(high)}]"


def beside_benchmark(analysis: StudyAnalysis, path: Path = BENCHMARK_NUMBERS) -> dict:
    """The study's own relative difference with its floored standard error, the benchmark's prediction for a new
    source, and the two combined (shrink_towards_pool). `status` says what could be read: "ok", or "absent" (no
    file), "unreadable", "older" (a benchmark.json without the pooled row this reads: written by an earlier
    aggregate), "other metric" (the benchmark pooled another metric than this study's objective), "no difference"
    (this study has no tuned ArcFace paired with Fixed AdaCos)."""
    path = Path(path)
    facts = {"path": path.as_posix()}
    if not path.is_file():
        return facts | {"status": "absent"}
    try:
        benchmark = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return facts | {"status": "unreadable", "error": str(error).splitlines()[0]}
    pooled = (benchmark.get("pooled") or {}).get(HEADLINE_METHOD) if isinstance(benchmark, dict) else None
    if not isinstance(pooled, dict) or any(f"{prefix}{key}" not in pooled for key in POOLED_KEYS[1:]
                                           for prefix in REGIMES.values()) or "metric" not in pooled:
        return facts | {"status": "older"}
    # Like with like: a study whose Fixed AdaCos and tuned ArcFace converged beside the benchmark's converged cells
    # (when they predict a new source), any other beside its short regime's.
    plateau = analysis.plateau.set_index("method")["converged"] if len(analysis.plateau) else {}
    converged = all(bool(plateau.get(method, False)) for method in (REFERENCE_METHOD, HEADLINE_METHOD))
    regime = "converged" if converged and math.isfinite(pooled.get("prediction_low") or math.nan) else "short"
    pooled = {key: pooled[f"{REGIMES[regime]}{key}"] for key in POOLED_KEYS[1:]} | {"metric": pooled["metric"]}
    facts["regime"] = regime
    metric = f"{TEST_PREFIX}{analysis.objective}"
    facts |= {"metric": metric, "benchmark_metric": pooled["metric"]}
    if pooled["metric"] != metric:
        return facts | {"status": "other metric"}
    scores = analysis.run_scores
    reference = float(scores.loc[scores["method"] == REFERENCE_METHOD, metric].mean()) if metric in scores \
        else math.nan
    own = standard_error_floor(paired_differences(scores, HEADLINE_METHOD, metric, REFERENCE_METHOD),
                               analysis.confidence) if metric in scores else None
    if own is None or not (math.isfinite(own.estimate) and reference > 0):
        return facts | {"status": "no difference"}
    # The benchmark pools relative differences (a share of Fixed AdaCos's score): the study's are put on that scale.
    together = shrink_towards_pool(own.estimate / reference, own.standard_error / reference, float(pooled["mean"]),
                                   float(pooled["prediction_standard_error"]), analysis.confidence)
    return facts | {
        "status": "ok", "own": own.estimate / reference, "own_low": own.low / reference,
        "own_high": own.high / reference, "predicted_low": float(pooled["prediction_low"]),
        "predicted_high": float(pooled["prediction_high"]), "predicted_mean": float(pooled["mean"]),
        "sources": int(pooled["sources"]), "margin": float(benchmark.get("margin", math.nan)),
        "together": together.estimate, "together_low": together.low, "together_high": together.high,
        "weight_on_own": together.weight_on_own, "confidence": analysis.confidence}


def benchmark_section(facts: dict) -> Section:
    """'Beside the benchmark': the study's own difference, the benchmark's prediction and both together, or one line
    saying why they cannot be set side by side."""
    where = facts["path"]
    lines = {
        "absent": f"No benchmark aggregate ({where}) is beside this study, so its answer stands alone; `study "
                  "benchmark` writes one.",
        "unreadable": f"The benchmark aggregate {where} could not be read ({facts.get('error', '')}), so this study's "
                      "answer stands alone.",
        "older": f"The benchmark aggregate {where} holds no prediction for a new data source in the form this report "
                 "reads (it was written by an earlier version of the benchmark's aggregate); rerun the aggregate "
                 "(`study benchmark`) to set this study beside it.",
        "other metric": f"The benchmark ({where}) pooled test {metric_name(facts.get('benchmark_metric', ''))}, this "
                        f"study's objective is test {metric_name(facts.get('metric', ''))}: the two are not set side "
                        "by side.",
        "no difference": "This study has no tuned ArcFace − Fixed AdaCos paired by split and seed, so there is nothing "
                         f"to set beside the benchmark ({where}).",
    }
    if facts["status"] != "ok":
        return Section("Beside the benchmark", [lines[facts["status"]]])
    level = f"{facts['confidence']:.0%}"
    margin = (f" The benchmark reads its answer against ±{100 * facts['margin']:.0f}% of Fixed AdaCos's score."
              if math.isfinite(facts["margin"]) else "")
    return Section("Beside the benchmark", [
        f"On this data, tuned ArcFace − Fixed AdaCos is {_pct(facts['own'])} of Fixed AdaCos's score "
        f"{_pct_interval(facts['own_low'], facts['own_high'])} ({level} interval, its standard error floored at the "
        f"seed noise). The benchmark's {'converged' if facts['regime'] == 'converged' else 'short-training'} cells "
        f"predict {_pct_interval(facts['predicted_low'], facts['predicted_high'])} for a "
        f"new data source ({level} prediction interval over {facts['sources']} sources, {where}). Taking this data "
        f"as one more source, both together say {_pct(facts['together'])} "
        f"{_pct_interval(facts['together_low'], facts['together_high'])} (an empirical-Bayes estimate that puts "
        f"{facts['weight_on_own']:.0%} of the weight on this study; approximate: the benchmark's spread rests on "
        f"few sources).{margin}"])
