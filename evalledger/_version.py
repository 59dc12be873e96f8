"""The version, in one place: pyproject.toml reads it from here (a file read costs
nothing at start-up; ``importlib.metadata`` costs tens of milliseconds)."""

__version__ = "0.1.0"
