"""Tests for study.sources (real images) and study.splits: protocols, persistence and batching (all offline)."""

import gzip
import hashlib
import json
import os
import struct
import urllib.error

import numpy as np
import pytest
import torch
from PIL import Image

from study.sources import ImageSet, load_dataset
from study.sources import torchvision as torchvision_source
from study.sources.digits import mnist5k_labels
from study.sources.idx import idx_labels
from study.splits import SPLIT_NAMES, batches, load_splits, rgb_image, save_splits, split_counts, split_dataset
from study.results import prepared_dir, prepared_train_sizes


def numbered_set(labels, num_classes=None):
    """An in-memory set whose 2x2 pixels spell each sample's index, so splits can be traced."""
    labels = np.asarray(labels)
    ids = np.arange(len(labels))
    pixels = np.stack([ids % 256, ids // 256, np.zeros_like(ids), np.zeros_like(ids)], axis=1)
    images = torch.from_numpy(pixels.astype(np.uint8).reshape(-1, 1, 2, 2))
    num_classes = num_classes or int(labels.max()) + 1
    return ImageSet(labels, [f"class{c}" for c in range(num_classes)], images=images)


def sample_ids(image_set):
    pixels = image_set.images.reshape(len(image_set), -1).long()
    return pixels[:, 0] + 256 * pixels[:, 1]


def ids_from_floats(images):
    pixels = (images.reshape(len(images), -1) * 255).round().long()
    return pixels[:, 0] + 256 * pixels[:, 1]


@pytest.fixture
def twelve_classes():
    # Uneven class sizes so stratification is actually exercised.
    return numbered_set(np.repeat(np.arange(12), [10 + 3 * c for c in range(12)]))


# --------------------------------------------------------------------------- sources

def test_digits_matches_scikit_learn_scaled_to_bytes():
    from sklearn.datasets import load_digits

    digits = load_dataset("digits")
    reference = load_digits()
    assert digits.images.shape == (1797, 1, 8, 8) and digits.images.dtype == torch.uint8
    assert digits.num_classes == 10 and len(digits) == 1797 and digits.input_shape == (1, 8, 8)
    np.testing.assert_array_equal(digits.labels, reference.target)
    expected = np.round(reference.images / 16 * 255)
    np.testing.assert_array_equal(digits.images[:, 0].numpy(), expected)
    assert digits.images.max() == 255


def test_mnist5k_has_500_images_per_class():
    mnist = load_dataset("mnist5k")
    assert mnist.images.shape == (5000, 1, 28, 28) and mnist.images.dtype == torch.uint8
    assert mnist.labels.dtype == np.int64 and mnist.num_classes == 10
    assert np.bincount(mnist.labels).tolist() == [500] * 10
    # What validation plans splits with, instead of parsing the CSV: the same classes and sizes.
    labels_only = mnist5k_labels("")
    assert labels_only.class_names == mnist.class_names
    assert np.bincount(labels_only.labels).tolist() == np.bincount(mnist.labels).tolist()
    assert mnist.images.max() == 255 and mnist.images.float().mean() > 20  # real strokes, not blank


def test_unknown_spec_lists_known_names():
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'") as error:
        load_dataset("imagenet")
    for name in ("digits", "mnist5k", "idx", "torchvision", "folder", "glyphs"):
        assert name in str(error.value)
    with pytest.raises(ValueError, match="takes no argument"):
        load_dataset("digits:extra")
    with pytest.raises(ValueError, match="needs an argument"):
        load_dataset("idx")


def write_idx(path, array, compress):
    codes = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}
    header = bytes([0, 0, codes[array.dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_folder_round_trip_concatenates_train_and_test(tmp_path, compress):
    rng = np.random.default_rng(1)
    train_images = rng.integers(0, 256, (7, 5, 4), dtype=np.uint8)
    test_images = rng.integers(0, 256, (3, 5, 4), dtype=np.uint8)
    train_labels, test_labels = np.array([0, 1, 2, 3, 0, 1, 2], np.uint8), np.array([3, 2, 1], np.uint8)
    suffix = ".gz" if compress else ""
    write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", train_images, compress)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", train_labels, compress)
    write_idx(tmp_path / f"t10k-images-idx3-ubyte{suffix}", test_images, compress)
    write_idx(tmp_path / f"t10k-labels-idx1-ubyte{suffix}", test_labels, compress)

    loaded = load_dataset(f"idx:{tmp_path}")
    assert loaded.images.shape == (10, 1, 5, 4)
    np.testing.assert_array_equal(loaded.images[:, 0].numpy(), np.concatenate([train_images, test_images]))
    np.testing.assert_array_equal(loaded.labels, np.concatenate([train_labels, test_labels]))
    assert loaded.class_names == ["0", "1", "2", "3"]


@pytest.mark.parametrize("compress", [True, False])
def test_truncated_or_foreign_idx_file_is_named(tmp_path, compress):
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(6, np.uint8), compress=False)
    images = tmp_path / ("train-images-idx3-ubyte.gz" if compress else "train-images-idx3-ubyte")
    write_idx(images, np.zeros((6, 4, 4), np.uint8), compress)
    images.write_bytes(images.read_bytes()[:-10])
    with pytest.raises(ValueError, match="truncated") as error:
        load_dataset(f"idx:{tmp_path}")
    assert str(images) in str(error.value)

    images.write_bytes(b"\x89PNG not an idx file at all")
    with pytest.raises(ValueError, match="not an IDX file") as error:
        load_dataset(f"idx:{tmp_path}")
    assert str(images) in str(error.value)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_labels_are_read_without_the_images_and_the_sizes_checked(tmp_path, compress):
    rng = np.random.default_rng(0)
    labels = {"train": rng.integers(0, 4, 7).astype(np.uint8), "t10k": rng.integers(0, 4, 3).astype(np.uint8)}
    suffix = ".gz" if compress else ""
    for prefix, part in labels.items():
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte{suffix}", part, compress)
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte{suffix}", np.zeros((len(part), 4, 5), np.uint8), compress)
    planned, loaded = idx_labels(str(tmp_path)), load_dataset(f"idx:{tmp_path}")
    np.testing.assert_array_equal(planned.labels, loaded.labels)
    assert planned.class_names == loaded.class_names and planned.images.shape == (10, 1, 1, 1)

    images = tmp_path / f"t10k-images-idx3-ubyte{suffix}"
    images.write_bytes(images.read_bytes()[:-6])
    with pytest.raises(ValueError, match="truncated or corrupt|corrupt or truncated") as error:
        idx_labels(str(tmp_path))
    assert str(images) in str(error.value)


def test_idx_folder_missing_or_empty(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(f"idx:{tmp_path / 'nowhere'}")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_dataset(f"idx:{tmp_path}")


def test_torchvision_offline_explains_how_to_proceed(tmp_path, monkeypatch):
    import torchvision.datasets

    class OfflineMNIST(torchvision.datasets.MNIST):
        def __init__(self, root, train=True, download=False, **kwargs):
            raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torchvision.datasets, "MNIST", OfflineMNIST)
    with pytest.raises(RuntimeError) as error:
        load_dataset("torchvision:MNIST", cache_dir=str(tmp_path))
    message = str(error.value)
    for expected in ("could not download", "offline", str(tmp_path), "idx:<folder>", "mnist5k"):
        assert expected in message
    with pytest.raises(ValueError, match="FashionMNIST"):
        load_dataset("torchvision:NoSuchSet", cache_dir=str(tmp_path))


@pytest.mark.parametrize("name", ["MNIST", "FashionMNIST", "CIFAR10", "NoSuchSet", "mnist", "VisionDataset",
                                  "wrap_dataset_for_transforms_v2", "__file__"])
def test_torchvision_names_are_told_without_importing_it_as_torchvision_itself_tells_them(name):
    try:
        torchvision_source.torchvision_dataset(name)
        known = True
    except ValueError:
        known = False
    if known and name != "VisionDataset":  # the base class is exported, and prepare's load would refuse to build it
        torchvision_source.check_torchvision_name(name)
    elif not known:
        with pytest.raises(ValueError, match=f"torchvision has no dataset '{name}'"):
            torchvision_source.check_torchvision_name(name)


def test_torchvision_arrays_become_uint8_nchw_with_class_names(tmp_path, monkeypatch):
    import torchvision.datasets

    rng = np.random.default_rng(0)
    parts = {True: rng.integers(0, 256, (4, 5, 6, 3), dtype=np.uint8),
             False: rng.integers(0, 256, (2, 5, 6, 3), dtype=np.uint8)}

    class ChannelsLastSet(torchvision.datasets.VisionDataset):  # stored like CIFAR-10
        classes = ["cat", "dog", "emu"]

        def __init__(self, root, train=True, download=False):
            super().__init__(root)
            self.data, self.targets = parts[train], [0, 1, 2, 1][: len(parts[train])]

    monkeypatch.setattr(torchvision.datasets, "ChannelsLastSet", ChannelsLastSet, raising=False)
    loaded = load_dataset("torchvision:ChannelsLastSet", cache_dir=str(tmp_path))
    assert loaded.images.shape == (6, 3, 5, 6) and loaded.images.dtype == torch.uint8
    expected = np.concatenate([parts[True], parts[False]]).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(loaded.images.numpy(), expected)
    assert loaded.labels.tolist() == [0, 1, 2, 1, 0, 1] and loaded.class_names == ["cat", "dog", "emu"]


def write_png(path, color, size):
    Image.new("RGB", size, color).save(path)


@pytest.fixture
def image_folder(tmp_path):
    root = tmp_path / "faces"
    for name, color in [("alice", (255, 0, 0)), ("bob", (0, 0, 255)), ("carol", (0, 255, 0))]:
        (root / name).mkdir(parents=True)
        for index in range(3):
            write_png(root / name / f"{index}.png", color, (5 + index, 7))
    (root / "bob" / "notes.txt").write_text("not an image")
    Image.new("L", (6, 6), 128).save(root / "carol" / "grey.JPG")  # upper-case suffix, greyscale
    return root


def test_folder_source_loads_and_batches_through_dataloader(image_folder):
    faces = load_dataset(f"folder:{image_folder}")
    assert faces.class_names == ["alice", "bob", "carol"]
    assert len(faces) == 10 and faces.input_shape is None and faces.images is None
    assert np.bincount(faces.labels).tolist() == [3, 3, 4]

    seen = []
    for images, labels in batches(faces, 4, device="cpu", image_size=6):
        assert images.dtype == torch.float32 and images.shape[1:] == (3, 6, 6)
        assert labels.dtype == torch.int64 and 0 <= images.min() and images.max() <= 1
        for image, label in zip(images, labels):
            dominant = image.mean(dim=(1, 2))
            if label == 0:
                assert dominant.argmax() == 0  # alice is red
            elif label == 1:
                assert dominant.argmax() == 2  # bob is blue
        seen += labels.tolist()
    assert sorted(seen) == sorted(faces.labels.tolist())

    with pytest.raises(ValueError, match="image_size"):
        batches(faces, 4, device="cpu")


def test_folder_source_errors_say_what_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(f"folder:{tmp_path / 'missing'}")
    with pytest.raises(ValueError, match="no class sub-folders"):
        load_dataset(f"folder:{tmp_path}")
    (tmp_path / "dave").mkdir()
    write_png(tmp_path / "dave" / "a.png", (1, 2, 3), (4, 4))
    (tmp_path / "eve").mkdir()
    (tmp_path / "eve" / "readme.txt").write_text("x")
    with pytest.raises(ValueError, match="no images") as error:
        load_dataset(f"folder:{tmp_path}")
    assert "eve" in str(error.value)


def test_sixteen_bit_greyscale_is_scaled_to_eight_bits_not_clipped(tmp_path):
    levels = np.array([[0, 257, 32896], [51400, 65278, 65535], [0, 0, 0]], dtype=np.uint16)  # 257 × 0, 1, 128, ...
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        Image.fromarray(levels).save(tmp_path / name / "deep.png")  # a 16-bit greyscale PNG
    assert Image.open(tmp_path / "a" / "deep.png").mode.startswith("I")
    deep = load_dataset(f"folder:{tmp_path}")
    images, _ = next(batches(deep, 2, device="cpu", image_size=3))
    pixels = np.rint(images[0].numpy() * 255).astype(int)
    assert (pixels == pixels[0]).all()  # grey: one value in each of R, G, B
    assert pixels[0, :2].tolist() == [[0, 1, 128], [200, 254, 255]]


def test_images_of_float_pixels_are_refused_by_name():
    image = Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32))
    with pytest.raises(ValueError, match="holds floating-point pixels.*8- or 16-bit"):
        rgb_image(image, "scan.tif")


