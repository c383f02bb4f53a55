"""DVC stage `search@<loss>`: the Optuna searches over (s, m), one per class split and repeat, resumed from their storage
(study/storage.py), train.parallel trials at a time; writes each split's trial tables."""

import argparse
import contextlib
from pathlib import Path

from stages import begin
from study.config import load_params
from study.interruptions import Interrupted, ends_as_interrupted
from study.results import JOURNAL, prepared_dir, prepared_train_sizes, search_dir, write_csv, write_json
from study.progress import announce
from study.search import FINISHED, best_trial, count_trials, history_table, run_searches, trials_table
from study.splits import load_splits
from study.storage import open_storage
from study.study_names import namespace
from study.validation import study_cost
from study.packing import runs_at_once
from study.workers import ends_cleanly


def main() -> None:
    begin()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loss", required=True)
    loss = parser.parse_args().loss
    # Ctrl-C, SIGTERM or DVC killed: one line saying what was kept and how to resume, exit status 128 + the signal.
    with ends_as_interrupted():
        params = load_params()
        with ends_cleanly(params.search, JOURNAL):  # a storage fault: one message naming the path or URL and the fix
            storage = open_storage(params.search, JOURNAL)
            # the whole study's progress after each training: every class split's trainings
            cost = study_cost(params, prepared_train_sizes(params.data.split_seeds()))
            announce(storage, namespace(params, "."), cost.trainings, runs_at_once(params.train),
                     cost.iterations if cost.exact else None)
            if params.search.stop_early is not None:
                search_in_rounds(loss, params, storage)
                return
            for split in params.data.split_seeds():
                search_split(loss, params.for_split(split), storage, split)


def search_in_rounds(loss: str, params, storage) -> None:
    """search.stop_early: the Fixed AdaCos runs the advice compares with first (the runs stage then finds them done),
    then one more trial on every class split a round until `study advise` says stop; its last advice goes to
    results/search/<loss>/advice.json. The same seeds draw the same trials, so a rerun reaches the same decision."""
    from study.advice import MIN_ROUND, Prior, advise, benchmark_prior
    from study.advice_evidence import study_evidence
    from study.config import METRIC_KIND
    from study.results import REPORT_DIR
    from study.runs import open_runs, serve_runs

    splits = params.data.split_seeds()
    for split in splits:
        split_params = params.for_split(split)
        runs = open_runs("fixed_adacos", *params.runs.hyperparameters("fixed_adacos"), split_params, storage)
        serve_runs(runs, split_params, load_splits(prepared_dir(split)), root=Path.cwd())
    objective = params.train.objective
    prior = (benchmark_prior(REPORT_DIR / "benchmark" / "tables" / "cells.csv", objective)
             if params.search.stop_early == "benchmark" else Prior.flat(objective))
    margin = params.analysis.score_share(METRIC_KIND[objective])
    for round_ in range(1, params.search.n_trials + 1):
        for split in splits:
            split_params = params.for_split(split)
            # This round's budget: the trials every split has after it (the rounds' own bookkeeping is this loop).
            round_search = {**split_params.search.to_dict(), "n_trials": round_, "stop_early": None}
            search_split(loss, split_params.replace(search=round_search), storage, split)
        if round_ < MIN_ROUND:
            continue
        evidence, best = study_evidence(params, storage)
        advice = advise(evidence, margin, prior, best=best)
        print(f"{loss}, round {advice.round} of {advice.budget}: {advice.says}", flush=True)
        if advice.decision != "run_more":
            break
    saved = (advice.budget - advice.round) * len(splits)
    write_json({**advice.as_dict(), "lines": advice.lines(), "saved_trials": saved,
                "saved_seconds": saved * advice.seconds_per_trial}, search_dir(loss, splits[0]).parent / "advice.json")


def search_split(loss: str, params, storage, split: int) -> None:
    """The searches of one class split, written to its folder."""
    sets = load_splits(prepared_dir(split))
    out_dir = search_dir(loss, split)
    studies = []
    try:
        run_searches(loss, params, storage, sets, Path.cwd(), studies)
    except Interrupted as interruption:
        with contextlib.suppress(Exception):  # a storage that fails now leaves the line without the count
            finished = sum(count_trials(study, FINISHED) for study in studies)
            interruption.kept = f"{finished} finished trials of {loss} (split {split}) kept"
        raise
    finally:
        # Written even when interrupted, so the finished trials can be inspected; the storage keeps them too.
        write_csv(trials_table(loss, studies, params.train.objective).assign(split=split), out_dir / "trials.csv")
        write_csv(history_table(loss, studies).assign(split=split), out_dir / "history.csv")
    best = best_trial(loss, studies[0], params.train.objective)
    write_json(best, out_dir / "best.json")
    print(f"{loss}, split {split}: best {best['objective']} {best['value']:.4f} at {best['hyperparameters']} "
          f"(trial {best['trial']})")

if __name__ == "__main__":
    main()
