"""Files and params from elsewhere run no code and leak no secrets: a tampered checkpoint, a password in params."""

import contextlib
import os
import pickle
import traceback
from pathlib import Path

import pytest
import torch

import stages.validate
from study.config import ConfigError, ModelConfig, StudyParams
from study.training import build_modules, load_checkpoint

PASSWORD = "s3cr3t-Pa55word"


class WritesAMarker:
    """Unpickling this calls open(marker, 'w'): a stand-in for any code a tampered file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's note on the plain pickle's protocol
@pytest.mark.parametrize("save", [torch.save, lambda state, path: Path(path).write_bytes(pickle.dumps(state))],
                         ids=["torch.save", "plain pickle"])
def test_a_checkpoint_whose_unpickling_runs_code_is_refused_without_running_it(tmp_path, save):
    marker, path = tmp_path / "code_ran", tmp_path / "seed0.pt"
    model, loss = build_modules(ModelConfig(name="mlp", embedding_size=16), "fixed_adacos", {}, 10, (1, 8, 8))
    save({"model": WritesAMarker(marker), "loss": loss.state_dict(), "metadata": {}}, path)

    with pytest.raises(ValueError) as error:
        load_checkpoint(path, model, loss)
    assert not marker.exists()
    message = str(error.value)
    assert str(path) in message and "refused" in message and "dvc repro --force" in message
    assert "weights_only" not in message  # torch's own advice, to load it unsafely, is not passed on

    # The file is live: an unsafe load does run its code (the control that the check above means something).
    with contextlib.suppress(RuntimeError):  # a plain pickle runs its code, then fails torch's magic number check
        torch.load(path, weights_only=False)
    assert marker.exists()


def test_a_database_url_with_a_password_is_refused_without_showing_it(tmp_path, monkeypatch, capsys):
    url = f"postgresql://ann:{PASSWORD}@db.example/study"
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict({"search": {"storage": url}})
    shown = "".join(traceback.format_exception(error.value))  # what a crash would print, its causes included
    assert "search.storage" in shown and "PGPASSWORD" in shown and "env:VARNAME" in shown
    assert PASSWORD not in shown and "db.example" not in shown

    # Through the validate stage, as `dvc repro` runs it: the same refusal, and nothing of the password.
    (tmp_path / "params.yaml").write_text(f"search:\n  storage: {url}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        stages.validate.main()
    assert "carries a password" in str(stopped.value.code) and PASSWORD not in str(stopped.value.code)
    assert PASSWORD not in "".join(capsys.readouterr())
    assert not (tmp_path / "results").exists()  # nothing written, so nothing records the URL either


def test_a_password_given_through_the_environment_is_accepted(monkeypatch):
    monkeypatch.setenv("STUDY_TEST_STORAGE", f"postgresql://ann:{PASSWORD}@db.example/study")
    params = StudyParams.from_dict({"search": {"storage": "env:STUDY_TEST_STORAGE"}})
    assert params.search.storage == "env:STUDY_TEST_STORAGE" and PASSWORD not in str(params.to_dict())
    assert os.environ["STUDY_TEST_STORAGE"].endswith("/study")
