"""A search killed outright (kill -9 of dvc, its stage and their packed workers) and resumed with `dvc repro` gives
the report the uninterrupted study gives: every number of `reports/metrics.json` is the same, save the clock's.

Two fresh clones of this checkout's HEAD run a small digits study (the shipped params, shrunk); in one, the ArcFace
search is killed with SIGKILL once a few trials have finished, then `dvc repro` runs the whole pipeline. The script
prints every number that differs between the two reports and exits 1 if any but a time differs.

    python benchmarks/killed_and_resumed.py            # about 5 minutes on 2 cores
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from optuna.trial import TrialState

from study.results import JOURNAL
from study.storage import journal_storage

REPOSITORY = Path(__file__).resolve().parents[1]


def clone(target: Path, n_trials: int) -> Path:
    subprocess.run(["git", "clone", "-q", str(REPOSITORY), str(target)], check=True)
    params = yaml.safe_load((target / "params.yaml").read_text())
    params["data"].update(dataset="digits", protocol="closed", seeds=None)
    params["model"].update(name="mlp", embedding_size=16)
    params["train"].update(epochs=3, eval_every=4, device="cpu", lr=0.01, objective="accuracy")
    params["search"].update(n_trials=n_trials)
    params["runs"].update(seeds=[0, 1, 2])
    params["analysis"].update(n_bootstrap=200)
    (target / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return target


def dvc(root: Path, *arguments: str) -> None:
    done = subprocess.run(["dvc", *arguments], cwd=root, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"dvc {' '.join(arguments)} failed in {root}:\n{done.stdout}{done.stderr}")


def finished_trials(root: Path) -> int:
    """COMPLETE trials in the clone's journal, read under the writers' lock as any worker reads it."""
    if not (root / JOURNAL).is_file():
        return 0
    storage = journal_storage(root / JOURNAL)
    return sum(trial.state == TrialState.COMPLETE for study in storage.get_all_studies()
               for trial in storage.get_all_trials(study._study_id, deepcopy=False))


def kill_the_search(root: Path, after: int) -> int:
    """Starts the ArcFace search under dvc and kills dvc, the stage and its workers with SIGKILL once `after` trials
    have finished; returns how many had."""
    dvc(root, "repro", "prepare")
    search = subprocess.Popen(["dvc", "repro", "search@arcface"], cwd=root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    while search.poll() is None and finished_trials(root) < after:
        time.sleep(0.1)
    if search.poll() is not None:
        sys.exit("the search finished before it could be killed: give it more trials (--trials)")
    os.killpg(search.pid, signal.SIGKILL)
    search.wait()
    return finished_trials(root)


def leaves(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        return {key: value for name, child in tree.items() for key, value in leaves(child, f"{prefix}{name}.").items()}
    if isinstance(tree, list):
        return {key: value for k, child in enumerate(tree) for key, value in leaves(child, f"{prefix}{k}.").items()}
    return {prefix.rstrip("."): tree}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16, help="the search's budget (default 16)")
    parser.add_argument("--kill-after", type=int, default=4, help="finished trials before the kill (default 4)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="killed-and-resumed-") as scratch:
        whole, killed = (clone(Path(scratch) / name, options.trials) for name in ("whole", "killed"))
        started = time.monotonic()
        kept = kill_the_search(killed, options.kill_after)
        print(f"killed the search (SIGKILL to dvc, its stage and workers) with {kept} of {options.trials} trials "
              "finished; resuming with dvc repro")
        dvc(killed, "repro")
        dvc(whole, "repro")
        reports = [leaves(json.loads((root / "reports" / "metrics.json").read_text())) for root in (whole, killed)]
        # metrics.json is strict JSON (no NaN), so == compares every leaf; a leaf ending in "seconds" is the clock's.
        differing = sorted(key for key in reports[0].keys() | reports[1].keys()
                           if reports[0].get(key) != reports[1].get(key))
        clock = [key for key in differing if key.endswith("seconds")]
        study = [key for key in differing if key not in clock]
        print(f"reports/metrics.json: {len(reports[0])} numbers; {len(reports[0]) - len(differing)} equal, "
              f"{len(clock)} clock readings differ, {len(study)} other numbers differ "
              f"({time.monotonic() - started:.0f} s)")
        for key in differing:
            print(f"  {'clock' if key in clock else 'STUDY'}  {key}: {reports[0].get(key)!r} uninterrupted, "
                  f"{reports[1].get(key)!r} killed and resumed")
    return 1 if study else 0


if __name__ == "__main__":
    sys.exit(main())
