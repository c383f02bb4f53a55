"""Where `study advise` finds its evidence: a running or finished study's storage (its searches and Fixed AdaCos
runs), or a finished study's committed report tables, as the benchmark's cells keep them; each checked against the
params it is read for (a study of other settings is refused by name, never advised from) and, for the tables, against
what the study's dvc.lock records (study/advice_inputs.py checks the rest)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from study.advice import DEFAULT_PRICE, EVIDENCE_COLUMNS, AdviceError, Evidence
from study.advice_inputs import read_table
from study.config import price_share

LANDSCAPE_COLUMNS = ("loss", "split", "repeat", "trial", "state", "value", "test_value", "seconds")
RUN_SCORES_COLUMNS = ("method", "split", "seed", "status", "val_score")
# The stages whose outputs the advice's tables come from: the prepared data, the searches and Fixed AdaCos's runs.
# analysis.* is left out: the tables do not depend on it (the advice reads the margin and the price from params).
TABLE_STAGES = ("prepare", "search@", "runs@fixed_adacos")


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
        name, meaning = study_name(loss, split_params, 0, root), search_meaning(loss, split_params)
        search = load_current(name, meaning, storage)
        if search is None:
            _refuse_other_settings(name, meaning, storage)
            continue  # not begun yet
        table = trials_table(loss, [search], objective)
        trials.append(_trial_rows(table, split))
        complete = table[table["state"] == "COMPLETE"]
        if len(complete) and complete["value"].max() > best[0]:
            row = complete.loc[complete["value"].idxmax()]
            best = (row["value"], f"(s, m) = ({row['s']:.3g}, {row['m']:.3g}) of split {split}")
        name = runs_study_name(REFERENCE_METHOD, split_params, root)
        meaning = runs_meaning(*params.runs.hyperparameters(REFERENCE_METHOD), split_params)
        runs = load_current(name, meaning, storage)
        if runs is None:
            _refuse_other_settings(name, meaning, storage)
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
                        params.search.n_trials, objective, price_share(params.analysis.price_per_training))
    return evidence, best[1]


def _refuse_other_settings(name: str, meaning: dict, storage) -> None:
    """AdviceError where the storage holds the study `name` run with other settings than `meaning` (params.yaml
    changed since it ran): its trials are no evidence about these params, and none of these params' trials exist."""
    import optuna

    from study.storage import MEANING
    from study.workers import differences, listed

    try:
        held = optuna.load_study(study_name=name, storage=storage).user_attrs.get(MEANING)
    except KeyError:
        return  # not begun
    stored = json.loads(json.dumps(meaning, sort_keys=True, default=list))
    if held is not None and held != stored:
        found = differences(stored, held, "in the storage")
        raise AdviceError(f"params.yaml changed since the study ran: the storage's {name} holds trials of other "
                          f"settings ({listed(found).replace(' here,', ' in params.yaml,')}), none of these; change "
                          f"params.yaml back to advise on them, or run `dvc repro` to run the study at the new settings")


def report_evidence(tables: str | Path, objective: str, budget: int, params=None) -> Evidence:
    """A finished study's evidence from its committed report tables (landscape.csv and run_scores.csv), as a
    benchmark cell keeps them: what the advice replays trial by trial. Checked first: the study's params (`params`,
    else the params.yaml of the study's folder, two above `tables`) against those its dvc.lock records for the stages
    the tables come from, every table whole, on the objective and of the design it should hold, and the tables as the
    report stage wrote them (the hash dvc.lock records)."""
    from study.analysis.common import REFERENCE_METHOD

    tables = Path(tables)
    root = tables.parent.parent
    if params is None and (root / "params.yaml").is_file():
        from study.config import load_params

        params = load_params(str(root / "params.yaml"))
    lock = _lock_stages(root)
    if params is not None:
        _refuse_changed_params(params, lock, root)
        if params.search.sampler != "random":
            raise AdviceError(f"the study's sampler is {params.search.sampler}: the advice reads a search's trials as "
                              f"independent draws, which only random search makes (search.sampler: random)")
    fix = f"`git checkout -- {tables}` restores the committed tables, or `dvc repro` writes them again"
    landscape = _checked_landscape(tables / "landscape.csv", budget, params, fix)
    runs = _checked_runs(tables / "run_scores.csv", objective, params, set(landscape["split"]), fix)
    _refuse_edited_tables(tables, root, lock)
    splits = tuple(sorted(set(landscape["split"])))
    trials = pd.concat([_trial_rows(landscape[landscape["split"] == split], split) for split in splits],
                       ignore_index=True)
    runs = runs[(runs["method"] == REFERENCE_METHOD) & (runs["status"] == "completed")]
    reference = pd.DataFrame({"split": runs["split"], "val": runs["val_score"], "test": runs[f"test_{objective}"],
                              "seconds": math.nan})
    price = price_share(params.analysis.price_per_training) if params is not None else DEFAULT_PRICE
    return Evidence(trials, reference, splits, budget, objective, price)


