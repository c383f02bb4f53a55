"""The study's numbers: tuning-budget curves, break-even, convergence and confidence intervals.

Pure functions on numpy arrays and pandas frames: no file I/O, no plotting. Scores are
"higher is better" throughout (the study objective is accuracy or MAP@R); the test metrics
carry their direction (EER is an error rate). One room per concern:

- `common`: the reference method, the test-metric prefix and direction, and small shared helpers;
- `tuning`: selection-aware tuning-budget estimators, the tuning curves, the break-even (against the
  budget-matched control and one run) and the selected trial's seed luck;
- `comparison`: the final runs' tables, method − Fixed AdaCos differences, runs at chance, reproduction;
- `convergence`: iterations to targets, convergence speed, val curves, crossings and angle dynamics;
- `verdict`: `recommend`, the recommendation rule, and the verdict's facts;
- `variance`: where the variance a user meets comes from (split, search, seed);
- `pooling`: pooling across studies with the data source as a level, random-effects pooling, prediction intervals,
  slopes on a covariate (within one source) and a cell's standard error floored at its seed noise;
- `true_effect`: a new source's true effect (Bayesian, Hartung–Knapp) and the mean's sensitivity to weighting;
- `coverage`: simulated worlds with a known truth that measure the tuning intervals' coverage;
- `published_comparisons`: others' published ArcFace − AdaCos in the same setup, beside the benchmark's prediction;
- `study`: `StudyAnalysis` and `analyse_study`, which builds it, with the searches' summary and landscape.
"""

from study.analysis.common import (
    ADACOS_METHODS,
    ARCFACE_METHODS,
    FINISHED_STATES,
    LOWER_IS_BETTER_METRICS,
    METRIC_RANGE,
    REFERENCE_METHOD,
    TEST_PREFIX,
    count_or_none,
    fixed_scale_of,
    higher_is_better,
    primary_loss,
)
from study.analysis.comparison import (
    ABSOLUTE_METRICS,
    CHANCE_LEVEL,
    CHANCE_METRIC,
    DIFFERENCE_COLUMNS,
    METRIC_KIND,
    REPRODUCTION_SPREAD_STDS,
    absolute_scores,
    differences_to_reference,
    equivalence_margin,
    margin_meaning,
    paired_runs,
    reproduction_table,
    runs_at_chance,
    seed_sd,
    summarise_runs,
)
from study.analysis.convergence import (
    ANGLE_COLUMNS,
    CONVERGENCE_COLUMNS,
    CROSSING_COLUMNS,
    SPEED_COLUMNS,
    convergence_targets,
    crossing_iteration,
    crossings_table,
    iterations_to_target,
)
from study.analysis.cell_difference import (
    FlooredStandardError,
    differences_to_fixed_adacos,
    paired_differences,
    standard_error_floor,
)
from study.analysis.pooling import (
    EQUAL_WEIGHT_METHOD,
    HARTUNG_KNAPP_METHOD,
    MIN_I2_DF,
    RANDOM_EFFECTS_METHOD,
    SOURCES_METHOD,
    PooledAcrossSources,
    WithinSourceSlope,
    dersimonian_laird_tau2,
    equal_weight_mean,
    equal_weight_slope,
    hartung_knapp,
    i2_note,
    pool_across_sources,
    shrink_towards_pool,
    random_effects,
    random_effects_slope,
    slope_within_source,
    source_membership,
    standard_error_from_interval,
)
from study.analysis.true_effect import (
    BAYESIAN_METHOD,
    HARTUNG_KNAPP_SOURCES_METHOD,
    SOURCE_SPREAD_PRIOR_SCALE,
    WEIGHTING_METHOD,
    BayesianTrueEffect,
    HartungKnappTrueEffect,
    WeightingSensitivity,
    bayesian_true_effect,
    hartung_knapp_true_effect,
    weighting_sensitivity,
)
from study.analysis.published_comparisons import (
    BESIDE_PREDICTION_COLUMNS,
    PUBLISHED_COLUMNS,
    published_beside_prediction,
    published_table,
)
from study.analysis.study import StudyAnalysis, analyse_study
from study.analysis.tuning import (
    BREAK_EVEN_COLUMNS,
    INDEPENDENT_SAMPLERS,
    METRIC_FLOOR,
    TUNING_CURVE_COLUMNS,
    MIN_EFFECTIVE_TRIALS,
    best_so_far_selected,
    bootstrap_selected_curves,
    break_even_against_control,
    break_even_with_interval,
    effective_trials,
    estimator_description,
    expected_best_after_n_trials,
    expected_selected_after_n_trials,
    first_reaching,
    jackknife_selected_variance,
    percentile_band,
    search_gain,
    seed_luck,
    seed_luck_over_splits,
    selected_curve_with_variance,
)
from study.analysis.variance import VARIANCE_SOURCES, search_variance, selected_trial_variance, variance_sources
from study.analysis.verdict import FACT_KEYS, RECOMMENDATIONS, counts, recommend

