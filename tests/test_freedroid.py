"""Tests for study.sources.freedroid on a small graphics folder the tests write, and on Debian's freedroidrpg-data
where it is installed: a model and its numbered variants as one class, a droid's number never taken for a variant,
the placeholder and small models left out, the views centred on black, and the spec's faults."""

import numpy as np
import pytest
from PIL import Image

from study.sources import image_shape, labels_only, load_dataset, source_of
from study.sources.freedroid import DEFAULT_ROOT, INSTALL_HINT, MIN_IMAGES, model_class, model_classes

MODELS = {"items/armours/basic": 12, "items/armours/basic2": 12, "items/drinking_mug_2": 10, "droids/123": 11,
          "droids/124": 11, "items/NONE_AVAILABLE_YET": 12, "items/tiny": 5}


def graphics(root):
    for model, views in MODELS.items():
        (root / model).mkdir(parents=True)
        for view in range(1, views + 1):
            image = Image.new("RGB", (8, 16), (0, 0, 0))
            image.paste((view * 10, 200, 30), (2, 6, 6, 10))  # a 4×4 patch: JPEG keeps its colour
            image.save(root / model / f"portrait_{view:04d}.jpg", quality=100)
        (root / model / "ingame.png").write_bytes(b"")  # not a view
    return root


def test_a_class_is_a_model_with_its_numbered_variants(tmp_path):
    classes = model_classes(graphics(tmp_path))
    assert {name: len(views) for name, views in classes.items()} == {
        "droids/123": 11, "droids/124": 11, "items/armours/basic": 24, "items/drinking_mug": 10}
    assert min(map(len, classes.values())) >= MIN_IMAGES
    assert model_class(tmp_path / "droids" / "999", tmp_path) == "droids/999"


def test_the_labels_are_the_loads_and_a_view_is_centred_on_black(tmp_path):
    spec = f"freedroid:16:{graphics(tmp_path)}"
    planned, loaded = labels_only(spec), load_dataset(spec)
    assert np.array_equal(planned.labels, loaded.labels) and planned.class_names == loaded.class_names
    assert loaded.images.shape == (56, 3, 16, 16) and image_shape(spec) == (16, 16)
    first = loaded.images[0].numpy()  # 8×16 centred on a 16×16 square: 4 black columns either side
    assert first[:, :, :4].max() <= 8 and first[:, 8, 8].tolist() == pytest.approx([10, 200, 30], abs=16)
    assert source_of(spec) == "freedroid"


def test_without_the_package_the_error_names_the_install_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install freedroidrpg-data"):
        labels_only(f"freedroid:32:{tmp_path}")


@pytest.mark.skipif(not DEFAULT_ROOT.is_dir(), reason=INSTALL_HINT)
def test_debians_models_give_many_classes_of_many_views():
    classes = model_classes(DEFAULT_ROOT)
    assert len(classes) >= 100 and min(map(len, classes.values())) >= MIN_IMAGES
    assert len({view.parent for view in classes["items/armours/basic"]}) >= 2  # its recoloured variants with it
