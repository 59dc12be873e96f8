"""Edge cases of loading and resolving task and experiment files (SPEC §3).

The rule under test: a broken task file becomes a ``Skipped`` entry (``task.skipped``)
with its path and a clear reason, and the rest of the batch runs; a broken experiment
file or a bad command-line option is ``TaskLoadError`` / one ``Error:`` line and exit 2;
no Python traceback ever reaches a user. Every test here asserts the correct behaviour.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalledger.suite import Skipped, TaskLoadError, TaskSet, load_tasks
from tests.cli.helpers import (
    assert_one_line_error,
    evalledger,
    events,
    of_type,
    write_task,
)
from tests.suite.yaml_files import MINIMAL, keys, write

EXPERIMENT_HEAD = "experiment_id: e\ntasks: [tasks]\n"


def only_skip(task_set: TaskSet) -> Skipped:
    assert len(task_set.skipped) == 1, (task_set.skipped, keys(task_set))
    return task_set.skipped[0]


# -- task files: the Python API --------------------------------------------------------------


def test_a_file_with_a_utf8_bom_loads(tmp_path: Path) -> None:
    # Behaves correctly today; not covered elsewhere.
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())

    assert keys(load_tasks([path])) == ["default/bom/00"]


def test_yml_yaml_nested_and_other_suffixes(tmp_path: Path) -> None:
    # Behaves correctly today: .yml and .yaml in nested folders, other files ignored.
    write(tmp_path / "a.yml", MINIMAL)
    write(tmp_path / "deep" / "er" / "b.yaml", MINIMAL)
    write(tmp_path / "notes.txt", MINIMAL)
    write(tmp_path / "c.yaml.bak", MINIMAL)
    (tmp_path / "dir.yaml").mkdir()

    assert sorted(keys(load_tasks([tmp_path]))) == ["default/a/00", "default/b/00"]


@pytest.mark.parametrize(
    "env",
    ["{D: 2024-01-01}", "{D: 2024-01-01 10:00:00}", "{D: !!binary aGVsbG8=}", "{D: !!set {a}}"],
)
def test_env_values_yaml_reads_as_dates_or_binary_do_not_crash(tmp_path: Path, env: str) -> None:
    # Regression: the env validator json.dumps() every non-string value; a date, bytes or a
    # set raises TypeError, which escapes load_tasks (pydantic only wraps ValueError).
    bad = write(tmp_path / "bad.yaml", MINIMAL + f"env: {env}\n")
    good = write(tmp_path / "good.yaml", MINIMAL)

    loaded = load_tasks([bad, good])  # TypeError: Object of type date is not JSON serializable

    assert keys(loaded) == ["default/good/00"]
    skip = only_skip(loaded)
    assert skip.path == str(bad)
    assert skip.reason.startswith("env: ")
    assert "quote the value" in skip.reason


def test_a_workdir_that_is_a_symlink_loop_does_not_crash(tmp_path: Path) -> None:
    # Regression: Path.resolve() raises RuntimeError("Symlink loop from ...") on Python 3.11,
    # which load_tasks does not catch.
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    bad = write(tmp_path / "bad.yaml", MINIMAL + "workdir: loop\n")
    good = write(tmp_path / "good.yaml", MINIMAL)

    loaded = load_tasks([bad, good])  # RuntimeError: Symlink loop from '.../loop'

    # Loaded as it is: the sandbox is what cannot be built (BUILD_FAILED, see the CLI test).
    assert keys(loaded) == ["default/bad/00", "default/good/00"]
    assert loaded.skipped == []
    assert loaded.tasks[0].workdir == str(tmp_path / "loop")


def test_an_empty_workdir_is_rejected(tmp_path: Path) -> None:
    # Regression: `workdir: ""` is kept as "" (the resolve step skips falsy values), so
    # definition_hash raises ValueError("no path specified") from os.path.relpath, and
    # the sandbox would copy Path("") == the current directory.
    path = write(tmp_path / "t.yaml", MINIMAL + "workdir: ''\n")

    loaded = load_tasks([path])

    assert loaded.tasks == []
    assert only_skip(loaded).reason.startswith("workdir: ")


@pytest.mark.parametrize("command", ["''", "'   '", "[]", "['']"])
def test_an_empty_command_is_skipped(tmp_path: Path, command: str) -> None:
    # Regression: accepted. `command: ''` then runs `sh -c ''` and SUCCEEDS; `[]` and `['']`
    # become an ERROR per replicate at run time instead of a task.skipped.
    bad = write(
        tmp_path / "bad.yaml", f"command: {command}\nsuccess_criteria: [{{type: exit_code}}]\n"
    )

    skip = only_skip(load_tasks([bad]))

    assert "command" in skip.reason


@pytest.mark.parametrize("command", ["''", "[]"])
def test_a_run_command_criterion_with_an_empty_command_is_skipped(
    tmp_path: Path, command: str
) -> None:
    # Regression: accepted; the criterion has nothing to run.
    bad = write(
        tmp_path / "bad.yaml",
        f"command: echo hi\nsuccess_criteria: [{{type: run_command, command: {command}}}]\n",
    )

    assert "command" in only_skip(load_tasks([bad])).reason


def test_an_env_name_that_cannot_be_an_environment_variable_is_skipped(tmp_path: Path) -> None:
    # Regression: accepted at load; every replicate then ends ERROR at spawn with
    # "ValueError: illegal environment variable name" instead of one task.skipped.
    bad = write(tmp_path / "bad.yaml", MINIMAL + "env: {'A=B': x}\n")

    assert "env" in only_skip(load_tasks([bad])).reason


@pytest.mark.parametrize("value", [".inf", ".Inf"])
def test_an_infinite_timeout_is_skipped(tmp_path: Path, value: str) -> None:
    # Regression: `.inf` passes gt=0 and is recorded as `"timeout": null` in the ledger
    # (pydantic writes inf as null), so the stored definition no longer says what ran.
    bad = write(tmp_path / "bad.yaml", MINIMAL + f"timeout: {value}\n")

    assert "timeout" in only_skip(load_tasks([bad])).reason


@pytest.mark.parametrize(
    "field",
    ["timeout: true", "timeout: yes", "budget: {max_tokens: true}",
     "success_criteria: [{type: exit_code, weight: true}]"],
)
def test_a_boolean_where_a_number_goes_is_skipped(tmp_path: Path, field: str) -> None:
    # Regression: pydantic's lax mode turns `timeout: yes` into a 1-second timeout.
    bad = write(tmp_path / "bad.yaml", MINIMAL + field + "\n")

    skip = only_skip(load_tasks([bad]))

    assert field.split(":")[0] in skip.reason


def test_a_duplicate_key_is_skipped_and_named(tmp_path: Path) -> None:
    # Regression: PyYAML keeps the last value silently; the first `command` is lost.
    bad = write(tmp_path / "bad.yaml", MINIMAL + "command: echo bye\n")

    skip = only_skip(load_tasks([bad]))

    assert "command" in skip.reason
    assert "duplicate" in skip.reason.lower()


def test_an_invalid_yaml_date_says_it_is_yaml(tmp_path: Path) -> None:
    # Regression (reason quality): the reason was the bare "month must be in 1..12", which
    # names neither the field nor says it is a YAML problem.
    bad = write(tmp_path / "bad.yaml", MINIMAL + "description: 2024-13-45\n")

    reason = only_skip(load_tasks([bad])).reason

    assert reason.startswith("invalid YAML value (quote it if it is text): ")
    assert reason.endswith("month must be in 1..12")


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
def test_a_deeply_nested_value_is_skipped_not_a_recursion_error(tmp_path: Path) -> None:
    # Regression: PyYAML's composer recurses; RecursionError escapes load_tasks.
    bad = write(tmp_path / "bad.yaml", MINIMAL + "description: " + "[" * 3000 + "]" * 3000 + "\n")
    good = write(tmp_path / "good.yaml", MINIMAL)

    loaded = load_tasks([bad, good])

    assert keys(loaded) == ["default/good/00"]
    assert only_skip(loaded).path == str(bad)


def test_the_same_file_named_twice_runs_once_and_is_not_skipped(tmp_path: Path) -> None:
    # Regression: `run tasks tasks/t.yaml` records a task.skipped "duplicate task_id 't'
    # (first in tasks/t.yaml)" for the very file that runs.
    path = write(tmp_path / "tasks" / "t.yaml", MINIMAL)

    loaded = load_tasks([tmp_path / "tasks", path])

    assert keys(loaded) == ["default/t/00"]
    assert loaded.skipped == []


def test_an_experiment_listing_a_file_and_its_folder_is_not_a_duplicate(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", "experiment_id: e\ntasks: [tasks, tasks/t.yaml]\n")

    loaded = load_tasks(experiment=experiment)

    assert keys(loaded) == ["default/t/00"]
    assert loaded.skipped == []


def test_a_null_workdir_in_a_later_layer_clears_it_like_other_fields(tmp_path: Path) -> None:
    # Regression: "later wins" holds for `model: null` (cleared) but not `workdir: null`: the
    # workdir loop re-applies the earlier layer's path after the merge cleared it.
    write(tmp_path / "tasks" / "t.yaml", MINIMAL + "model: m\nworkdir: w\n")
    experiment = write(
        tmp_path / "e.yaml",
        EXPERIMENT_HEAD + "variants: [{variant_id: a, model: null, workdir: null}]\n",
    )

    [task] = load_tasks(experiment=experiment).tasks

    assert task.model is None
    assert task.workdir is None


# -- experiment files: the Python API --------------------------------------------------------


def test_an_experiment_with_no_variants_is_an_error(tmp_path: Path) -> None:
    # Regression: `variants: []` silently resolves to zero tasks; the CLI then says "nothing
    # matched the paths and tag filters", which points the user at the wrong thing.
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + "variants: []\n")

    with pytest.raises(TaskLoadError, match="variants"):
        load_tasks(experiment=experiment)


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(
    "text",
    [
        "defaults: {env: {D: 2024-01-01}}\n",
        "variants: [{variant_id: a, env: {D: 2024-01-01}}]\n",
        "defaults: {description: " + "[" * 3000 + "]" * 3000 + "}\n",
        "repeats: true\n",
        "repeats: 2\nrepeats: 3\n",
        "variants: [{variant_id: a, timeout: .inf}]\n",
    ],
    ids=["defaults-env-date", "variant-env-date", "deep-nesting", "repeats-bool", "duplicate-key",
         "variant-timeout-inf"],
)
def test_a_broken_experiment_file_raises_task_load_error(tmp_path: Path, text: str) -> None:
    # Regressions: TypeError / RuntimeError / RecursionError escape instead of TaskLoadError;
    # `repeats: true`, a duplicate key and an infinite timeout are silently accepted.
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + text)

    with pytest.raises(TaskLoadError):
        load_tasks(experiment=experiment)


def test_experiment_validation_that_works(tmp_path: Path) -> None:
    # Behaves correctly today; not covered in test_tasks.py.
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    cases = {
        "variants: [{variant_id: a, repeats: 0}]\n": "variants.0.repeats",
        "repeats: -1\n": "repeats",
        "max_parallel: 0\n": "max_parallel",
        "defaults: {colour: red}\n": "unknown key 'defaults.colour'",
        "defaults: {task_id: x}\n": "unknown key 'defaults.task_id'",
        "variants: {variant_id: a}\n": "variants",
    }
    for text, reason in cases.items():
        experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + text)
        with pytest.raises(TaskLoadError) as info:
            load_tasks(experiment=experiment)
        assert reason in str(info.value), text


# -- the CLI ---------------------------------------------------------------------------------


def _skipped_run(tmp_path: Path, bad_text: str) -> None:
    """A folder with one good task and one broken one: the good one runs, the broken
    one is a task.skipped event, and no traceback reaches the user."""
    tasks = tmp_path / "tasks"
    write_task(tasks / "good.yaml", "echo ok")
    bad = write(tasks / "bad.yaml", MINIMAL + bad_text)
    db = tmp_path / "l.db"

    result = evalledger(tmp_path, db, "run", str(tasks))

    assert "Traceback" not in result.stderr, result.stderr[-600:]
    assert result.returncode == 1, result  # a skipped file fails the run, said so
    assert "1 task file(s) skipped" in result.stdout
    run_id = result.out_lines[0]
    skipped = of_type(events(db, run_id), "task.skipped")
    assert [Path(e.path).name for e in skipped] == [bad.name]


@pytest.mark.slow  # seconds of a worker: the slow tier (pytest -m slow)
@pytest.mark.parametrize(
    "bad_text",
    ["env: {D: 2024-01-01}\n", "workdir: ''\n"],
    ids=["env-date", "workdir-empty"],
)
def test_cli_a_broken_task_file_is_skipped_without_a_traceback(
    tmp_path: Path, bad_text: str
) -> None:
    # Regressions: a TypeError (env date) traceback before the run starts; ValueError("no
    # path specified") from definition_hash inside the batch for `workdir: ''`, after
    # the run id was printed (the run is left unended).
    _skipped_run(tmp_path, bad_text)


@pytest.mark.parametrize("layer", ["task", "defaults", "variant"])
def test_cli_a_workdir_that_is_a_symlink_loop_is_build_failed(tmp_path: Path, layer: str) -> None:
    # Regression: Path.resolve() raised RuntimeError("Symlink loop") at load, a traceback.
    # Like a missing workdir, it is the sandbox that cannot be built: BUILD_FAILED.
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    own = "workdir: ../loop\n" if layer == "task" else ""
    write(tmp_path / "tasks" / "t.yaml", MINIMAL + own)
    setting = {"defaults": "defaults: {workdir: loop}\n",
               "variant": "variants: [{variant_id: a, workdir: loop}]\n"}.get(layer, "")
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + setting)

    result = evalledger(tmp_path, tmp_path / "l.db", "run", "-e", str(experiment))

    assert "Traceback" not in result.stderr, result.stderr[-600:]
    assert result.returncode == 1, result
    (line,) = [line for line in result.out_lines if line.startswith("BUILD_FAILED")]
    assert "/t/00" in line and "loop" in line


@pytest.mark.parametrize("where", ["file name", "folder name"])
def test_cli_a_non_utf8_path_does_not_crash_the_run(tmp_path: Path, where: str) -> None:
    # Regression: a surrogate-escaped path goes into task.skipped / task.started payloads and
    # pydantic's to_json fails: "UnicodeEncodeError: 'utf-8' codec can't encode
    # character '\udcff' ... surrogates not allowed", traceback after the run id.
    # Such a file is skipped, with a reason; in a folder so named, every file is.
    folder = tmp_path / (os.fsdecode(b"t\xff") if where == "folder name" else "tasks")
    write_task(folder / "ok.yaml", "echo ok")
    if where == "file name":
        write_task(folder / os.fsdecode(b"b\xff.yaml"), "echo ok")

    result = evalledger(tmp_path, tmp_path / "l.db", "run", str(folder))

    assert "Traceback" not in result.stderr, result.stderr[-600:]
    skipped = [line for line in result.err_lines if line.startswith("skipped ")]
    assert len(skipped) == 1, result.stderr
    assert skipped[0].endswith("the path is not valid UTF-8: rename the file or its folder")
    if where == "file name":  # the other file runs; the skipped one fails the run
        assert result.returncode == 1, result
        assert any(line.startswith("SUCCESS") and "default/ok/00" in line
                   for line in result.out_lines), result.stdout
    else:  # nothing is left to run
        assert "no tasks to run" in assert_one_line_error(result)


def test_cli_an_experiment_with_env_date_is_a_one_line_error(tmp_path: Path) -> None:
    # Regression: TypeError traceback, exit 1.
    write_task(tmp_path / "tasks" / "t.yaml", "echo ok")
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + "defaults: {env: {D: 2024-01-01}}\n")

    result = evalledger(tmp_path, tmp_path / "l.db", "run", "-e", str(experiment))

    assert_one_line_error(result)


def test_cli_an_experiment_with_no_variants_says_so(tmp_path: Path) -> None:
    # Regression: "Error: no tasks to run: nothing matched the paths and tag filters".
    write_task(tmp_path / "tasks" / "t.yaml", "echo ok")
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + "variants: []\n")

    result = evalledger(tmp_path, tmp_path / "l.db", "run", "-e", str(experiment))

    assert "variants" in assert_one_line_error(result)


@pytest.mark.parametrize(
    "option", [("--timeout", "nan"), ("--timeout", "inf"), ("--max-cost", "nan"),
               ("--max-cost", "inf")],
    ids=["timeout-nan", "timeout-inf", "max-cost-nan", "max-cost-inf"],
)
def test_cli_a_non_finite_number_option_is_a_one_line_error(
    tmp_path: Path, option: tuple[str, str]
) -> None:
    # Regressions: click's FloatRange lets nan through (nan <= 0 is False); `--timeout nan`
    # then dies in Overrides(...) with a pydantic ValidationError traceback (exit 1).
    # `--timeout inf` / `--max-cost nan|inf` run, and run.started records them as null,
    # so the budget is silently off and resume/drift cannot see what was asked for.
    write_task(tmp_path / "tasks" / "t.yaml", "echo ok")
    db = tmp_path / "l.db"

    result = evalledger(tmp_path, db, "run", str(tmp_path / "tasks"), *option)

    assert_one_line_error(result)
    assert option[0] in result.stderr


def test_cli_tag_filters_that_exclude_everything_are_one_line(tmp_path: Path) -> None:
    # Behaves correctly today (with an experiment): one line, exit 2, nothing recorded.
    write_task(tmp_path / "tasks" / "t.yaml", "echo ok", tags=["a"])
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD)

    result = evalledger(
        tmp_path, tmp_path / "l.db", "run", "-e", str(experiment), "--exclude-tag", "a"
    )

    assert "the tag filters (--exclude-tag a) left none of the 1 task(s) found" in (
        assert_one_line_error(result))


@pytest.mark.parametrize("criterion", ["{type: file_exists, path: ''}",
                                       "{type: file_contains, path: '', includes: [x]}"])
def test_a_criterion_with_an_empty_path_is_skipped(tmp_path: Path, criterion: str) -> None:
    # An empty path named the sandbox itself: file_exists passed whatever the command did.
    bad = write(tmp_path / "bad.yaml", f"command: echo hi\nsuccess_criteria: [{criterion}]\n")
    assert "path" in only_skip(load_tasks([bad])).reason


def test_experiment_repeats_are_capped(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", EXPERIMENT_HEAD + "repeats: 1000000000\n")
    with pytest.raises(TaskLoadError, match="repeats"):
        load_tasks(experiment=experiment)


def test_yaml_merge_keys_still_load(tmp_path: Path) -> None:
    # Regression: the duplicate-key check constructed the `<<` key itself, which has
    # no constructor: a task file using an anchor and a merge key was skipped.
    path = write(tmp_path / "merge.yaml", """\
        command: echo hi
        success_criteria:
          - &ok {type: exit_code}
          - {<<: *ok, weight: 2}
        """)
    [task] = load_tasks([path]).tasks
    assert [c.weight for c in task.success_criteria] == [1.0, 2.0]


def test_an_experiment_file_given_as_a_task_file_says_what_it_is(tmp_path: Path) -> None:
    """#49: `run experiment.yaml` listed each key as unknown; it says to use -e."""
    exp = write(tmp_path / "exp.yaml", "experiment_id: e\ntasks: [tasks]\nvariants: []\n")
    skip = only_skip(load_tasks([exp]))
    assert skip.reason == ("this is an experiment file, not a task file: run it with "
                           "`evalledger run -e exp.yaml`")