@pytest.mark.parametrize("source", ["folder", "idx"])
def test_a_fifo_in_a_dataset_folder_is_refused_before_anything_reads_it(image_folder, tmp_path, source):
    if source == "idx":
        write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(2, np.uint8), compress=False)
        write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((2, 4, 4), np.uint8), compress=False)
        folder, fifo = tmp_path, tmp_path / "readme.png"
    else:
        folder, fifo = image_folder, image_folder / "alice" / "3.png"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file") as error:
        load_dataset(f"{source}:{folder}")
    assert str(fifo) in str(error.value) and "remove it or move it out" in str(error.value)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_unreadable_image_is_named(image_folder, num_workers):
    broken = image_folder / "bob" / "broken.png"
    broken.write_bytes(b"these bytes are not a PNG")
    faces = load_dataset(f"folder:{image_folder}")
    with pytest.raises(OSError, match="broken.png"):
        list(batches(faces, 4, device="cpu", image_size=4, num_workers=num_workers))


# --------------------------------------------------------------------------- protocols

def test_closed_split_is_stratified_disjoint_and_keeps_label_ids(twelve_classes):
    splits = split_dataset(twelve_classes, "closed", (0.6, 0.2, 0.2), seed=3)
    ids = {name: set(sample_ids(part).tolist()) for name, part in splits.items()}
    assert sum(map(len, ids.values())) == len(set.union(*ids.values())) == len(twelve_classes)  # a partition
    class_sizes = np.bincount(twelve_classes.labels)
    for name, fraction in zip(("train", "val", "test"), (0.6, 0.2, 0.2)):
        part = splits[name]
        assert part.class_names == twelve_classes.class_names and part.num_classes == 12
        assert set(part.labels.tolist()) == set(range(12))
        # Each sample keeps its original label, and each class gets its share to within one.
        np.testing.assert_array_equal(part.labels, twelve_classes.labels[sample_ids(part).numpy()])
        assert np.all(np.abs(np.bincount(part.labels, minlength=12) - fraction * class_sizes) <= 1)


