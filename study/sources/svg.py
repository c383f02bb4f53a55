"""SVG drawn by librsvg's `rsvg-convert` (Debian's librsvg2-bin), for the sources drawn as vector images by people
(`cards`, `iconify`): one place that runs the renderer, says when it is missing, and names its version for the
sources' caches."""

from __future__ import annotations

import functools
import io
import shutil
import subprocess

from PIL import Image

RENDERER = "rsvg-convert"


def require_renderer(source: str, install_hint: str) -> None:
    """A FileNotFoundError naming the install line where the renderer is not installed."""
    if shutil.which(RENDERER) is None:
        raise FileNotFoundError(f"the {source} source draws with {RENDERER}, which is not installed; {install_hint}")


@functools.lru_cache(maxsize=1)
def renderer_version() -> str:
    """What the drawn images depend on besides the SVG: the renderer's version line."""
    return subprocess.run([RENDERER, "--version"], capture_output=True, text=True, check=False).stdout.strip()


def draw_svg(arguments: list[str], svg: bytes | None = None) -> tuple[Image.Image | None, str]:
    """The RGBA image the renderer draws with `arguments` (a file among them, or `svg` on its standard input), and its
    complaint; (None, the complaint) where it cannot draw."""
    done = subprocess.run([RENDERER, *arguments], input=svg, capture_output=True, check=False)
    if done.returncode != 0:
        return None, done.stderr.decode(errors="replace").strip()
    with Image.open(io.BytesIO(done.stdout)) as image:
        return image.convert("RGBA"), ""
