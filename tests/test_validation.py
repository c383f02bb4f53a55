"""The validate stage in the pipeline, through `dvc repro`: a folder dataset's images are a dependency of prepare (that
a params change which passes validation reruns nothing else is tested in the null study, tests/test_pipeline.py)."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from study.config import DataConfig
from study.validation import NO_SOURCE_FOLDER, link_source
from conftest import copy_study
from test_bad_inputs import COPIED, dvc, image_folder, params_text

pytestmark = pytest.mark.skipif(shutil.which("dvc") is None or shutil.which("git") is None,
                                reason="dvc and git are needed")


def checkout(root: Path, values: dict) -> Path:
    """A git + DVC checkout of the study's code with the tiny params and `values`."""
    copy_study(root, COPIED)
    (root / "params.yaml").write_text(params_text(values))
    return root


def repro(root: Path, *targets: str) -> set[str]:
    """The stages `dvc repro` ran."""
    done = dvc(root, "repro", *targets)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("'")[1] for line in done.stdout.splitlines() if line.startswith("Running stage")}


def out_of_date(root: Path) -> dict:
    """`dvc status prepare` (prepare and the stages before it) as {stage: what changed}."""
    done = dvc(root, "status", "--json", "--with-deps", "prepare")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_images_added_to_a_folder_dataset_make_validate_and_prepare_out_of_date(tmp_path):
    # three images of each class for val and test: test's 9 images make 18 verification pairs, for its 10 folds
    images = image_folder(tmp_path / "images", classes=3, per_class=12)
    root = checkout(tmp_path / "study", {"data.dataset": f"folder:{images}", "data.image_size": 8,
                                         "train.batch_size": 4})
    assert repro(root, "prepare") == {"validate", "prepare"}
    assert (root / "data" / "source").resolve() == images.resolve()
    assert out_of_date(root) == {}

    shutil.copy(images / "class0" / "0.png", images / "class0" / "new.png")
    changed = out_of_date(root)
    assert set(changed) == {"validate", "prepare"}, changed  # validate checks the images again first
    assert {"changed outs": {"data/source": "modified"}} in changed["validate"]
    assert {"changed deps": {"data/source": "modified"}} in changed["prepare"]
    assert repro(root, "prepare") == {"validate", "prepare"}
    manifest = json.loads(next((root / "data" / "prepared").rglob("manifest.json")).read_text())  # any class split
    assert sum(split["num_samples"] for split in manifest["splits"].values()) == 37


def test_the_source_link_follows_the_dataset_and_never_touches_the_folder(tmp_path):
    images = image_folder(tmp_path / "images")
    before = sorted(images.rglob("*"))
    link = tmp_path / "data" / "source"
    link_source(DataConfig(dataset=f"folder:{images}", image_size=8), link)
    assert link.is_symlink() and link.resolve() == images.resolve()
    link_source(DataConfig(dataset="digits"), link)  # the link goes, the folder stays
    assert not link.is_symlink() and link.read_text() == NO_SOURCE_FOLDER
    assert sorted(images.rglob("*")) == before
    link_source(DataConfig(dataset="folder:/nonexistent/faces", fallback="digits"), link)
    assert link.read_text() == NO_SOURCE_FOLDER  # a missing folder, read from the fallback, is not linked
    link_source(DataConfig(dataset="idx:/etc", fallback="digits"), link)
    assert link.read_text() == NO_SOURCE_FOLDER  # nor a folder without IDX files, which DVC would hash whole
    link.unlink()
    link.mkdir()
    with pytest.raises(FileExistsError, match="move it elsewhere"):
        link_source(DataConfig(dataset="digits"), link)