def test_closed_split_is_the_class_by_class_split_it_replaced(twelve_classes):
    """One sort instead of a pass over the labels per class: the same members, permuted by the same draws."""
    rng, labels = np.random.default_rng(3), twelve_classes.labels
    reference = [[], [], []]
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        counts = split_counts(len(members), (0.5, 0.25, 0.25))
        for part, chunk in zip(reference, np.split(members, np.cumsum(counts)[:-1])):
            part.append(chunk)
    splits = split_dataset(twelve_classes, "closed", (0.5, 0.25, 0.25), seed=3)
    for name, part in zip(SPLIT_NAMES, reference):
        assert sample_ids(splits[name]).tolist() == np.sort(np.concatenate(part)).tolist()


def test_closed_split_is_deterministic_per_seed(twelve_classes):
    def test_ids(seed):
        return sample_ids(split_dataset(twelve_classes, "closed", seed=seed)["test"]).tolist()

    assert test_ids(0) == test_ids(0)
    assert test_ids(0) != test_ids(1)


def test_open_split_has_disjoint_class_sets_relabelled(twelve_classes):
    splits = split_dataset(twelve_classes, "open", (0.5, 0.25, 0.25), seed=5)
    names = {name: set(part.class_names) for name, part in splits.items()}
    assert [len(names[name]) for name in ("train", "val", "test")] == [6, 3, 3]
    assert sum(map(len, names.values())) == 12  # disjoint ...
    assert set.union(*names.values()) == set(twelve_classes.class_names)  # ... and covering
    for part in splits.values():
        assert part.class_names == sorted(part.class_names, key=twelve_classes.class_names.index)
        assert set(part.labels.tolist()) == set(range(part.num_classes))
        original = twelve_classes.labels[sample_ids(part).numpy()]
        names_after = [part.class_names[label] for label in part.labels]
        assert names_after == [twelve_classes.class_names[label] for label in original]
    assert sum(len(part) for part in splits.values()) == len(twelve_classes)


