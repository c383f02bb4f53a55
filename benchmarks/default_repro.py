"""The default study from nothing cached: `dvc repro` in a fresh clone of the repository's HEAD (no data/, results/,
DVC cache or rendered glyphs), timed from outside, and the plateau rule read from the report it writes. The goal:
Fixed AdaCos and tuned ArcFace meet the plateau rule, and the whole job ends within 10 minutes on a 2-core CPU.

    python benchmarks/default_repro.py
    python benchmarks/default_repro.py --own-folder 40:30   # a user's own folder: 40 classes of 30 images each

With --own-folder, the study runs on an image folder of that many classes (glyphs written as PNG files, one folder a
class, as a user's own data would be), the shipped params otherwise: what a user with a small folder gets by default.
Run it on an idle machine: the wall-clock time is the job's, and anything else running slows it. It appends one row
to benchmarks/results/default_repro.csv: the date, the commit, this CPU and its cores, the study's data, class splits
and iterations a run, the job's wall-clock and CPU seconds (every process it started), and each method's rise over
the second half of training, the iterations its runs trained (more than declared where they trained again longer,
runs.plateau_cap) and whether the plateau rule holds (study/plateau.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.config import load_params  # noqa: E402
from study.environment import cpu_model  # noqa: E402
from study.progress import duration  # noqa: E402
from study.sources import load_dataset  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "default_repro.csv"
GOAL_SECONDS = 600
JUDGED = ("fixed_adacos", "arcface_tuned")  # the methods whose convergence the default study's answer needs


def children_cpu_seconds() -> float:
    """User and system seconds of every finished child process (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_folder(root: Path, spec: str) -> Path:
    """`classes:per_class` glyph classes written under `root` as a user's image folder: one sub-folder of PNG files
    a class."""
    classes, per_class = (int(part) for part in spec.split(":"))
    glyphs = load_dataset(f"glyphs:{classes}:{per_class}")
    for index, (image, label) in enumerate(zip(glyphs.images, glyphs.labels)):
        target = root / f"class{int(label):03d}"
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[0].numpy()).save(target / f"{index}.png")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV the row is appended to")
    parser.add_argument("--own-folder", metavar="CLASSES:PER_CLASS",
                        help="run on a folder of that many glyph classes and images a class instead of the default data")
    parser.add_argument("--keep-report", type=Path, metavar="DIR",
                        help="copy the study's reports/ folder here before the clone is deleted")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        clone = Path(folder) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, check=True, capture_output=True,
                                text=True).stdout.strip()
        # An empty home: the glyphs are rendered anew (their cache defaults to ~/.cache/study), as on a fresh machine.
        env = {**os.environ, "HOME": str(Path(folder) / "home")}
        if arguments.own_folder:  # the user's way: the shipped params with their data set by `study preset`
            images = own_folder(Path(folder) / "images", arguments.own_folder)
            subprocess.run([sys.executable, "-m", "study.cli", "preset", "default", "--set",
                            f"data.dataset=folder:{images}", "--set", "data.image_size=28"], cwd=clone, env=env,
                           check=True)
        cpu_before, began = children_cpu_seconds(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=clone, env=env, check=True)
        wall, cpu = time.perf_counter() - began, children_cpu_seconds() - cpu_before
        plateau = pd.read_csv(clone / "reports" / "tables" / "plateau.csv").set_index("method")
        if arguments.keep_report:
            shutil.copytree(clone / "reports", arguments.keep_report, dirs_exist_ok=True)
        params = load_params(str(clone / "params.yaml"), build_losses=False)
    dataset = f"own folder of {arguments.own_folder} glyphs" if arguments.own_folder else params.data.dataset
    row = {"date": datetime.date.today().isoformat(), "commit": commit, "cpu": cpu_model(), "cores": os.cpu_count(),
           "dataset": dataset, "splits": len(params.data.split_seeds()),
           "iterations": int(plateau.loc[JUDGED[0], "last_iteration"]),
           "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1)}
    for method in JUDGED:
        row[f"{method}_rise"] = plateau.loc[method, "rise"]
        row[f"{method}_converged"] = bool(plateau.loc[method, "converged"])
    for method in plateau.index:  # each method's length: the declared one, or longer where it trained again
        row[f"{method}_iterations"] = int(plateau.loc[method, "last_iteration"])
    earlier = pd.read_csv(arguments.out) if arguments.out.is_file() else pd.DataFrame()
    rows = pd.concat([earlier, pd.DataFrame([row])], ignore_index=True)
    lengths = [column for column in rows if column.endswith("_iterations")]  # empty in rows from before they were kept
    rows.astype({column: "Int64" for column in lengths}).to_csv(arguments.out, index=False)
    converged = all(row[f"{method}_converged"] for method in JUDGED)
    rises = ", ".join(f"{method} {row[f'{method}_rise']:+.2%}" for method in JUDGED)
    study = f"the shipped params on {dataset}" if arguments.own_folder else "the default study"
    print(f"{study} from nothing cached: {duration(wall)} of wall-clock ({duration(cpu)} of CPU) on "
          f"{row['cores']} cores of {row['cpu']}; rise over the second half {rises}: "
          f"{'converged' if converged else 'still improving'}"
          + ("" if arguments.own_folder else f"; goal {duration(GOAL_SECONDS)} converged: "
             f"{'met' if converged and wall <= GOAL_SECONDS else 'not met'}"), flush=True)


if __name__ == "__main__":
    main()
