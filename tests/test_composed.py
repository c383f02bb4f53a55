"""Composed many-class sources (Double and Triple MNIST, pairs of items) against what their construction implies."""

import numpy as np
import pytest
import torch

from study.sources import load_dataset, source_of
from study.sources.composed import compose, composed_labels, parse_composed_spec
from study.sources.image_set import ImageSet
from study.splits import split_dataset
from study.sources import labels_only


def numbered_base(classes=4, per_class=5, side=3):
    """A base set whose every pixel of image i is i: a composed image shows which base images it drew."""
    labels = np.repeat(np.arange(classes), per_class)
    images = torch.arange(len(labels), dtype=torch.uint8)[:, None, None, None].expand(-1, 1, side, side).clone()
    return ImageSet(labels, [f"c{k}" for k in range(classes)], images=images)


def drawn(image, side=3):
    """The base image indices a composed image is made of, left to right."""
    return [int(image[0, 0, part * side]) for part in range(image.shape[-1] // side)]


def test_each_class_is_its_tuple_of_base_classes_side_by_side():
    base = numbered_base()
    composed = compose(parse_composed_spec("2:7:base"), base)
    assert composed.num_classes == 16 and len(composed) == 16 * 7
    assert composed.images.shape == (16 * 7, 1, 3, 6)
    assert composed.class_names[6] == "c1+c2"  # lexicographic: class 6 of 4×4 is (1, 2)
    for index in np.flatnonzero(composed.labels == 6):
        first, second = drawn(composed.images[index])
        assert base.labels[first] == 1 and base.labels[second] == 2


def test_a_class_uses_every_base_image_before_repeating_one():
    base = numbered_base(per_class=5)
    composed = compose(parse_composed_spec("2:12:base"), base)
    for label in range(composed.num_classes):
        members = composed.images[composed.labels == label]
        for position in range(2):
            draws = [drawn(image)[position] for image in members]
            assert len(set(draws[:5])) == 5 and len(set(draws[5:10])) == 5  # a permutation, then another


def test_one_part_is_a_subsample_without_duplicates():
    base = numbered_base(classes=3, per_class=6)
    composed = compose(parse_composed_spec("1:4:base"), base)
    assert composed.class_names == base.class_names
    for label in range(3):
        draws = [drawn(image)[0] for image in composed.images[composed.labels == label]]
        assert len(set(draws)) == 4 and all(base.labels[d] == label for d in draws)


def test_a_class_draws_the_same_images_whatever_else_is_asked_for():
    base = numbered_base()
    small, large = (compose(parse_composed_spec(f"2:{n}:base"), base) for n in (3, 9))
    for label in range(16):
        assert torch.equal(small.images[small.labels == label], large.images[large.labels == label][:3])
    assert torch.equal(small.images, compose(parse_composed_spec("2:3:base"), base).images)


def test_labels_only_match_the_composed_set():
    base = numbered_base()
    spec = parse_composed_spec("3:2:base")
    labels, full = composed_labels(spec, base), compose(spec, base)
    assert np.array_equal(labels.labels, full.labels) and labels.class_names == full.class_names


def test_double_mnist_from_mnist5k_has_100_classes_and_splits_by_class():
    double = load_dataset("compose:2:4:mnist5k")
    assert double.num_classes == 100 and double.images.shape == (400, 1, 28, 56)
    assert np.array_equal(labels_only("compose:2:4:mnist5k", None).labels, double.labels)
    splits = split_dataset(double, "open", (0.5, 0.25, 0.25), seed=0)
    names = [set(splits[part].class_names) for part in ("train", "val", "test")]
    assert [len(n) for n in names] == [50, 25, 25] and not (names[0] & names[1] or names[0] & names[2])


@pytest.mark.parametrize("spec, source", [
    ("digits", "digits"), ("mnist5k", "mnist"), ("compose:2:40:mnist5k", "mnist"), ("compose:3:10:mnist5k", "mnist"),
    ("idx:/usr/share/datasets/fashion-mnist", "fashion-mnist"),
    ("compose:2:40:idx:/usr/share/datasets/fashion-mnist/", "fashion-mnist"),
    ("glyphs:100:30", "glyphs"), ("torchvision:MNIST", "mnist"), ("folder:/data/faces", "faces"),
])
def test_composed_sets_share_their_base_source(spec, source):
    assert source_of(spec) == source


@pytest.mark.parametrize("argument, message", [
    ("2:40", "needs <parts>:<instances per class>:<base dataset>"),
    ("two:40:mnist5k", "whole numbers"),
    ("4:40:mnist5k", "parts must be 1 to 3"),
    ("2:0:mnist5k", "at least 1 instance"),
    ("2:4:compose:2:4:mnist5k", "not a composed one"),
    ("3:300:mnist5k", "fewer instances per class"),
])
def test_bad_specs_name_the_fix(argument, message):
    with pytest.raises(ValueError, match=message):
        spec = parse_composed_spec(argument)
        composed_labels(spec, numbered_base(classes=10))
