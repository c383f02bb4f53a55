"""The study beside the benchmark: its own tuned ArcFace − Fixed AdaCos (as a share of Fixed AdaCos's score) next to
what the committed benchmark predicts for a new data source, and what both say together."""

from __future__ import annotations

import json
import math
from pathlib import Path

from study.analysis import REFERENCE_METHOD, paired_differences, shrink_towards_pool, standard_error_floor
from study.analysis.study import StudyAnalysis
from study.report.document import Section

# Where the benchmark's aggregate writes its numbers, relative to the repository root (where DVC runs the report).
BENCHMARK_NUMBERS = Path("reports/benchmark/benchmark.json")
HEADLINE_METHOD = "arcface_tuned"


def _pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.1f}%"


def _pct_interval(low: float, high: float) -> str:
    return "[n/a]" if not (math.isfinite(low) and math.isfinite(high)) else f"[{_pct(low)}, {_pct(high)}]"


def beside_benchmark(analysis: StudyAnalysis, path: Path = BENCHMARK_NUMBERS) -> dict | None:
    """The study's own relative difference with its floored standard error, the benchmark's prediction for a new
    source, and the two combined (shrink_towards_pool); None without a benchmark report or a tuned ArcFace."""
    if not path.is_file() or analysis.run_scores.empty:
        return None
    pooled = json.loads(path.read_text(encoding="utf-8")).get("pooled", {}).get(HEADLINE_METHOD)
    metric = f"test_{analysis.objective}"
    if pooled is None or metric not in analysis.run_scores:
        return None
    reference = float(analysis.run_scores.loc[analysis.run_scores["method"] == REFERENCE_METHOD, metric].mean())
    own = standard_error_floor(paired_differences(analysis.run_scores, HEADLINE_METHOD, metric))
    if not (math.isfinite(own.estimate) and reference > 0):
        return None
    together = shrink_towards_pool(own.estimate / reference, own.standard_error / reference, float(pooled["mean"]),
                                   float(pooled.get("prediction_standard_error", math.nan)), analysis.confidence)
    return {"own": own.estimate / reference, "own_low": own.low / reference, "own_high": own.high / reference,
            "predicted_low": float(pooled["prediction_low"]), "predicted_high": float(pooled["prediction_high"]),
            "sources": int(pooled["sources"]), "together": together.estimate, "together_low": together.low,
            "together_high": together.high, "weight_on_own": together.weight_on_own}


def benchmark_section(facts: dict | None) -> Section:
    """'Beside the benchmark': the three numbers in one paragraph."""
    if facts is None:
        return Section("Beside the benchmark", [
            f"No benchmark report ({BENCHMARK_NUMBERS}) is beside this study, so its answer stands alone; "
            "`study benchmark` writes one."])
    return Section("Beside the benchmark", [
        f"On this data, tuned ArcFace − Fixed AdaCos is {_pct(facts['own'])} of Fixed AdaCos's score "
        f"{_pct_interval(facts['own_low'], facts['own_high'])}. The benchmark predicts "
        f"{_pct_interval(facts['predicted_low'], facts['predicted_high'])} for a new data source (95% prediction "
        f"interval over {facts['sources']} sources, {BENCHMARK_NUMBERS.parent}/). Taking this data as one more "
        f"source, both together say {_pct(facts['together'])} "
        f"{_pct_interval(facts['together_low'], facts['together_high'])} (an empirical-Bayes estimate that puts "
        f"{facts['weight_on_own']:.0%} of the weight on this study; approximate: the benchmark's spread rests on "
        "few sources)."])
