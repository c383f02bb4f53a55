"""DVC stage `prepare`: load the dataset named in params, check its images, split it by the protocol, check the
training split, and write it with a manifest."""

import sys

from study.config import load_params
from study.data import keep_classes, load_dataset, save_splits, split_dataset
from study.results import PREPARED_DIR
from study.validation import check_images, check_training_split


def main() -> None:
    params = load_params()
    data = params.data
    source, fallback_reason = data.dataset, None
    try:
        image_set = load_dataset(data.dataset, cache_dir=data.cache_dir)
    except (RuntimeError, FileNotFoundError) as error:
        if data.fallback is None:
            raise
        source, fallback_reason = data.fallback, str(error)
        print(f"{data.dataset} is unavailable, using data.fallback={data.fallback}: {error}", file=sys.stderr)
        image_set = load_dataset(data.fallback, cache_dir=data.cache_dir)
    if data.classes is not None:
        image_set = keep_classes(image_set, data.classes, seed=data.seed)
    check_images(image_set, source)  # image files are otherwise first decoded in training
    splits = split_dataset(image_set, data.protocol, data.fractions, seed=data.seed)
    check_training_split(splits["train"], params, source)
    # The manifest records which source was asked for and which was used, so the report can say it.
    save_splits(splits, PREPARED_DIR, source=source, protocol=data.protocol, seed=data.seed,
                fractions=data.fractions, requested_source=data.dataset, fallback_reason=fallback_reason,
                classes_kept=data.classes)
    for name, split in splits.items():
        print(f"{name}: {len(split)} images, {split.num_classes} classes")


if __name__ == "__main__":
    main()