def test_open_split_is_deterministic_per_seed(twelve_classes):
    def class_sets(seed):
        splits = split_dataset(twelve_classes, "open", seed=seed)
        return {name: part.class_names for name, part in splits.items()}

    assert class_sets(7) == class_sets(7)
    assert class_sets(7) != class_sets(8)


@pytest.mark.slow
def test_splits_are_the_same_in_another_process_with_another_hash_seed():
    """What the prepare stage writes on one machine, a worker on another must get from the same params."""
    import os
    import subprocess
    import sys

    script = ("import json; from study.sources import load_dataset; from study.splits import split_dataset; "
              "d = load_dataset('digits'); "
              "c = split_dataset(d, 'closed', seed=3)['test']; o = split_dataset(d, 'open', seed=3); "
              "print(json.dumps([c.labels.tolist(), c.images.sum(dim=(1, 2, 3)).tolist(), "
              "{k: v.class_names for k, v in o.items()}]))")
    outputs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed}).stdout for hash_seed in ("1", "2")}
    assert len(outputs) == 1 and len(outputs.pop()) > 1000


def test_keeping_classes_is_seeded_nested_and_relabelled(twelve_classes):
    from study.splits import keep_classes

    kept = {count: keep_classes(twelve_classes, count, seed=4) for count in (3, 5, 12)}
    assert [part.num_classes for part in kept.values()] == [3, 5, 12]
    assert set(kept[3].class_names) < set(kept[5].class_names) < set(kept[12].class_names)
    assert set(kept[12].class_names) == set(twelve_classes.class_names)
    assert kept[5].class_names == keep_classes(twelve_classes, 5, seed=4).class_names  # same seed, same classes
    assert any(keep_classes(twelve_classes, 5, seed=seed).class_names != kept[5].class_names for seed in range(5))
    for part in kept.values():  # every image of a kept class, none of the others, labels 0..k-1
        original = twelve_classes.labels[sample_ids(part).numpy()]
        assert [part.class_names[label] for label in part.labels] == [twelve_classes.class_names[o] for o in original]
        assert len(part) == np.isin(twelve_classes.class_names, part.class_names)[twelve_classes.labels].sum()
    with pytest.raises(ValueError, match="data.classes=13: the source has 12 classes"):
        keep_classes(twelve_classes, 13)


