"""Compiled templates kept between processes (``_render._CompiledTemplates``): a page is
the same from a fresh compile, from the cache, and from a cache that is damaged or
cannot be written; only the user may read it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from jinja2.bccache import bc_magic

RENDER = """
from evalledger.viewer._render import render
print(render("error.html", status_code=404, message="no such run", links=[], mode="page"))
"""


def page(cache_home: Path) -> str:
    """The error page, rendered by a new process with ``cache_home`` as its cache."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run([sys.executable, "-c", RENDER], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and not done.stderr, done
    return done.stdout


def entries(cache_home: Path) -> list[Path]:
    return sorted(cache_home.glob("evalledger/templates-*/*"))


def test_a_page_is_the_same_compiled_cached_or_from_a_damaged_cache(tmp_path: Path) -> None:
    fresh = page(tmp_path)
    kept = entries(tmp_path)
    assert len(kept) == 2  # the page and the base it extends
    folder = kept[0].parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in kept)

    assert page(tmp_path) == fresh
    for entry in kept:  # Jinja's header, then what no unpickler reads
        entry.write_bytes(entry.read_bytes()[:len(bc_magic)] + b"\xff damaged")
    assert page(tmp_path) == fresh
    assert all(not p.read_bytes().endswith(b"damaged") for p in entries(tmp_path)), \
        "a damaged entry is written over"


def test_a_cache_that_cannot_be_made_is_no_cache(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert page(blocked) == page(tmp_path / "cache")
