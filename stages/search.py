"""DVC stage `search@<loss>`: the Optuna searches over (s, m), one per repeat, resumed from their storage (study/storage.py),
train.parallel trials at a time; writes the trial tables."""

import argparse
from pathlib import Path

from study.config import load_params
from study.data import load_splits
from study.results import JOURNAL, PREPARED_DIR, SEARCH_DIR, write_csv, write_json
from study.search import best_trial, history_table, run_searches, trials_table
from study.storage import open_storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loss", required=True)
    loss = parser.parse_args().loss
    params = load_params()
    sets = load_splits(PREPARED_DIR)
    out_dir = SEARCH_DIR / loss
    storage = open_storage(params.search, JOURNAL)
    studies = []
    try:
        run_searches(loss, params, storage, sets, Path.cwd(), studies)
    finally:
        # Written even when interrupted, so the finished trials can be inspected; the storage keeps them too.
        write_csv(trials_table(loss, studies, params.train.objective), out_dir / "trials.csv")
        write_csv(history_table(loss, studies), out_dir / "history.csv")
    best = best_trial(loss, studies[0], params.train.objective)
    write_json(best, out_dir / "best.json")
    print(f"{loss}: best {best['objective']} {best['value']:.4f} at {best['hyperparameters']} (trial {best['trial']})")


if __name__ == "__main__":
    main()