def _lock_stages(root: Path) -> dict:
    """The stages the study's dvc.lock records (none where it has none); a lock that does not read is named."""
    path = root / "dvc.lock"
    if not path.is_file():
        return {}
    try:
        stages = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages", {})
    except (yaml.YAMLError, UnicodeDecodeError, AttributeError) as error:
        raise AdviceError(f"{path} does not read as a DVC lock ({str(error).splitlines()[0][:100]}): `git checkout "
                          f"-- {path}` restores the committed one") from None
    return stages if isinstance(stages, dict) else {}


def _leaves(tree, prefix: str = "") -> dict:
    if not isinstance(tree, dict):
        return {prefix: tree}
    leaves = {}
    for key, value in tree.items():
        leaves.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return leaves


def _plain(value):
    """A params value as compared: numbers as floats (YAML's 1e-3 and 0.001 alike), tuples as lists."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def _refuse_changed_params(params, lock: dict, root: Path) -> None:
    """AdviceError where a value of params.yaml differs from the one dvc.lock records for a stage the tables come
    from (TABLE_STAGES): the tables were computed with the old one (train.lr, train.objective, …)."""
    current = _leaves(params.to_dict())
    for stage, entry in lock.items():
        if not stage.startswith(TABLE_STAGES) or not isinstance(entry, dict):
            continue
        for key, value in (entry.get("params") or {}).get("params.yaml", {}).items():
            for leaf, locked in _leaves(value, key).items():
                if leaf.startswith("analysis.") or _plain(current.get(leaf, "absent")) == _plain(locked):
                    continue
                raise AdviceError(f"params.yaml changed since the study ran: {leaf} is {current.get(leaf, 'absent')!r} "
                                  f"there, {locked!r} in {root / 'dvc.lock'} for {stage}, whose outputs the report's "
                                  f"tables were computed from; run `dvc repro` to bring the study up to date, or "
                                  f"change params.yaml back")


def _refuse_edited_tables(tables: Path, root: Path, lock: dict) -> None:
    """AdviceError where the tables folder is not what the report stage wrote: its hash (DVC's, of the files' list)
    differs from the one dvc.lock records for it."""
    for out in (lock.get("report") or {}).get("outs", []) or []:
        if not isinstance(out, dict) or not out.get("md5") or (root / str(out.get("path", ""))).resolve() != \
                tables.resolve():
            continue
        listing = sorted(({"md5": hashlib.md5(file.read_bytes()).hexdigest(),
                           "relpath": file.relative_to(tables).as_posix()} for file in tables.rglob("*")
                          if file.is_file()), key=lambda entry: entry["relpath"])
        if hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() + ".dir" != out["md5"]:
            raise AdviceError(f"{tables} is not what the report stage wrote (its hash differs from the one "
                              f"{root / 'dvc.lock'} records): a table was edited since; `git checkout -- {tables}` "
                              f"restores the committed tables, or `dvc repro` writes them again")


def _finite_and_bounded(frame: pd.DataFrame, columns: tuple[str, ...], path: Path, what: str, fix: str) -> None:
    """Every score of `frame` finite and within [0, 1], or AdviceError naming the file, the row and the fix."""
    for column in columns:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(values) | (values < 0) | (values > 1)
        if bad.any():
            row, value = frame.iloc[int(np.argmax(bad))], values[int(np.argmax(bad))]
            problem = "is not a number" if not np.isfinite(value) else \
                f"is {value:g}, outside [0, 1]{' (in percent?)' if value > 1 else ''}"
            raise AdviceError(f"{path}: the {column} of {what(row)} {problem}: {fix}")


def _checked_landscape(path: Path, budget: int, params, fix: str) -> pd.DataFrame:
    """landscape.csv's ArcFace trials of the first repeat, checked (see report_evidence)."""
    table = read_table(path, LANDSCAPE_COLUMNS, fix)
    landscape = table[(table["loss"] == "arcface") & (table["repeat"] == 0)]
    if landscape.empty:
        losses = ", ".join(sorted(set(table["loss"].astype(str))))
        raise AdviceError(f"{path} holds no ArcFace trials (only {losses}): the advice judges ArcFace's search; "
                          f"{fix}")
    complete = landscape[landscape["state"] == "COMPLETE"]
    _finite_and_bounded(complete, ("value", "test_value"), path,
                        lambda row: f"split {row['split']}'s trial {row['trial']}", fix)
    counts = landscape.groupby("split").size()
    planned = params.data.split_seeds() if params is not None else list(counts.index)
    absent = [split for split in planned if split not in counts.index]
    if absent:
        raise AdviceError(f"{path} holds no trial of split(s) {absent}, which the study searched (data.seeds): it "
                          f"was cut; {fix}")
    stopped_early = params is not None and params.search.stop_early is not None
    short = counts[counts != (counts.max() if stopped_early else budget)]
    if len(short):
        raise AdviceError(f"{path} holds {int(short.iloc[0])} trials of split {short.index[0]}'s search, whose study "
                          f"ran {int(counts.max()) if stopped_early else budget} (search.n_trials): it was cut; {fix}")
    return landscape