__all__ = [
    # common
    "ADACOS_METHODS", "ARCFACE_METHODS", "FINISHED_STATES", "LOWER_IS_BETTER_METRICS", "METRIC_RANGE",
    "REFERENCE_METHOD",
    "TEST_PREFIX", "count_or_none", "fixed_scale_of", "higher_is_better", "primary_loss",
    # comparison
    "ABSOLUTE_METRICS", "CHANCE_LEVEL", "CHANCE_METRIC", "DIFFERENCE_COLUMNS", "METRIC_KIND",
    "REPRODUCTION_SPREAD_STDS", "absolute_scores", "differences_to_reference", "equivalence_margin", "margin_meaning",
    "paired_runs",
    "reproduction_table", "runs_at_chance", "seed_sd", "summarise_runs",
    # convergence
    "ANGLE_COLUMNS", "CONVERGENCE_COLUMNS", "CROSSING_COLUMNS", "SPEED_COLUMNS", "convergence_targets",
    "crossing_iteration", "crossings_table", "iterations_to_target",
    # pooling
    "BAYESIAN_METHOD", "EQUAL_WEIGHT_METHOD", "HARTUNG_KNAPP_METHOD", "HARTUNG_KNAPP_SOURCES_METHOD", "MIN_I2_DF",
    "RANDOM_EFFECTS_METHOD", "SOURCE_SPREAD_PRIOR_SCALE", "SOURCES_METHOD", "WEIGHTING_METHOD",
    "BayesianTrueEffect", "FlooredStandardError", "HartungKnappTrueEffect", "PooledAcrossSources",
    "WeightingSensitivity", "WithinSourceSlope", "bayesian_true_effect", "dersimonian_laird_tau2",
    "equal_weight_mean", "equal_weight_slope", "hartung_knapp", "hartung_knapp_true_effect", "i2_note",
    "differences_to_fixed_adacos", "paired_differences", "pool_across_sources", "random_effects",
    "random_effects_slope", "shrink_towards_pool",
    "slope_within_source", "source_membership", "standard_error_floor", "standard_error_from_interval",
    "weighting_sensitivity",
    # published comparisons
    "BESIDE_PREDICTION_COLUMNS", "PUBLISHED_COLUMNS", "published_beside_prediction", "published_table",
    # study
    "StudyAnalysis", "analyse_study",
    # tuning
    "BREAK_EVEN_COLUMNS", "INDEPENDENT_SAMPLERS", "METRIC_FLOOR", "MIN_EFFECTIVE_TRIALS", "TUNING_CURVE_COLUMNS",
    "best_so_far_selected", "bootstrap_selected_curves", "break_even_against_control", "break_even_with_interval",
    "effective_trials",
    "estimator_description", "expected_best_after_n_trials", "expected_selected_after_n_trials", "first_reaching",
    "jackknife_selected_variance", "percentile_band", "search_gain", "seed_luck", "seed_luck_over_splits",
    "selected_curve_with_variance",
    # variance
    "VARIANCE_SOURCES", "search_variance", "selected_trial_variance", "variance_sources",
    # verdict
    "FACT_KEYS", "RECOMMENDATIONS", "counts", "recommend",
]
