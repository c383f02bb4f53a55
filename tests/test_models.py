"""Backbones: output shapes, seed 003's parameter count, gradient flow, timm wrapping, errors."""

import pytest
import timm
import torch

from study.models import build_model, model_names

EMBEDDING = 16
TINY_TIMM = "timm/test_resnet"  # timm's own 0.4M-parameter test ResNet; built without weights


@pytest.mark.parametrize("name", model_names())
def test_registered_backbones_embed_28x28_grey_images(name):
    model = build_model(name, EMBEDDING, (1, 28, 28))
    assert model(torch.rand(4, 1, 28, 28)).shape == (4, EMBEDDING)


@pytest.mark.parametrize("name", ["cnn", "mlp", "seed_cnn"])
def test_backbones_embed_8x8_digits(name):
    model = build_model(name, EMBEDDING, (1, 8, 8))
    assert model(torch.rand(4, 1, 8, 8)).shape == (4, EMBEDDING)


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 5, 7), (1, 1, 1)])
def test_cnn_takes_any_image_size(shape):
    assert build_model("cnn", EMBEDDING, shape)(torch.rand(2, *shape)).shape == (2, EMBEDDING)


@pytest.mark.parametrize("embedding_size", [2, 128])
def test_seed_cnn_has_the_parameter_count_of_the_mnist_example_network(embedding_size):
    d = embedding_size
    # conv 1->32 3x3, conv 32->64 3x3, dense 64*12*12->128, dense 128->d (weights + biases).
    expected = (9 * 32 + 32) + (9 * 32 * 64 + 64) + (9216 * 128 + 128) + (128 * d + d)
    model = build_model("seed_cnn", d, (1, 28, 28))
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize("name", [*model_names(), TINY_TIMM])
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    size = 32 if name.startswith("timm/") else 28
    model = build_model(name, EMBEDDING, (1, size, size)).train()
    model(torch.rand(4, 1, size, size)).square().sum().backward()
    parameters = dict(model.named_parameters())
    for parameter_name, parameter in parameters.items():
        assert parameter.grad is not None, parameter_name
        # timm ResNets zero-initialise each block's last BatchNorm, so the convolutions
        # inside a block get exactly zero gradient on the first step; ours must not.
        if not name.startswith("timm/"):
            assert parameter.grad.abs().sum() > 0, parameter_name
    first_layer = next(iter(parameters.values()))  # the farthest from the loss
    assert first_layer.grad.abs().sum() > 0


@pytest.mark.parametrize("name, published_mean, published_std", [
    ("test_resnet", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # Inception-style statistics
    ("resnet10t", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # ImageNet statistics
])
def test_timm_backbone_normalises_grey_images_with_its_config_statistics(name, published_mean,
                                                                         published_std):
    torch.manual_seed(0)
    model = build_model(f"timm/{name}", EMBEDDING, (1, 32, 32)).eval()
    assert model.mean.flatten().tolist() == pytest.approx(published_mean)
    assert model.std.flatten().tolist() == pytest.approx(published_std)
    images = torch.rand(2, 1, 32, 32)
    embeddings = model(images)
    assert embeddings.shape == (2, EMBEDDING)
    # Independent path: repeat grey to RGB, normalise by hand, run body and projection.
    mean = torch.tensor(published_mean).view(1, 3, 1, 1)
    std = torch.tensor(published_std).view(1, 3, 1, 1)
    expected = model.projection(model.body((images.repeat(1, 3, 1, 1) - mean) / std))
    torch.testing.assert_close(embeddings, expected)
    # The classifier is gone: the body returns pooled features, not 1000 class logits.
    assert model.body(torch.rand(2, 3, 32, 32)).shape == (2, model.projection.in_features)


def test_unknown_model_lists_the_known_names():
    with pytest.raises(ValueError) as error:
        build_model("resnet", EMBEDDING, (1, 28, 28))
    for known in [*model_names(), "timm/<model_name>"]:
        assert known in str(error.value)


def test_unknown_timm_model_is_rejected_by_name():
    with pytest.raises(ValueError, match="unknown timm model 'resnet10000'"):
        build_model("timm/resnet10000", EMBEDDING, (1, 32, 32))


def test_pretrained_weights_offline_raise_an_actionable_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(timm, "create_model", offline)  # never touch the network
    with pytest.raises(RuntimeError) as error:
        build_model(TINY_TIMM, EMBEDDING, (1, 32, 32), pretrained=True)
    message = str(error.value)
    for needed in ["test_resnet", "could not be downloaded", "offline", "HF_HUB_OFFLINE=1",
                   "pretrained: false"]:
        assert needed in message
    assert isinstance(error.value.__cause__, ConnectionError)


@pytest.mark.parametrize("embedding_size, input_shape", [
    (0, (1, 28, 28)), (-3, (1, 28, 28)), (8, (28, 28)), (8, (1, 28, 28, 1)), (8, (1, 0, 28)),
])
def test_invalid_sizes_are_rejected(embedding_size, input_shape):
    with pytest.raises(ValueError):
        build_model("cnn", embedding_size, input_shape)
