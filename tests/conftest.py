"""What several test modules share: a copy of the study's code in a fresh git checkout, for DVC to run."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUDY_FILES = ["dvc.yaml", "params.yaml", "stages", "study", ".dvc/config", ".dvc/plots", ".dvcignore",
               "reports/plots_template.html"]


def copy_study(root: Path, names=STUDY_FILES) -> Path:
    """The study's code (and the shipped params.yaml) copied into `root`, made a git repository."""
    for name in names:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root



def dvc_study(root: Path, names, *, init: bool = True) -> Path:
    """`names` of the study copied into `root`, made a git + DVC repository, or (`init=False`, no git needed) a folder
    with only the .dvc folder that `study sweep` and `study benchmark` look for."""
    root.mkdir(parents=True, exist_ok=True)
    if init:
        copy_study(root, names)
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True,
                       env={**os.environ, "DVC_NO_ANALYTICS": "1"})
        return root
    for name in names:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, root / name)
    (root / ".dvc").mkdir()
    return root
