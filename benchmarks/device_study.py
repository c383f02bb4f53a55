"""The default study on another device, trial by trial against this checkout's: same draws, same choices, same scores?

Run the default study's stages on the other device (docs/running.md, "On a GPU"), bring back its storage
(results/trials/journal.log), then here, where the committed study ran:

    python benchmarks/device_study.py OTHER_JOURNAL --names cuda cpu \
        --out benchmarks/results/cuda-2026-11-27-default-study.csv

It pairs every search trial (by study and trial number) and every final run (by study and seed) that both storages
finished, writes one row per pair (s, m, val and seconds on each device) and prints whether the searches drew the
same (s, m), whether each class split's best trial is the same, how far the val scores lie apart, and the median
seconds of a training on each device. A trial one storage lacks is counted and named, never dropped silently.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import optuna
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.storage import journal_storage  # noqa: E402


def finished_trials(journal: Path) -> pd.DataFrame:
    """One row per finished trial: stage (search or runs), method, split, trial number or seed, s, m, val, seconds."""
    if not journal.is_file():
        raise SystemExit(f"{journal} is not a file: give the journal.log of a study's results/trials")
    storage = journal_storage(journal)  # a run killed on the other device may have left a torn last line
    rows = []
    for summary in optuna.get_all_study_summaries(storage):
        if "@" in summary.study_name:  # kept aside: trials of other settings (study/study_names.py), never paired
            continue
        kind, method, split = summary.study_name.split("/")[:3]
        for trial in optuna.load_study(study_name=summary.study_name, storage=storage).trials:
            if trial.state != optuna.trial.TrialState.COMPLETE:
                continue
            search = kind == "search"
            rows.append({"stage": "search" if search else "runs", "method": method, "split": int(split[5:]),
                         "trial_or_seed": trial.number if search else trial.user_attrs["seed"],
                         "s": trial.params.get("s"), "m": trial.params.get("m"), "val": trial.values[0],
                         "seconds": trial.user_attrs.get("seconds")})
    return pd.DataFrame(rows)


def compare(other: Path, here: Path) -> pd.DataFrame:
    """The trainings both storages finished, side by side (columns suffixed _other and _here)."""
    key = ["stage", "method", "split", "trial_or_seed"]
    pairs = finished_trials(other).merge(finished_trials(here), on=key, how="outer", suffixes=("_other", "_here"),
                                         indicator=True)
    for side, label in (("left_only", "only on the other device"), ("right_only", "only here")):
        missing = pairs[pairs["_merge"] == side]
        if len(missing):
            print(f"{len(missing)} finished {label} (left out of the comparison): "
                  + ", ".join(missing[key].astype(str).agg("/".join, axis=1)))
    return pairs[pairs["_merge"] == "both"].drop(columns="_merge").sort_values(key).reset_index(drop=True)


def summarise(pairs: pd.DataFrame, other: str = "other", here: str = "here") -> None:
    search = pairs[pairs["stage"] == "search"]
    same_draws = ((search["s_other"] - search["s_here"]).abs().max() < 1e-12
                  and (search["m_other"] - search["m_here"]).abs().max() < 1e-12)
    draws = ("no search trial in both" if search.empty
             else f"the searches drew {'the same' if same_draws else 'different'} (s, m)")
    print(f"{len(pairs)} trainings paired ({len(search)} search trials, {len(pairs) - len(search)} final runs); "
          + draws)
    for split, trials in search.groupby("split"):
        best_other = trials.loc[trials["val_other"].idxmax(), "trial_or_seed"]
        best_here = trials.loc[trials["val_here"].idxmax(), "trial_or_seed"]
        print(f"split {split}: best trial {best_other} on {other}, {best_here} on {here}")
    gap = (pairs["val_other"] - pairs["val_here"]).abs()
    print(f"val apart by at most {gap.max():.4f} (median {gap.median():.4f})")
    for stage, rows in pairs.groupby("stage"):
        print(f"{stage}: a training took {rows['seconds_other'].median():.1f} s (median) on {other}, "
              f"{rows['seconds_here'].median():.1f} s on {here}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="the other device's results/trials/journal.log")
    parser.add_argument("--here", type=Path, default=REPO / "results" / "trials" / "journal.log",
                        help="this checkout's storage (default: results/trials/journal.log)")
    parser.add_argument("--names", nargs=2, default=("other", "here"), metavar=("OTHER", "HERE"),
                        help="the two devices' names in the CSV's columns (e.g. cuda cpu)")
    parser.add_argument("--out", type=Path, help="write the paired rows here as CSV")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pairs = compare(args.other, args.here)
    if pairs.empty:
        sys.exit("no training finished in both storages: are they the same study's?")
    other, here = args.names
    summarise(pairs, other, here)
    if args.out:
        pairs = pairs.drop(columns=["s_here", "m_here"]).rename(columns={"s_other": "s", "m_other": "m"})
        pairs.rename(columns=lambda c: c.replace("_other", f"_{other}").replace("_here", f"_{here}")).to_csv(
            args.out, index=False, float_format="%.6g")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
