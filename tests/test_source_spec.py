"""Tests for study.sources.spec: the one spec of the generated sources, parsed the same way for glyphs, strokes and
emoji (nothing is drawn)."""

import pytest

from study.sources.emoji import parse_emoji_spec
from study.sources.glyphs import parse_glyph_spec
from study.sources.spec import GeneratedSpec
from study.sources.strokes import MAX_CLASSES, parse_stroke_spec

PARSERS = {"glyphs": (parse_glyph_spec, "glyphs:1000", 28), "strokes": (parse_stroke_spec, "strokes:200:25", 28),
           "emoji": (parse_emoji_spec, "emoji:1000", 32)}
USAGE = "use '{name}:<num_classes>[:<instances per class>[:<image side 28 or 32>]]', e.g. '{example}'"
# Each fault's whole message, as each source wrote it before they shared one parser.
FAULTS = [
    ("", "dataset '{name}' needs an argument, the number of classes: " + USAGE),
    ("1:2:3:4", "bad {name} spec '{name}:1:2:3:4': " + USAGE),
    ("x", "bad {name} spec '{name}:x': num_classes must be an integer, got 'x'; " + USAGE),
    ("1:y", "bad {name} spec '{name}:1:y': instances per class must be an integer, got 'y'; " + USAGE),
    ("1:2:z", "bad {name} spec '{name}:1:2:z': image side must be an integer, got 'z'; " + USAGE),
    ("0", "bad {name} spec '{name}:0': num_classes must be at least 1, got 0"),
    ("1:0", "bad {name} spec '{name}:1:0': instances per class must be at least 1, got 0"),
    ("1:1:30", "bad {name} spec '{name}:1:1:30': image side must be one of 28, 32, got 30"),
]


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("argument, message", FAULTS, ids=[argument or "empty" for argument, _ in FAULTS])
def test_every_generated_source_names_a_bad_field_the_same_way(name, argument, message):
    parse, example, _ = PARSERS[name]
    with pytest.raises(ValueError) as raised:
        parse(argument)
    assert str(raised.value) == message.format(name=name, example=example)


@pytest.mark.parametrize("name", PARSERS)
def test_defaults_fill_the_missing_fields(name):
    parse, _, side = PARSERS[name]
    assert parse(" 7 ") == GeneratedSpec(name, 7, 40, side) == parse("7:40") == parse(f"7:40:{side}")
    assert str(parse("7:3")) == f"{name}:7:3:{side}"


def test_a_class_cap_says_how_many_to_ask_for():
    assert parse_stroke_spec(str(MAX_CLASSES)).num_classes == MAX_CLASSES
    with pytest.raises(ValueError) as raised:
        parse_stroke_spec(str(MAX_CLASSES + 1))
    assert str(raised.value) == (f"bad strokes spec 'strokes:{MAX_CLASSES + 1}': strokes has at most {MAX_CLASSES} "
                                 f"classes, {MAX_CLASSES + 1} were asked for; ask for at most {MAX_CLASSES}")