def test_split_rejects_bad_requests(twelve_classes):
    with pytest.raises(ValueError, match="unknown protocol 'ajar'"):
        split_dataset(twelve_classes, "ajar")
    with pytest.raises(ValueError, match="summing to 1"):
        split_dataset(twelve_classes, "closed", (0.6, 0.3, 0.3))
    with pytest.raises(ValueError, match="class 'class1' has 2 samples"):
        split_dataset(numbered_set([0] * 10 + [1] * 2), "closed")
    with pytest.raises(ValueError, match="at least 2 classes") as error:
        split_dataset(numbered_set(np.arange(5).repeat(3)), "open")
    assert "this set has 5" in str(error.value)


def test_image_set_subset_and_validation():
    image_set = numbered_set([0, 2, 2, 3, 1])
    kept = image_set.subset([1, 3, 2], relabel=True)
    assert kept.labels.tolist() == [0, 1, 0] and kept.class_names == ["class2", "class3"]
    assert image_set.subset([1, 3], relabel=False).class_names == image_set.class_names
    with pytest.raises(ValueError, match="exactly one"):
        ImageSet(np.zeros(1), ["a"])
    with pytest.raises(ValueError, match="labels must lie"):
        ImageSet(np.array([0, 1]), ["a"], paths=["x.png", "y.png"])


# --------------------------------------------------------------------------- persistence

def test_save_and_load_round_trip_with_manifest(tmp_path, twelve_classes):
    splits = split_dataset(twelve_classes, "open", seed=2)
    manifest = save_splits(splits, tmp_path, source="digits", protocol="open", seed=2,
                           fractions=(0.6, 0.2, 0.2))
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    assert manifest["source"] == "digits" and manifest["seed"] == 2 and manifest["fractions"] == [0.6, 0.2, 0.2]
    loaded = load_splits(tmp_path)
    for name, part in splits.items():
        entry = manifest["splits"][name]
        assert entry["sha256"] == hashlib.sha256((tmp_path / f"{name}.pt").read_bytes()).hexdigest()
        assert (entry["num_samples"], entry["num_classes"]) == (len(part), part.num_classes)
        assert entry["class_names"] == part.class_names
        assert torch.equal(loaded[name].images, part.images)
        np.testing.assert_array_equal(loaded[name].labels, part.labels)
        assert loaded[name].class_names == part.class_names
    assert not list(tmp_path.glob("*.tmp"))


