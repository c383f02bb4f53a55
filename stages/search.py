"""DVC stage `search@<loss>`: the Optuna search over (s, m), resumed from its storage; writes the trial tables."""

import argparse

from study.config import load_params
from study.data import load_splits
from study.results import PREPARED_DIR, SEARCH_DIR, write_csv, write_json
from study.search import best_trial, history_table, open_study, run_search, trials_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loss", required=True)
    loss = parser.parse_args().loss
    params = load_params()
    sets = load_splits(PREPARED_DIR)
    out_dir = SEARCH_DIR / loss
    study = open_study(loss, params, out_dir, len(sets["train"]), seed=params.search.seed)
    try:
        run_search(study, loss, params, sets)
    finally:
        # Written even when interrupted, so the finished trials can be inspected; the storage keeps them too.
        write_csv(trials_table(loss, study, params.train.objective), out_dir / "trials.csv")
        write_csv(history_table(loss, study), out_dir / "history.csv")
    best = best_trial(loss, study, params.train.objective)
    write_json(best, out_dir / "best.json")
    print(f"{loss}: best {best['objective']} {best['value']:.4f} at {best['hyperparameters']} (trial {best['trial']})")


if __name__ == "__main__":
    main()
