"""The real agent CLIs the tests run, pinned: installed from npm into a cache folder
(``python -m tests.real_agents install``, which ``.ci/run`` does), found there by the
tests; and axe-core, the accessibility checker the browser tests run in the pages.
Nothing else is downloaded: the CLIs talk to local fake model APIs
(``tests/fake_agent_api.py``).

The cache is ``$EVALLEDGER_AGENTS_DIR``, else ``~/.cache/evalledger-tests/agents``; one
folder per package and version, so two copies of the suite share it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# name -> (npm package, the versions the tests run; the first is the one most run).
PINNED: dict[str, tuple[str, tuple[str, ...]]] = {
    "claude": ("@anthropic-ai/claude-code", ("2.1.197", "2.1.332")),
    "codex": ("@openai/codex", ("0.171.0",)),
    "gemini": ("@google/gemini-cli", ("0.61.0",)),
    "opencode": ("opencode-ai", ("1.18.33",)),
}
# The accessibility checker the browser tests run in the pages (a script, no CLI).
AXE = ("axe-core", "4.14.1")


def cache_dir() -> Path:
    configured = os.environ.get("EVALLEDGER_AGENTS_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "evalledger-tests" / "agents"


def folder(name: str, version: str) -> Path:
    package = PINNED[name][0]
    return cache_dir() / f"{package.replace('/', '+')}@{version}"


def binary(name: str, version: str | None = None) -> Path:
    """Where the pinned CLI is (it may not be installed)."""
    return folder(name, version or PINNED[name][1][0]) / "node_modules" / ".bin" / name


def missing(name: str, version: str | None = None) -> str | None:
    """Why the CLI cannot run here, in one line; None when it can."""
    path = binary(name, version)
    if not path.exists():
        return (f"{PINNED[name][0]}@{version or PINNED[name][1][0]} is not installed in "
                f"{cache_dir()} (python -m tests.real_agents install)")
    return None


def require(name: str, version: str | None = None) -> Path:
    """The pinned CLI, or a skip saying why it cannot run; CI sets
    ``EVALLEDGER_REQUIRE_AGENTS=1`` and then the test fails instead."""
    from .needs import unavailable

    why = missing(name, version)
    if why is not None:
        unavailable("AGENTS", why)
    return binary(name, version)


def axe_script() -> Path:
    """axe-core's script, as the browser tests inject it into a page (it may be missing)."""
    package, version = AXE
    return cache_dir() / f"{package}@{version}" / "node_modules" / package / "axe.min.js"


def _npm_install(npm: str, spec: str, target: Path, done: Path) -> None:
    """``npm install spec`` into ``target``, whole or not at all (``done``: the file that
    says it is whole, under the folder being made)."""
    shutil.rmtree(target, ignore_errors=True)
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                    "--prefix", str(partial), spec], check=True)
    if not (partial / done.relative_to(target)).exists():
        sys.exit(f"{spec} installed without {done.name}")
    try:
        partial.rename(target)
    except OSError:  # another copy installed it first
        shutil.rmtree(partial, ignore_errors=True)
    print(f"installed {spec} in {target}")


def install() -> None:
    """npm-install every pinned version not installed yet (a folder is complete once its
    CLI answers ``--version``: an interrupted install is made again), and axe-core."""
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is not installed: the real-agent tests need Node.js and npm")
    script = axe_script()
    if not script.exists():
        _npm_install(npm, "@".join(AXE), script.parents[2], script)
    for name, (package, versions) in PINNED.items():
        for version in versions:
            if not _answers(binary(name, version), version):
                _npm_install(npm, f"{package}@{version}", folder(name, version),
                             binary(name, version))
                if not _answers(binary(name, version), version):
                    sys.exit(f"{package}@{version} installed but does not answer --version")


def _answers(path: Path, version: str) -> bool:
    if not path.exists():
        return False
    try:
        said = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return version in said


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.real_agents install")
    install()
