"""DVC stage `prepare`: load the dataset named in params, check its images, split it by the protocol once per class
split (data.seeds), check each training split, and write each with a manifest."""

import sys

from study.config import load_params
from study.results import prepared_dir
from study.sources import load_dataset
from study.splits import class_split, save_splits
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
    check_images(image_set, source)  # image files are otherwise first decoded in training
    for split in data.split_seeds():
        split_params = params.for_split(split)
        splits = class_split(image_set, data, split)
        check_training_split(splits["train"], split_params, source)
        # The manifest records which source was asked for and which was used, so the report can say it.
        save_splits(splits, prepared_dir(split), source=source, protocol=data.protocol, seed=split,
                    fractions=data.fractions, requested_source=data.dataset, fallback_reason=fallback_reason,
                    classes_kept=data.classes)
        for name, part in splits.items():
            print(f"split {split}, {name}: {len(part)} images, {part.num_classes} classes")

if __name__ == "__main__":
    main()
