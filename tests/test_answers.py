"""docs/answers.md quotes the reports: every number of a paragraph or bullet that names a report (a link to a
report.md or details.md, or a page under benchmarks/results/) appears in that report, as do the numbers of a
blockquote, or of a paragraph speaking of "the report", after it. Minus signs (− or -), thin spaces and thousands separators are read
alike; a sign the answers print must be the report's."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ANSWERS = REPO / "docs" / "answers.md"

NAMED_REPORT = re.compile(r"\]\(([^)\s]*(?:report|details)\.md)\)|(?<![\w/.])(benchmarks/results/[\w/.-]+\.md)")
NUMBER = re.compile(r"(?<![\w.·])([−+-]?)(\d{1,3}(?:[,\u2009\u202f]\d{3})+|\d+)(\.\d+)?(?!\w)")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|\bat \d{7}\b")  # "written at d128959", "at 4298787"

# Numbers a paragraph that names a report states without quoting it: how the report was made, or a figure of another
# report. Each is checked to be still so (absent from the report named, present in the answers), so this list
# cannot outlive the sentence it excuses.
NOT_QUOTED: dict[tuple[str, str], str] = {}


def numbers(text: str) -> list[str]:
    """Every number of `text` as one spelling: '-0.0157', '20000', '13.8' (a leading + dropped)."""
    text = text.replace("−", "-")
    return [("-" if sign == "-" else "") + re.sub(r"[,\u2009\u202f]", "", whole) + (fraction or "")
            for sign, whole, fraction in NUMBER.findall(text)]


def quoted_numbers(block: str) -> list[str]:
    """The numbers a block of the answers quotes: not those of code (commands, paths), link targets or commits."""
    block = re.sub(r"`[^`]*`", " ", block)
    block = re.sub(r"\]\([^)]*\)", "]", block)
    return numbers(COMMIT.sub(" ", block))


def blocks(text: str) -> list[str]:
    """The answers' paragraphs, each bullet on its own, headings left out."""
    parts = re.split(r"\n\s*\n|\n(?=(?:> )?- )", text)
    return [part.strip() for part in parts if part.strip() and not part.lstrip().startswith("#")]


def quotes() -> list[tuple[str, Path]]:
    """Each block that quotes a report, with the report: the one it names, or (a blockquote, or a paragraph speaking
    of "the report") the last one named before it."""
    found, last = [], None
    for block in blocks(ANSWERS.read_text(encoding="utf-8")):
        named = [link or path for link, path in NAMED_REPORT.findall(block)]
        if named:
            last = (ANSWERS.parent / named[0]).resolve() if named[0].startswith(".") else REPO / named[0]
            found.append((block, last))
        elif last is not None and (block.startswith(">") or re.search(r"\bthe report\b", block)):
            found.append((block, last))
    return found


def test_every_number_a_paragraph_quotes_appears_in_the_report_it_names():
    checked, unquoted = set(), []
    for block, report in quotes():
        assert report.is_file(), f"docs/answers.md names {report.relative_to(REPO)}, which does not exist"
        name = report.relative_to(REPO).as_posix()
        in_report = set(numbers(report.read_text(encoding="utf-8")))
        for number in quoted_numbers(block):
            if number not in in_report and (name, number) not in NOT_QUOTED:
                unquoted.append(f"{number} ({block[:70]!r}…) is not in {name}")
            checked.add(name)
    assert not unquoted, "\n".join(unquoted)
    assert checked >= {"reports/report.md", "reports/benchmark/report.md", "benchmarks/results/learning_rate.md",
                       "benchmarks/cells/mnist-pairs-open-c50-20k/reports/report.md"}


def test_each_number_excused_is_still_in_the_answers_and_still_not_in_its_report():
    stated = {(report.relative_to(REPO).as_posix(), number) for block, report in quotes()
              for number in quoted_numbers(block)}
    for (name, number), why in NOT_QUOTED.items():
        assert (name, number) in stated, f"{number} ({why}) is no longer stated beside {name}: drop its excuse"
        assert number not in numbers((REPO / name).read_text(encoding="utf-8")), \
            f"{number} ({why}) is in {name} now: drop its excuse"


def test_numbers_are_read_alike_whatever_their_minus_sign_or_separators():
    assert numbers("−0.0157 [-0.1271, +0.0956]; 20,000 and 20\u2009000 iterations; 1.03×") == \
        ["-0.0157", "-0.1271", "0.0956", "20000", "20000", "1.03"]
    assert quoted_numbers("written at d128959 (`python benchmarks/long_training.py`, [report](../x/c50/report.md)), "
                          "at 4298787: +6.1%") == ["6.1"]
