"""Bring the committed reports to the form today's writer gives them: each HTML page links the figures that sit
beside it instead of inlining them as base64, and each figure is a palette PNG (study.report.plotting). The numbers,
words and drawings are unchanged: an inlined image is replaced by the path of the file with the same bytes, and a
figure is redrawn in 256 colours the way `save_figure` writes every new one.

A finished benchmark cell is frozen, so DVC keeps its results as its dvc.lock records them; this script records the
rewritten files' hashes there (the outputs' lines only, hashed by DVC: the dependencies stay as the cell was run).
The default study's report and the benchmark's aggregate are not frozen: rerun them afterwards (`python -m study.cli
benchmark --report-only`, then `dvc repro report`), which writes them anew.

    python benchmarks/relink_reports.py            # every tracked report under reports/ and benchmarks/

Running it again changes nothing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import subprocess
import sys
from pathlib import Path

from PIL import Image

from study.report.plotting import save_palette_png

ROOT = Path(__file__).resolve().parents[1]
INLINED = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
CELLS = ROOT / "benchmarks" / "cells"


def tracked(*patterns: str) -> list[Path]:
    """The files git tracks under reports/ and benchmarks/ that match the patterns."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=ROOT, check=True, capture_output=True)
    return [ROOT / name for name in listed.stdout.decode().split("\0")
            if name and name.split("/", 1)[0] in ("reports", "benchmarks")]


def relink(page: Path) -> bool:
    """Replace each inlined figure of `page` by the relative path of the PNG beside it with the same bytes."""
    text = page.read_text(encoding="utf-8")
    if not INLINED.search(text):
        return False
    beside = {hashlib.md5(png.read_bytes()).hexdigest(): png.relative_to(page.parent).as_posix()
              for png in sorted(page.parent.rglob("*.png"))}

    def linked(match: re.Match) -> str:
        digest = hashlib.md5(base64.b64decode(match.group(1))).hexdigest()
        if digest not in beside:
            raise SystemExit(f"{page} inlines a figure that no PNG beside it holds (md5 {digest}); "
                             "rerun the stage that writes this report instead")
        return f'src="{beside[digest]}"'

    page.write_text(INLINED.sub(linked, text), encoding="utf-8")
    return True


def repaint(png: Path) -> bool:
    """Rewrite a figure as a palette PNG, unless it already is one."""
    with Image.open(png) as image:
        if image.mode == "P":
            return False
    save_palette_png(png, png)
    return True


def record_outputs() -> list[str]:
    """Record the new hashes of frozen stages' rewritten outputs in each cell's dvc.lock (the cells are a DVC project
    of their own); return the outputs changed. Only the outputs' lines change: DVC's own dump would write the
    dependencies of today's dvc.yaml, not those the cell was run with."""
    from dvc.repo import Repo

    changed = []
    with Repo(str(CELLS)) as repo, repo.lock:
        for lock in sorted(CELLS.glob("*/dvc.lock")):
            before = text = lock.read_text(encoding="utf-8")
            frozen = [stage for stage in repo.stage.collect(str(lock.with_name("dvc.yaml"))) if stage.frozen]
            for stage in frozen:
                # Only outputs on disk that differ: data and trainings are not committed, and stay as recorded.
                for out in [out for out in stage.outs if out.exists and out.changed()]:
                    recorded = f"md5: {out.hash_info.value}\n      size: {out.meta.size}\n"
                    if text.count(recorded) != 1:
                        raise SystemExit(f"{lock.relative_to(ROOT)} does not record {out} once as {recorded!r}")
                    out.save()
                    text = text.replace(recorded, f"md5: {out.hash_info.value}\n      size: {out.meta.size}\n")
                    changed.append(f"{lock.parent.name}/{out}")
            if text != before:
                lock.write_text(text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    pages = [page for page in tracked("*.html") if relink(page)]  # before repainting: matched by the old bytes
    figures = [png for png in tracked("*.png") if repaint(png)]
    outputs = record_outputs()
    print(f"{len(pages)} HTML pages now link their figures; {len(figures)} figures rewritten as palette PNGs; "
          f"{len(outputs)} outputs of finished cells recorded in their dvc.lock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