def test_the_prepared_training_sizes_are_the_splits_written_or_none_while_one_is_missing(tmp_path, twelve_classes,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    written = []
    for seed in (0, 3):
        splits = split_dataset(twelve_classes, "open", seed=seed)
        save_splits(splits, prepared_dir(seed), source="digits", protocol="open", seed=seed, fractions=(0.6, 0.2, 0.2))
        written.append(len(splits["train"]))
    assert prepared_train_sizes([0, 3]) == written
    assert prepared_train_sizes([0, 1, 3]) is None  # split 1 not prepared: the study's iterations are unknown


def test_folder_splits_round_trip_as_paths(tmp_path, image_folder):
    splits = split_dataset(load_dataset(f"folder:{image_folder}"), "closed", (0.34, 0.33, 0.33))
    save_splits(splits, tmp_path / "out", source="folder", protocol="closed", seed=0,
                fractions=(0.34, 0.33, 0.33))
    assert load_splits(tmp_path / "out")["val"].paths == splits["val"].paths


def test_tampered_or_missing_split_file_is_detected(tmp_path, twelve_classes):
    splits = split_dataset(twelve_classes, "closed")
    save_splits(splits, tmp_path, source="x", protocol="closed", seed=0, fractions=(0.6, 0.2, 0.2))
    tampered = splits["val"].subset(np.arange(len(splits["val"]) - 1), relabel=False)
    torch.save({"labels": torch.from_numpy(tampered.labels), "class_names": tampered.class_names,
                "images": tampered.images, "paths": None}, tmp_path / "val.pt")
    with pytest.raises(ValueError, match="checksum.*rerun the prepare stage") as error:
        load_splits(tmp_path)
    assert "val.pt" in str(error.value)
    (tmp_path / "val.pt").unlink()
    with pytest.raises(FileNotFoundError, match="rerun the prepare stage"):
        load_splits(tmp_path)


# --------------------------------------------------------------------------- batching

def test_batches_cover_each_sample_once_with_values_in_unit_range():
    image_set = numbered_set(np.arange(103) % 4)
    seen = []
    generator = torch.Generator().manual_seed(0)
    for images, labels in batches(image_set, 16, device="cpu", shuffle=True, generator=generator):
        assert images.dtype == torch.float32 and labels.dtype == torch.int64
        assert images.shape[1:] == (1, 2, 2) and 0 <= images.min() and images.max() <= 1
        ids = ids_from_floats(images)
        assert labels.tolist() == (ids % 4).tolist()  # labels travel with their images
        seen += ids.tolist()
    assert sorted(seen) == list(range(103)) and seen != list(range(103))

    sizes = [len(labels) for _, labels in batches(image_set, 16, device="cpu", drop_last=True)]
    assert sizes == [16] * 6
    unshuffled = torch.cat([ids_from_floats(images) for images, _ in batches(image_set, 50, device="cpu")])
    assert unshuffled.tolist() == list(range(103))


def test_batches_shuffle_deterministically_with_a_seeded_generator():
    image_set = numbered_set(np.zeros(64, dtype=int))

    def epoch_order(generator):
        epoch = batches(image_set, 10, device="cpu", shuffle=True, generator=generator)
        return torch.cat([ids_from_floats(images) for images, _ in epoch]).tolist()

    assert epoch_order(torch.Generator().manual_seed(4)) == epoch_order(torch.Generator().manual_seed(4))
    assert epoch_order(torch.Generator().manual_seed(4)) != epoch_order(torch.Generator().manual_seed(5))
    generator = torch.Generator().manual_seed(4)
    assert epoch_order(generator) != epoch_order(generator)  # each epoch draws a fresh permutation


def test_batches_resize_in_memory_images_on_request():
    digits = numbered_set(np.arange(5) % 2)
    images, _ = next(batches(digits, 5, device="cpu", image_size=8))
    assert images.shape == (5, 1, 8, 8) and 0 <= images.min() and images.max() <= 1