def _checked_runs(path: Path, objective: str, params, splits: set, fix: str) -> pd.DataFrame:
    """run_scores.csv, its Fixed AdaCos runs checked (see report_evidence)."""
    from study.analysis.common import REFERENCE_METHOD

    table = read_table(path, RUN_SCORES_COLUMNS, fix)
    if f"test_{objective}" not in table.columns:
        raise AdviceError(f"{path} has no test_{objective} column, the study's objective (train.objective): the "
                          f"tables were made for another objective; run `dvc repro`, or {fix.split(', or')[0]}")
    runs = table[table["method"] == REFERENCE_METHOD]
    if runs.empty:
        raise AdviceError(f"{path} holds no {REFERENCE_METHOD} runs, the advice's reference, though the study is "
                          f"finished (a report lists every method of runs.methods): it was cut or edited; {fix} "
                          f"(add {REFERENCE_METHOD} to runs.methods if it is missing there)")
    completed = runs[runs["status"] == "completed"]
    _finite_and_bounded(completed, ("val_score", f"test_{objective}"), path,
                        lambda row: f"{REFERENCE_METHOD}'s run of split {row['split']}, seed {row['seed']}", fix)
    counts = runs.groupby("split").size()
    seeds = len(params.runs.seeds) if params is not None else None
    for split in sorted(splits):
        have = int(counts.get(split, 0))
        if seeds is not None and have != seeds or have == 0:
            raise AdviceError(f"{path} holds {have} {REFERENCE_METHOD} run(s) of split {split}, whose study ran "
                              f"{seeds if seeds is not None else 'some'} (runs.seeds): it was cut; {fix}")
        if not (completed["split"] == split).any():
            raise AdviceError(f"{path}: every {REFERENCE_METHOD} run of split {split} diverged, so the advice has no "
                              f"reference there; rerun them (`dvc repro` after a fix of train.lr) or leave the split "
                              f"out of data.seeds")
    return table
