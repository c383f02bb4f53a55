"""Where `study advise` finds its evidence: a running or finished study's storage (its searches and Fixed AdaCos
runs), or a finished study's committed report tables, as the benchmark's cells keep them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from study.advice import EVIDENCE_COLUMNS, AdviceError, Evidence


def _trial_rows(trials: pd.DataFrame, split: int) -> pd.DataFrame:
    """A search's finished trials (trials_table's or landscape.csv's rows) as evidence rows, in slot order: a failed
    (diverged) trial at the metric's floor, as a user pays for it; a pruned or unfinished one is no draw yet."""
    from study.analysis.tuning import METRIC_FLOOR

    finished = trials[trials["state"].isin(["COMPLETE", "FAIL"])].sort_values("trial", kind="stable")
    return pd.DataFrame({"split": split, "val": finished["value"].fillna(METRIC_FLOOR).to_numpy(float),
                         "test": finished["test_value"].fillna(METRIC_FLOOR).to_numpy(float),
                         "seconds": finished["seconds"].to_numpy(float)})


def study_evidence(params, storage, root=".") -> tuple[Evidence, str]:
    """What the storage of the study in folder `root` holds now (running or finished) for these params: the first
    repeat of its primary searched loss's searches and its Fixed AdaCos runs, per class split; and the best trial's
    (s, m) so far. A search or runs study of other settings is no evidence about these."""
    import optuna

    from study.analysis.common import REFERENCE_METHOD, primary_loss
    from study.runs import runs_meaning, runs_study_name
    from study.search import search_meaning, study_name, trials_table
    from study.storage import load_history
    from study.study_names import load_current

    loss = primary_loss(list(params.search.losses))
    if loss is None:
        raise AdviceError("the study searches no loss (search.losses is empty): there is no tuning to advise on")
    if params.search.sampler != "random":
        raise AdviceError(f"the study's sampler is {params.search.sampler}: the advice reads a search's trials as "
                          f"independent draws, which only random search makes (search.sampler: random)")
    if REFERENCE_METHOD not in params.runs.methods:
        raise AdviceError(f"runs.methods lacks {REFERENCE_METHOD}, the advice's reference: add it")
    if params.train.learning_rates:
        # Its reference would be the runs at the rate val chose, which the runs stage picks only once all are done.
        raise AdviceError("the study chooses each method's learning rate by val (train.learning_rates): read its "
                          "finished reports instead, with study advise --from report")
    objective, trials, reference, best = params.train.objective, [], [], (-math.inf, "")
    for split in params.data.split_seeds():
        split_params = params.for_split(split)
        search = load_current(study_name(loss, split_params, 0, root), search_meaning(loss, split_params), storage)
        if search is None:
            continue  # not begun yet
        table = trials_table(loss, [search], objective)
        trials.append(_trial_rows(table, split))
        complete = table[table["state"] == "COMPLETE"]
        if len(complete) and complete["value"].max() > best[0]:
            row = complete.loc[complete["value"].idxmax()]
            best = (row["value"], f"(s, m) = ({row['s']:.3g}, {row['m']:.3g}) of split {split}")
        runs = load_current(runs_study_name(REFERENCE_METHOD, split_params, root),
                            runs_meaning(*params.runs.hyperparameters(REFERENCE_METHOD), split_params), storage)
        if runs is None:
            continue
        for trial in runs.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]):
            # Its test score before the evaluate stage has run: the learning curve's at the iteration val selected.
            selected = trial.user_attrs.get("selected_iteration")
            test = next((row.get(f"test_{objective}", math.nan) for row in load_history(runs, trial)
                         if row.get("iteration") == selected), math.nan)
            reference.append({"split": split, "val": trial.value, "test": test,
                              "seconds": trial.user_attrs.get("seconds", math.nan)})
    evidence = Evidence(pd.concat(trials, ignore_index=True) if trials else pd.DataFrame(columns=EVIDENCE_COLUMNS),
                        pd.DataFrame(reference, columns=EVIDENCE_COLUMNS), tuple(params.data.split_seeds()),
                        params.search.n_trials, objective)
    return evidence, best[1]


def report_evidence(tables: str | Path, objective: str, budget: int) -> Evidence:
    """A finished study's evidence from its committed report tables (landscape.csv and run_scores.csv), as a
    benchmark cell keeps them: what the advice replays trial by trial."""
    from study.analysis.common import REFERENCE_METHOD

    tables = Path(tables)
    landscape = pd.read_csv(tables / "landscape.csv")
    landscape = landscape[(landscape["loss"] == "arcface") & (landscape["repeat"] == 0)]
    runs = pd.read_csv(tables / "run_scores.csv")
    runs = runs[(runs["method"] == REFERENCE_METHOD) & (runs["status"] == "completed")]
    splits = tuple(sorted(set(landscape["split"])))
    trials = pd.concat([_trial_rows(landscape[landscape["split"] == split], split) for split in splits],
                       ignore_index=True)
    reference = pd.DataFrame({"split": runs["split"], "val": runs["val_score"], "test": runs[f"test_{objective}"],
                              "seconds": math.nan})
    return Evidence(trials, reference, splits, budget, objective)
