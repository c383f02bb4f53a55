"""K runs trained as one model (study/fused.py) against the same K runs trained one at a time by `train`: the same
learning curves and weights to float rounding, for the CNN and the MLP, runs of their own seeds, rates and (s, m)."""

import math

import pytest
import torch

from study.config import ModelConfig, TrainConfig
from study.fused import fusable, fused_forward, train_fused
from study.models import build_model
from study.sources import load_dataset
from study.splits import split_dataset
from study.training import train

CONFIG = TrainConfig(epochs=2, batch_size=64, eval_every=10, eval_points=None, checkpoint="best_val", device="cpu",
                     threads=1)


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)


def assert_same_runs(fused, separate):
    for one, other in zip(fused, separate):
        assert (one.status, one.iterations, one.selected_iteration) == (other.status, other.iterations,
                                                                        other.selected_iteration)
        assert [row["iteration"] for row in one.history] == [row["iteration"] for row in other.history]
        for row, expected in zip(one.history, other.history):
            for key, value in expected.items():
                if not key.endswith("seconds") and not (isinstance(value, float) and math.isnan(value)):
                    assert row[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
        for module, expected in ((one.model, other.model), (one.loss, other.loss)):
            for (name, tensor), (_, reference) in zip(module.state_dict().items(), expected.state_dict().items()):
                torch.testing.assert_close(tensor.float(), reference.float(), rtol=1e-4, atol=1e-5, msg=name)


# The MLP's linear layers keep a bias before batch norm, whose gradient is zero but for rounding; Adam scales that
# rounding to whole steps, so under Adam such a bias agrees with the separate run's only in effect. SGD leaves it as
# small as it is: the MLP is compared under SGD.
@pytest.mark.parametrize("model, loss_name, hyperparameters, optimizer", [
    ("cnn", "arcface", [{"s": 16.0, "m": 0.2}, {"s": 30.0, "m": 0.5}, {"s": 8.0, "m": 0.1}], "adam"),
    ("mlp", "dynamic_adacos", [{}, {}, {}], "sgd"),
])
def test_fused_runs_are_the_runs_trained_one_at_a_time(digits, model, loss_name, hyperparameters, optimizer):
    model_config = ModelConfig(name=model, embedding_size=16)
    configs = [CONFIG.replace(seed=seed, lr=lr * (10 if optimizer == "sgd" else 1), optimizer=optimizer)
               for seed, lr in ((0, 0.01), (1, 0.003), (2, 0.03))]
    separate = [train(digits, loss_name=loss_name, hyperparameters=values, model_config=model_config, config=config,
                      progress=False) for values, config in zip(hyperparameters, configs)]
    fused = train_fused(digits, loss_name=loss_name, hyperparameters=hyperparameters, model_config=model_config,
                        configs=configs)
    assert len({run.history[-1]["map_at_r"] for run in separate}) == 3  # three different runs, not one thrice
    assert_same_runs(fused, separate)


def test_the_fused_forward_pass_is_each_models_own(digits):
    torch.manual_seed(0)
    models = [build_model("cnn", 8, (1, 8, 8)).train() for _ in range(4)]
    images = [torch.rand(5, 1, 8, 8) for _ in models]
    copies = [build_model("cnn", 8, (1, 8, 8)).train() for _ in models]
    for copy, model in zip(copies, models):
        copy.load_state_dict(model.state_dict())
    for output, copy, batch in zip(fused_forward(models, images), copies, images):
        torch.testing.assert_close(output, copy(batch), rtol=1e-5, atol=1e-6)
    # Each model's batch-norm statistics moved by its own batch, as in its own forward pass.
    for model, copy in zip(models, copies):
        torch.testing.assert_close(model[1].running_mean, copy[1].running_mean)
        assert int(model[1].num_batches_tracked) == int(copy[1].num_batches_tracked) == 1


def test_only_runs_that_may_share_one_model_are_fused(digits):
    assert fusable(build_model("cnn", 8, (1, 8, 8))) and fusable(build_model("mlp", 8, (1, 8, 8)))
    assert not fusable(build_model("seed_cnn", 8, (1, 8, 8)))  # dropout's draws would depend on the others
    with pytest.raises(ValueError, match="seed_cnn.*cannot be fused"):
        train_fused(digits, loss_name="softmax", hyperparameters=[{}, {}], model_config=ModelConfig(name="seed_cnn"),
                    configs=[CONFIG, CONFIG.replace(seed=1)])
    with pytest.raises(ValueError, match="these differ: batch_size"):
        train_fused(digits, loss_name="softmax", hyperparameters=[{}, {}], model_config=ModelConfig(name="cnn"),
                    configs=[CONFIG, CONFIG.replace(seed=1, batch_size=32)])
