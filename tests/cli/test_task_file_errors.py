"""What ``run`` says about a task or experiment file it cannot use, through a real
``evalledger`` process: the file's own path in a YAML error, a file name that is not a
task id said in those words, and the known key a misspelt one was probably meant to be
(in task files, criteria and experiment files)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import COMMAND, PATIENCE, Result, _env, assert_one_line_error


def cli(cwd: Path, *args: str) -> Result:
    done = subprocess.run([*COMMAND, "--ledger", "l.db", *args], cwd=cwd, env=_env(),
                          text=True, capture_output=True, timeout=PATIENCE * 4)
    return Result(done.returncode, done.stdout, done.stderr)


GOOD = "command: 'true'\nsuccess_criteria: [{type: exit_code}]\n"


@dataclass
class Skips:
    folder: Path
    result: Result

    def reason(self, name: str) -> str:
        """The one stderr line that names the file ``name`` as skipped."""
        prefix = f"skipped {self.folder / name}: "
        lines = [line for line in self.result.err_lines if line.startswith(prefix)]
        assert len(lines) == 1, self.result.stderr
        return lines[0][len(prefix):]


@pytest.fixture(scope="module")
def skips(tmp_path_factory: pytest.TempPathFactory) -> Skips:
    """One run over a folder of broken task files beside a good one."""
    cwd = tmp_path_factory.mktemp("broken-files")
    tasks = cwd / "tasks"
    tasks.mkdir()
    (tasks / "good.yaml").write_text(GOOD, encoding="utf-8")
    (tasks / "unclosed.yaml").write_text("command: [echo, hi\nsuccess_criteria: []\n",
                                         encoding="utf-8")
    (tasks / "Bad_Name.yaml").write_text(GOOD, encoding="utf-8")
    (tasks / "typo.yaml").write_text(GOOD + "tiemout: 30\n", encoding="utf-8")
    (tasks / "criterion.yaml").write_text(
        "command: 'true'\nsuccess_criteria: [{type: exit_code, equls: 0}, {type: exit_cod}]\n",
        encoding="utf-8")
    result = cli(cwd, "run", str(tasks))
    assert result.returncode == 1, result  # the good task ran; four files were skipped
    assert "Traceback" not in result.stderr
    return Skips(tasks, result)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_yaml_error_names_the_file_not_a_unicode_string(skips: Skips) -> None:
    reason = skips.reason("unclosed.yaml")
    assert reason.startswith("invalid YAML: "), reason
    assert f'in "{skips.folder / "unclosed.yaml"}", line 2' in reason, reason
    assert "<unicode string>" not in skips.result.stderr


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_file_name_that_is_not_a_task_id_is_said_in_those_words(skips: Skips) -> None:
    reason = skips.reason("Bad_Name.yaml")
    assert reason.startswith("the file name is not a valid task id: 'Bad_Name'"), reason
    assert "set task_id" in reason and "pattern" not in reason, reason


def test_a_misspelt_key_gets_the_key_it_was_meant_to_be(skips: Skips) -> None:
    assert skips.reason("typo.yaml") == "unknown key 'tiemout' (did you mean 'timeout'?)"
    reason = skips.reason("criterion.yaml")
    assert "unknown key 'success_criteria.0.exit_code.equls' (did you mean 'equals'?)" in reason
    assert "success_criteria.1: unknown type 'exit_cod' (did you mean 'exit_code'?)" in reason


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(("text", "said"), [
    ("experiment_id: e\ntasks: [tasks]\nmax_paralel: 2\n",
     "unknown key 'max_paralel' (did you mean 'max_parallel'?)"),
    ("experiment_id: e\ntasks: [tasks]\nvariants: [{variant_id: a, tiemout: 3}]\n",
     "unknown key 'variants.0.tiemout' (did you mean 'timeout'?)"),
    ("experiment_id: e\ntasks: [tasks]\ndefaults: {modle: m}\n",
     "unknown key 'defaults.modle' (did you mean 'model'?)"),
])
def test_a_misspelt_experiment_key_gets_the_key_it_was_meant_to_be(
        tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "good.yaml").write_text(GOOD, encoding="utf-8")
    (tmp_path / "experiment.yaml").write_text(text, encoding="utf-8")
    error = assert_one_line_error(cli(tmp_path, "run", "-e", "experiment.yaml"))
    where = (tmp_path / "experiment.yaml").resolve()
    assert error == f"Error: experiment file {where}: {said}", error
