"""Tests for study.sources.wesnoth on a small data folder the tests write (unit definitions and sprites), and on
Debian's wesnoth-1.16-data where it is installed: advancement lines as classes, frames by their names, the sprite
drawn over grey, and the spec's faults."""

import numpy as np
import pytest
from PIL import Image

from study.sources import labels_only, load_dataset, source_of
from study.sources.wesnoth import BACKGROUND, DEFAULT_ROOT, INSTALL_HINT, MIN_IMAGES, frame, unit_lines

UNITS = {  # file: (id, image, advances_to)
    "elves/Archer.cfg": ("Elvish Archer", "units/elves-wood/archer.png", "Elvish Ranger"),
    "elves/Ranger.cfg": ("Elvish Ranger", "units/elves-wood/ranger.png", "null"),
    "elves/Fighter.cfg": ("Elvish Fighter", "units/elves-wood/fighter.png", "null"),
    "trolls/Troll.cfg": ("Troll", "units/trolls/troll.png", "null"),
    "trolls/Rocklobber.cfg": ("Troll Rocklobber", "units/trolls/troll-rocklobber.png", "null"),
}
FRAMES = {  # image folder: file stems drawn there
    "elves-wood": ["archer", "archer+female", *[f"archer-bow-attack{k}" for k in range(1, 5)],
                   "ranger", *[f"ranger-idle-{k}" for k in range(1, 4)],  # with the Archer's: 10
                   "fighter", *[f"fighter-sword-{k}" for k in range(1, 10)]],  # 10
    "trolls": ["troll", *[f"troll-attack{k}" for k in range(1, 10)],  # 10
               "troll-rocklobber", *[f"troll-rocklobber-{k}" for k in range(1, 5)]],  # 5: too few, left out
}


def data_folder(root):
    for file, (unit, image, advances) in UNITS.items():
        path = root / "units" / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'#textdomain wesnoth-units\n[unit_type]\n    id={unit}\n    image="{image}"\n'
                        f"    advances_to={advances}\n    [attack]\n        image=\"attacks/x.png\"\n    [/attack]\n"
                        "[/unit_type]\n")
    for folder, stems in FRAMES.items():
        (root / "images" / "units" / folder).mkdir(parents=True, exist_ok=True)
        for number, stem in enumerate(stems):
            sprite = Image.new("RGBA", (16, 16), (0, 0, 0, 0))
            sprite.putpixel((number % 16, 0), (200, 10, 10, 255))
            sprite.save(root / "images" / "units" / folder / f"{stem}.png")
    return root


def test_a_class_is_an_advancement_line_and_a_frame_goes_to_its_longest_name(tmp_path):
    lines = unit_lines(data_folder(tmp_path))
    assert list(lines) == ["Elvish Archer", "Elvish Fighter", "Troll"]  # the Rocklobber's 5 frames are too few
    assert {path.stem for path in lines["Elvish Archer"]} == set(FRAMES["elves-wood"][:10])
    assert all(not path.stem.startswith("troll-rocklobber") for path in lines["Troll"])
    assert min(len(paths) for paths in lines.values()) >= MIN_IMAGES


def test_the_labels_are_the_loads_and_a_sprite_is_drawn_over_grey(tmp_path):
    spec = f"wesnoth:16:{data_folder(tmp_path)}"
    planned, loaded = labels_only(spec), load_dataset(spec)
    assert np.array_equal(planned.labels, loaded.labels) and planned.class_names == loaded.class_names
    assert loaded.images.shape == (30, 3, 16, 16) and planned.images.shape[-2:] == (1, 1)
    stem = sorted(f"{stem}.png" for stem in FRAMES["elves-wood"][:10])[0][:-4]  # the line's first file
    column = FRAMES["elves-wood"].index(stem)  # its one red pixel, the rest transparent
    first = loaded.images[0].numpy()
    assert tuple(first[:, 0, column]) == (200, 10, 10) and tuple(first[:, 5, 5]) == BACKGROUND
    assert source_of(spec) == "wesnoth"


def test_a_tall_sprite_is_centred_on_a_square_before_it_is_resized(tmp_path):
    Image.new("RGBA", (8, 16), (0, 0, 255, 255)).save(tmp_path / "tall.png")
    square = frame(tmp_path / "tall.png", 16)
    assert tuple(square[:, 8, 1]) == BACKGROUND and tuple(square[:, 8, 8]) == (0, 0, 255)


def test_without_the_package_the_error_names_the_install_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install wesnoth-1.16-data"):
        labels_only(f"wesnoth:32:{tmp_path}")
    assert "apt-get install wesnoth-1.16-data" in INSTALL_HINT


@pytest.mark.skipif(not DEFAULT_ROOT.is_dir(), reason=INSTALL_HINT)
def test_debians_sprites_give_many_lines_with_upgrades_kept_together():
    lines = unit_lines(DEFAULT_ROOT)
    assert len(lines) >= 50 and min(len(paths) for paths in lines.values()) >= MIN_IMAGES
    archers = {path.stem.split("-")[0].split("+")[0] for path in lines["Elvish Archer"]}
    assert {"archer", "ranger", "marksman", "sharpshooter", "avenger"} <= archers
