"""``evalledger.suite._reference``: the README's task-file reference is the one the models make,
and ``evalledger schema`` gives JSON Schemas that accept the bundled examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalledger.cli import cli
from evalledger.ledger._fields import field_docs
from evalledger.suite import ExperimentFile, TaskFile
from evalledger.suite._reference import BEGIN, END, reference_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_holds_the_reference_the_models_make() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    # Out of date? Paste the output of `evalledger schema --format markdown` there.
    assert readme[start:end] + "\n" == reference_markdown()


def test_every_key_of_every_file_is_in_the_reference() -> None:
    reference = reference_markdown()
    for model in (TaskFile, ExperimentFile):
        for name in model.model_fields:
            assert f"`{name}`" in reference, name
            assert field_docs(model).get(name), f"{model.__name__}.{name} has no docstring"


@pytest.mark.parametrize(("kind", "model"), [("task", TaskFile), ("experiment", ExperimentFile)])
def test_schema_prints_the_json_schema(kind: str, model: type) -> None:
    result = CliRunner().invoke(cli, ["schema", kind])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == model.__name__
    assert schema["additionalProperties"] is False  # unknown keys are refused
    assert set(schema["properties"]) == set(model.model_fields)


def test_the_bundled_examples_fit_the_schemas() -> None:
    for path in (ROOT / "examples").rglob("*.yaml"):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        model = ExperimentFile if "experiment_id" in data else TaskFile
        model.model_validate(data)  # the models are what the schemas describe


def test_schema_markdown_is_the_reference() -> None:
    result = CliRunner().invoke(cli, ["schema", "--format", "markdown"])
    assert result.stdout == reference_markdown()


def test_the_reference_is_whole_when_the_package_is_imported_from_a_zip(tmp_path: Path) -> None:
    """The docstrings are read through the module's loader, not from a file path."""
    archive = tmp_path / "evalledger.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in (ROOT / "evalledger").rglob("*.py"):
            zipped.write(path, path.relative_to(ROOT).as_posix())
    code = (f"import evalledger.suite._reference as r; assert r.__file__.startswith("
            f"{str(archive)!r}), r.__file__; print(r.reference_markdown(), end='')")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(archive)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference_markdown()
