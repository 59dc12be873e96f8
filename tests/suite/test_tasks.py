"""Task and experiment files (SPEC §3): loading, validation, resolution into runnable tasks.

Every test writes real YAML files into ``tmp_path`` and loads them with ``load_tasks``.
A file that fails to load is never fatal: it shows up in ``TaskSet.skipped`` with the
file and a reason a person can act on. Only an unusable request (a missing path, a
broken experiment file) raises ``TaskLoadError``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic_core import to_jsonable_python

from evalledger.statuses import FinalStatus
from evalledger.suite import (
    DEFAULT_MAX_OUTPUT,
    DEFAULT_TIMEOUT,
    Budget,
    ExitCode,
    Overrides,
    ResolvedTask,
    RunCommand,
    Skipped,
    TaskLoadError,
    TaskSet,
    content_hash,
    load_tasks,
    meets,
    task_files,
)
from evalledger.suite._models import _FIRST_DEFAULTS, complete, evaluated

from .yaml_files import MINIMAL, keys, write


def by_key(task_set: TaskSet) -> dict[str, ResolvedTask]:
    return {t.task_key: t for t in task_set.tasks}


def only_skip(task_set: TaskSet) -> Skipped:
    assert len(task_set.skipped) == 1, task_set.skipped
    return task_set.skipped[0]


# -- a single task file --------------------------------------------------------------------


def test_minimal_task_gets_builtin_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "add-numbers.yaml", MINIMAL)

    loaded = load_tasks([path])

    assert loaded.skipped == []
    assert loaded.experiment_id is None
    assert loaded.max_parallel is None
    [task] = loaded.tasks
    assert task.task_key == "default/add-numbers/00"
    assert task.task_id == "add-numbers"
    assert task.variant_id == "default"
    assert task.replicate_index == 0
    assert task.source == str(path.resolve())
    assert task.command == "echo hi"
    assert task.description == ""
    assert task.tags == []
    assert task.prompt is None
    assert task.workdir is None
    assert task.env == {}
    assert task.timeout == DEFAULT_TIMEOUT
    assert task.model is None
    assert task.stream_format == "native"
    assert task.budget == Budget()
    assert task.success_criteria == [ExitCode(type="exit_code", equals=0)]


def test_every_field_of_a_full_task_file_is_kept(tmp_path: Path) -> None:
    path = write(
        tmp_path / "file.yaml",
        """\
        task_id: add-numbers
        description: Write add.py
        tags: [smoke, python]
        prompt: |
          Create add.py
        command: [python, agent.py]
        env: {MODE: fast}
        timeout: 60
        model: claude-sonnet-4-5
        stream_format: claude-code
        budget: {max_tokens: 200000, max_cost_usd: 0.5}
        success_criteria:
          - {type: exit_code, equals: 0}
          - {type: file_exists, path: add.py}
          - {type: file_contains, path: add.py, includes: ["sys.argv"]}
          - {type: output_contains, includes: ["done"]}
          - {type: run_command, command: "python add.py 2 3 | grep -qx 5", weight: 2}
        skip: false
        """,
    )

    [task] = load_tasks([path]).tasks

    assert task.task_key == "default/add-numbers/00"
    assert task.description == "Write add.py"
    assert task.tags == ["smoke", "python"]
    assert task.prompt == "Create add.py\n"
    assert task.command == ["python", "agent.py"]
    assert task.env == {"MODE": "fast"}
    assert task.timeout == 60
    assert task.model == "claude-sonnet-4-5"
    assert task.stream_format == "claude-code"
    assert task.budget == Budget(max_tokens=200000, max_cost_usd=0.5)
    assert [c.type for c in task.success_criteria] == [
        "exit_code", "file_exists", "file_contains", "output_contains", "run_command",
    ]
    assert task.success_criteria[-1].weight == 2


def test_task_id_defaults_to_the_file_stem_and_an_explicit_one_wins(tmp_path: Path) -> None:
    stem = write(tmp_path / "from-stem.yml", MINIMAL)
    explicit = write(tmp_path / "whatever.yaml", "task_id: chosen.id_1\n" + MINIMAL)

    loaded = load_tasks([stem, explicit])

    assert keys(loaded) == ["default/from-stem/00", "default/chosen.id_1/00"]


@pytest.mark.parametrize("stem", ["Upper", "has space", "_leading", "-dash"])
def test_a_stem_that_is_not_a_valid_task_id_is_skipped(tmp_path: Path, stem: str) -> None:
    bad = write(tmp_path / f"{stem}.yaml", MINIMAL)
    good = write(tmp_path / "zz-good.yaml", MINIMAL)

    loaded = load_tasks([bad, good])

    assert keys(loaded) == ["default/zz-good/00"]
    skip = only_skip(loaded)
    assert skip.path == str(bad)
    assert "task_id" in skip.reason


def test_an_explicit_invalid_task_id_is_skipped(tmp_path: Path) -> None:
    bad = write(tmp_path / "ok-stem.yaml", "task_id: Not/Valid\n" + MINIMAL)

    skip = only_skip(load_tasks([bad]))

    assert skip.path == str(bad)
    assert "task_id" in skip.reason


def test_an_unknown_key_is_skipped_and_named(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", MINIMAL + "bogus: 1\n")
    good = write(tmp_path / "good.yaml", MINIMAL)

    loaded = load_tasks([bad, good])

    assert keys(loaded) == ["default/good/00"]
    skip = only_skip(loaded)
    assert skip.path == str(bad)
    assert "unknown key 'bogus'" in skip.reason


def test_an_unknown_nested_key_is_named_with_its_path(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", MINIMAL + "budget: {max_toks: 5}\n")

    assert "unknown key 'budget.max_toks'" in only_skip(load_tasks([bad])).reason


def test_an_invalid_value_is_skipped_with_the_field_named(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", MINIMAL + "timeout: -1\n")

    reason = only_skip(load_tasks([bad])).reason

    assert reason.startswith("timeout:")
    assert "greater than 0" in reason


def test_invalid_yaml_is_skipped_with_a_clear_reason(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "command: [unclosed\nsuccess_criteria: :\n")
    good = write(tmp_path / "good.yaml", MINIMAL)

    loaded = load_tasks([bad, good])

    assert keys(loaded) == ["default/good/00"]
    skip = only_skip(loaded)
    assert skip.path == str(bad)
    assert skip.reason.startswith("invalid YAML:")
    assert "\n" not in skip.reason


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "", "42\n"])
def test_a_file_that_is_not_a_mapping_is_skipped(tmp_path: Path, text: str) -> None:
    bad = write(tmp_path / "bad.yaml", text)

    skip = only_skip(load_tasks([bad]))

    assert skip.path == str(bad)
    assert "expected a mapping" in skip.reason


def test_a_file_that_is_not_utf8_is_skipped(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"command: \xff\xfe\n")

    assert only_skip(load_tasks([bad])).reason.startswith("cannot read")


def test_a_task_without_a_command_is_skipped(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "success_criteria: [{type: exit_code}]\n")

    skip = only_skip(load_tasks([bad]))

    assert skip.path == str(bad)
    assert "command" in skip.reason


@pytest.mark.parametrize("criteria", ["", "success_criteria: []\n"])
def test_a_task_without_success_criteria_loads_and_is_not_graded(
    tmp_path: Path, criteria: str
) -> None:
    # As the old harness did: it runs, and ends NOT_GRADED (see the runner's tests).
    path = write(tmp_path / "plain.yaml", "command: echo hi\n" + criteria)

    loaded = load_tasks([path])

    assert loaded.skipped == []
    assert [t.success_criteria for t in loaded.tasks] == [[]]


def test_an_unknown_criterion_type_is_skipped(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "command: x\nsuccess_criteria: [{type: vibes}]\n")

    assert "success_criteria" in only_skip(load_tasks([bad])).reason


def test_a_duplicate_task_id_in_a_later_file_is_skipped_naming_the_first(
    tmp_path: Path,
) -> None:
    first = write(tmp_path / "a" / "same.yaml", MINIMAL)
    second = write(tmp_path / "b" / "other.yaml", "task_id: same\n" + MINIMAL)

    loaded = load_tasks([tmp_path])

    [task] = loaded.tasks
    assert task.source == str(first.resolve())
    skip = only_skip(loaded)
    assert skip.path == str(second)
    assert "duplicate task_id 'same'" in skip.reason
    assert str(first) in skip.reason


def test_skip_true_tasks_are_left_out_and_listed_as_skipped(tmp_path: Path) -> None:
    # They vanished without a trace; now they are listed, marked deliberate.
    write(tmp_path / "off.yaml", MINIMAL + "skip: true\n")
    write(tmp_path / "on.yaml", MINIMAL + "skip: false\n")

    loaded = load_tasks([tmp_path])

    assert keys(loaded) == ["default/on/00"]
    assert loaded.skipped == [Skipped(str(tmp_path / "off.yaml"), "skip: true",
                                      deliberate=True)]


def test_a_bad_file_does_not_stop_the_rest(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", MINIMAL)
    write(tmp_path / "b.yaml", "{{{")
    write(tmp_path / "c.yaml", MINIMAL + "nope: 1\n")
    write(tmp_path / "d.yaml", MINIMAL)

    loaded = load_tasks([tmp_path])

    assert keys(loaded) == ["default/a/00", "default/d/00"]
    assert [Path(s.path).name for s in loaded.skipped] == ["b.yaml", "c.yaml"]


def test_env_values_yaml_reads_as_numbers_or_booleans_become_strings(tmp_path: Path) -> None:
    path = write(tmp_path / "t.yaml", MINIMAL + "env: {N: 3, F: 1.5, B: true, S: text}\n")

    [task] = load_tasks([path]).tasks

    assert task.env == {"N": "3", "F": "1.5", "B": "true", "S": "text"}
    assert all(isinstance(v, str) for v in task.env.values())


def test_workdir_is_relative_to_the_task_file_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = tmp_path / "suite"
    path = write(suite / "sub" / "t.yaml", MINIMAL + "workdir: fixtures/add\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    [task] = load_tasks([path]).tasks

    assert task.workdir == str((suite / "sub" / "fixtures" / "add").resolve())


def test_an_absolute_workdir_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "abs"
    path = write(tmp_path / "t.yaml", MINIMAL + f"workdir: {target}\n")

    [task] = load_tasks([path]).tasks

    assert task.workdir == str(target.resolve())


# -- finding files, tags -------------------------------------------------------------------


def test_folders_are_searched_recursively_in_sorted_order(tmp_path: Path) -> None:
    for rel in ["b/z.yaml", "b/a.yml", "a.yaml", "c/d/e/deep.yaml", "notes.txt", "x.json"]:
        write(tmp_path / rel, MINIMAL)

    files = task_files([tmp_path])
    loaded = load_tasks([tmp_path])

    assert [p.relative_to(tmp_path).as_posix() for p in files] == [
        "a.yaml", "b/a.yml", "b/z.yaml", "c/d/e/deep.yaml",
    ]
    # b/a.yml and a.yaml share the stem "a": the later one is a duplicate.
    assert keys(loaded) == ["default/a/00", "default/z/00", "default/deep/00"]
    assert [Path(s.path).relative_to(tmp_path).as_posix() for s in loaded.skipped] == [
        "b/a.yml"
    ]


def test_explicit_files_keep_the_order_they_were_given(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", MINIMAL)
    b = write(tmp_path / "b.yaml", MINIMAL)

    assert keys(load_tasks([b, a])) == ["default/b/00", "default/a/00"]


def test_a_missing_path_raises(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", MINIMAL)
    missing = tmp_path / "nope"

    with pytest.raises(TaskLoadError, match="no such task file or folder") as info:
        load_tasks([tmp_path, missing])

    assert str(missing) in str(info.value)


@pytest.fixture
def tagged(tmp_path: Path) -> Path:
    write(tmp_path / "a.yaml", MINIMAL + "tags: [smoke, python]\n")
    write(tmp_path / "b.yaml", MINIMAL + "tags: [slow]\n")
    write(tmp_path / "c.yaml", MINIMAL + "tags: [python, slow]\n")
    write(tmp_path / "d.yaml", MINIMAL)
    return tmp_path


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        ((), (), ["a", "b", "c", "d"]),
        (["smoke"], (), ["a"]),
        (["smoke", "slow"], (), ["a", "b", "c"]),  # ANY of them
        ((), ["slow"], ["a", "d"]),
        ((), ["smoke", "python"], ["b", "d"]),  # ANY of them drops
        (["python"], ["slow"], ["a"]),
        (["missing"], (), []),
    ],
)
def test_tag_filters(
    tagged: Path, include: list[str], exclude: list[str], expected: list[str]
) -> None:
    loaded = load_tasks([tagged], include_tags=include, exclude_tags=exclude)

    assert [t.task_id for t in loaded.tasks] == expected
    assert loaded.skipped == []


# -- experiments ---------------------------------------------------------------------------


def test_experiment_tasks_are_relative_to_the_experiment_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "exp" / "tasks" / "one.yaml", MINIMAL)
    write(tmp_path / "exp" / "extra" / "two.yaml", MINIMAL)
    experiment = write(
        tmp_path / "exp" / "experiment.yaml",
        """\
        experiment_id: model-comparison
        tasks: [tasks/, extra/two.yaml]
        max_parallel: 7
        """,
    )
    monkeypatch.chdir(tmp_path)  # not the experiment's folder

    loaded = load_tasks(experiment=Path("exp/experiment.yaml"))

    assert loaded.experiment_id == "model-comparison"
    assert loaded.max_parallel == 7
    assert keys(loaded) == ["default/one/00", "default/two/00"]
    assert loaded.tasks[0].source == str((experiment.parent / "tasks" / "one.yaml").resolve())


def test_experiment_paths_are_added_to_the_given_paths(tmp_path: Path) -> None:
    given = write(tmp_path / "given.yaml", MINIMAL)
    write(tmp_path / "exp" / "tasks" / "one.yaml", MINIMAL)
    experiment = write(tmp_path / "exp" / "e.yaml", "experiment_id: e\ntasks: [tasks]\n")

    loaded = load_tasks([given], experiment=experiment)

    assert keys(loaded) == ["default/given/00", "default/one/00"]


def test_repeats_give_zero_padded_replicate_keys(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", "experiment_id: e\ntasks: [tasks]\nrepeats: 12\n")

    loaded = load_tasks(experiment=experiment)

    assert keys(loaded) == [f"default/t/{i:02d}" for i in range(12)]
    assert [t.replicate_index for t in loaded.tasks] == list(range(12))
    assert keys(loaded) == sorted(keys(loaded))  # padding makes text order numeric order


EXPERIMENT = """\
experiment_id: model-comparison
tasks: [tasks/]
repeats: 2
defaults:
  timeout: 120
  model: default-model
  env: {A: from-defaults, B: from-defaults}
  tags: [from-defaults]
variants:
  - variant_id: baseline
  - variant_id: candidate
    model: other-model
    env: {C: from-variant, D: from-variant}
    timeout: 30
    repeats: 3
"""


def test_variants_repeats_and_overrides(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL + "env: {B: from-task, C: from-task}\n")
    experiment = write(tmp_path / "e.yaml", EXPERIMENT)

    loaded = load_tasks(experiment=experiment)

    assert keys(loaded) == [
        "baseline/t/00", "baseline/t/01",
        "candidate/t/00", "candidate/t/01", "candidate/t/02",
    ]
    tasks = by_key(loaded)
    base, cand = tasks["baseline/t/00"], tasks["candidate/t/02"]
    assert base.variant_id == "baseline"
    assert cand.variant_id == "candidate"
    assert cand.replicate_index == 2
    assert base.model == "default-model"
    assert cand.model == "other-model"
    assert base.timeout == 120
    assert cand.timeout == 30
    assert base.tags == ["from-defaults"]
    # env is merged key by key: defaults, then the task file, then the variant.
    assert base.env == {"A": "from-defaults", "B": "from-task", "C": "from-task"}
    assert cand.env == {
        "A": "from-defaults", "B": "from-task", "C": "from-variant", "D": "from-variant",
    }


def test_resolution_order_builtin_defaults_task_variant_overrides(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "plain.yaml", MINIMAL)
    write(tmp_path / "tasks" / "own.yaml", MINIMAL + "timeout: 50\nmodel: task-model\n")
    experiment = write(
        tmp_path / "e.yaml",
        """\
        experiment_id: e
        tasks: [tasks]
        defaults: {timeout: 100, model: default-model}
        variants:
          - variant_id: plain
          - variant_id: strict
            timeout: 20
            model: variant-model
            repeats: 2
        """,
    )

    def settings(overrides: Overrides | None = None) -> dict[str, tuple[float, str | None]]:
        loaded = load_tasks(experiment=experiment, overrides=overrides)
        return {t.task_key: (t.timeout, t.model) for t in loaded.tasks}

    assert settings() == {
        "plain/own/00": (50, "task-model"),  # task file beats experiment defaults
        "plain/plain/00": (100, "default-model"),  # experiment defaults beat built-in
        "strict/own/00": (20, "variant-model"),  # variant beats task file
        "strict/own/01": (20, "variant-model"),
        "strict/plain/00": (20, "variant-model"),
        "strict/plain/01": (20, "variant-model"),
    }
    forced = settings(Overrides(timeout=5, model="cli-model", repeats=1))
    assert set(forced.values()) == {(5, "cli-model")}  # command line beats everything
    assert sorted(forced) == ["plain/own/00", "plain/plain/00", "strict/own/00",
                              "strict/plain/00"]

    # Without an experiment the built-in default applies, then the command line.
    plain = tmp_path / "tasks" / "plain.yaml"
    assert load_tasks([plain]).tasks[0].timeout == DEFAULT_TIMEOUT
    [*replicates] = load_tasks([plain], overrides=Overrides(timeout=9, repeats=3)).tasks
    assert [(t.task_key, t.timeout) for t in replicates] == [
        ("default/plain/00", 9), ("default/plain/01", 9), ("default/plain/02", 9),
    ]


def test_experiment_defaults_can_supply_command_and_criteria(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "bare.yaml", "description: only a description\n")
    write(tmp_path / "tasks" / "off.yaml", "skip: false\n")
    experiment = write(
        tmp_path / "e.yaml",
        """\
        experiment_id: e
        tasks: [tasks]
        defaults:
          command: echo shared
          success_criteria: [{type: exit_code}]
          skip: true
        """,
    )

    loaded = load_tasks(experiment=experiment)

    # Defaults say skip; only the file that says skip: false runs.
    assert keys(loaded) == ["default/off/00"]
    assert loaded.tasks[0].command == "echo shared"


def test_a_variant_can_skip_a_task(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(
        tmp_path / "e.yaml",
        """\
        experiment_id: e
        tasks: [tasks]
        variants: [{variant_id: a}, {variant_id: b, skip: true}]
        """,
    )

    assert keys(load_tasks(experiment=experiment)) == ["a/t/00"]


def test_tag_filters_apply_to_experiment_tasks(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "fast.yaml", MINIMAL + "tags: [fast]\n")
    write(tmp_path / "tasks" / "slow.yaml", MINIMAL + "tags: [slow]\n")
    experiment = write(tmp_path / "e.yaml", EXPERIMENT)

    loaded = load_tasks(experiment=experiment, exclude_tags=["slow"])

    assert {t.task_id for t in loaded.tasks} == {"fast"}
    assert len(loaded.tasks) == 5


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("experiment_id: e\ntasks: [unclosed\n", "invalid YAML"),
        ("- a list\n", "expected a mapping"),
        ("experiment_id: e\ntasks: [tasks]\nbogus: 1\n", "unknown key 'bogus'"),
        ("experiment_id: e\n", "tasks"),
        ("experiment_id: e\ntasks: []\n", "tasks"),
        ("experiment_id: Bad Id\ntasks: [tasks]\n", "experiment_id"),
        ("experiment_id: e\ntasks: [tasks]\nrepeats: 0\n", "repeats"),
        (
            "experiment_id: e\ntasks: [tasks]\nvariants: [{variant_id: a, colour: red}]\n",
            "unknown key 'variants.0.colour'",
        ),
        ("experiment_id: e\ntasks: [tasks]\nvariants: [{model: m}]\n", "variant_id"),
        ("experiment_id: e\ntasks: [missing/]\n", "no such task file or folder"),
    ],
)
def test_a_broken_experiment_file_raises_with_the_reason(
    tmp_path: Path, text: str, reason: str
) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", text)

    with pytest.raises(TaskLoadError) as info:
        load_tasks(experiment=experiment)

    assert reason in str(info.value)


def test_a_missing_experiment_file_raises(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError, match="cannot read"):
        load_tasks(experiment=tmp_path / "nope.yaml")


def test_duplicate_variant_ids_are_rejected(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(
        tmp_path / "e.yaml",
        "experiment_id: e\ntasks: [tasks]\nvariants: [{variant_id: a}, {variant_id: a}]\n",
    )

    with pytest.raises(TaskLoadError, match="variant_id"):
        load_tasks(experiment=experiment)


def test_a_workdir_from_experiment_defaults_is_relative_to_the_experiment_file(
    tmp_path: Path,
) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(
        tmp_path / "e.yaml",
        "experiment_id: e\ntasks: [tasks]\ndefaults: {workdir: fixtures/shared}\n",
    )

    [task] = load_tasks(experiment=experiment).tasks

    assert task.workdir == str((tmp_path / "fixtures" / "shared").resolve())


# -- definition hashes ---------------------------------------------------------------------


def test_definition_hash_ignores_replicate_index_and_key(tmp_path: Path) -> None:
    path = write(tmp_path / "t.yaml", MINIMAL)

    tasks = load_tasks([path], overrides=Overrides(repeats=3)).tasks

    assert len({t.task_key for t in tasks}) == 3
    assert len({t.definition_hash for t in tasks}) == 1
    assert "task_key" not in tasks[0].definition()
    assert "replicate_index" not in tasks[0].definition()


def test_a_definition_is_recorded_without_its_defaults_and_hashed_as_before(
    tmp_path: Path,
) -> None:
    task = load_tasks([write(tmp_path / "t.yaml", MINIMAL)]).tasks[0]

    assert set(task.definition()) == {"task_id", "variant_id", "source", "command",
                                      "success_criteria"}
    # The hash 0.1 recorded for this task: runs it recorded show no drift.
    assert task.definition_hash == (
        "24f3dc77024c162e480400882ab93197bc9c5b5dd6adce55bfd32a9f689c2200")
    assert content_hash(evaluated(complete(task.definition()))) == task.definition_hash


def test_what_a_recorded_definition_leaves_out_is_the_models_default() -> None:
    # Frozen as recorded: a default changed in the model later must not change what
    # old records mean (this fails first, to be decided).
    for name, value in _FIRST_DEFAULTS.items():
        default = ResolvedTask.model_fields[name].get_default(call_default_factory=True)
        assert to_jsonable_python(default) == value, name


def test_definition_hash_ignores_where_the_suite_sits(tmp_path: Path) -> None:
    # Moving a whole suite (task file and its workdir together) is not drift.
    for home in ("a", "b/deeper"):
        write(tmp_path / home / "fixtures" / "w" / "f.txt", "x")
        write(tmp_path / home / "t.yaml", MINIMAL + "workdir: fixtures/w\n")
    here, there = (load_tasks([tmp_path / h / "t.yaml"]).tasks[0] for h in ("a", "b/deeper"))

    assert here.source != there.source and here.workdir != there.workdir
    assert here.definition_hash == there.definition_hash
    assert here.definition_hash != content_hash(here.definition())


def test_definition_hash_is_stable_across_loads(tmp_path: Path) -> None:
    path = write(tmp_path / "t.yaml", MINIMAL + "env: {B: 2, A: 1}\n")

    first = load_tasks([path]).tasks[0].definition_hash
    second = load_tasks([path]).tasks[0].definition_hash

    assert first == second
    assert len(first) == 64


@pytest.mark.parametrize(
    "change",
    [
        "prompt: do something else\n",
        "command: echo bye\n",
        "success_criteria: [{type: exit_code, equals: 1}]\n",
        "success_criteria: [{type: exit_code, weight: 2}]\n",
        "timeout: 5\n",
        "env: {X: '1'}\n",
        "model: m2\n",
    ],
)
def test_definition_hash_changes_with_the_definition(tmp_path: Path, change: str) -> None:
    base = "prompt: do something\ncommand: echo hi\nsuccess_criteria: [{type: exit_code}]\n"
    name = change.split(":")[0]
    changed = "\n".join(
        line for line in base.splitlines() if not line.startswith(name + ":")
    ) + "\n" + change
    before = write(tmp_path / "a" / "t.yaml", base)
    after = write(tmp_path / "b" / "t.yaml", changed)
    # Same source path for both, so only the content differs.
    hash_before = load_tasks([before]).tasks[0].definition_hash
    after.replace(before)
    hash_after = load_tasks([before]).tasks[0].definition_hash

    assert hash_before != hash_after


@pytest.mark.parametrize("change", [
    "description: something else entirely\n",
    "tags: [other, labels]\n",
    "expect: failure\n",
])
def test_annotations_leave_the_definition_hash_alone(tmp_path: Path, change: str) -> None:
    # They name, label or judge a task; none changes what runs or how it is graded.
    path = write(tmp_path / "t.yaml", MINIMAL)
    before = load_tasks([path]).tasks[0]
    write(path, MINIMAL + change)
    after = load_tasks([path]).tasks[0]

    assert before.definition() != after.definition()  # recorded as they are
    assert before.definition_hash == after.definition_hash
    assert before.legacy_hash != after.legacy_hash  # what older versions hashed


def test_the_legacy_hash_is_the_hash_older_versions_computed(tmp_path: Path) -> None:
    # Runs recorded before annotations left the hash hold this one in their fingerprints.
    write(tmp_path / "fixtures" / "w" / "f.txt", "x")
    path = write(tmp_path / "t.yaml", MINIMAL + "workdir: fixtures/w\ntags: [a]\n")
    task = load_tasks([path]).tasks[0]
    # The keys added since (expect, isolation, ...) left out: older versions had none.
    old = task.model_dump(mode="json", exclude={
        "task_key", "replicate_index", "ray", "expect", "source", "isolation", "network",
        "env_passthrough", "binds", "image", "dockerfile", "stall_timeout", "stall_action",
        "max_output", "limits", "gateway", "allow_domains",
        "retries", "agent_version_command"})
    old["workdir"] = "fixtures/w"

    assert "expect" not in task.definition()  # a task without one is recorded as before
    assert task.legacy_hash == content_hash(old)


@pytest.mark.parametrize(("written", "meant"), [
    ("failure", "failure"), ("TIMEOUT", "timeout"), ("failed", "failed"), ("Error", "error"),
])
def test_expect_takes_a_category_or_a_status_in_either_case(
        tmp_path: Path, written: str, meant: str) -> None:
    path = write(tmp_path / "t.yaml", MINIMAL + f"expect: {written}\n")
    assert load_tasks([path]).tasks[0].expect == meant


@pytest.mark.parametrize("written", ["success", "not_graded", "interrupted", "[failure]"])
def test_expect_refuses_what_is_not_a_way_to_not_succeed(tmp_path: Path, written: str) -> None:
    path = write(tmp_path / "t.yaml", MINIMAL + f"expect: {written}\n")
    loaded = load_tasks([path])
    assert loaded.tasks == [] and loaded.skipped[0].reason.startswith("expect: ")


@pytest.mark.parametrize(("expect", "status", "met"), [
    (None, FinalStatus.SUCCESS, True), (None, FinalStatus.NOT_GRADED, True),
    (None, FinalStatus.FAILURE, False), ("failure", FinalStatus.FAILURE, True),
    ("failure", FinalStatus.TIMEOUT, False), ("failed", FinalStatus.TIMEOUT, True),
    ("failed", FinalStatus.COST_BUDGET_EXCEEDED, True), ("timeout", FinalStatus.TIMEOUT, True),
    ("error", FinalStatus.BUILD_FAILED, True), ("build_failed", FinalStatus.ERROR, False),
    ("failed", FinalStatus.SUCCESS, False), ("failed", FinalStatus.ERROR, False),
])
def test_an_expectation_is_met_by_its_status_or_its_category(
        expect: str | None, status: FinalStatus, met: bool) -> None:
    assert meets(expect, status) is met


def test_variants_of_one_task_have_different_hashes(tmp_path: Path) -> None:
    write(tmp_path / "tasks" / "t.yaml", MINIMAL)
    experiment = write(tmp_path / "e.yaml", EXPERIMENT)

    tasks = by_key(load_tasks(experiment=experiment))

    assert tasks["baseline/t/00"].definition_hash == tasks["baseline/t/01"].definition_hash
    assert tasks["baseline/t/00"].definition_hash != tasks["candidate/t/00"].definition_hash


def test_a_file_that_fails_in_one_variant_is_skipped_whole(tmp_path: Path) -> None:
    # Regression: earlier variants' tasks were kept while the file was also reported
    # skipped, and later variants were silently dropped.
    write(tmp_path / "tasks" / "t.yaml", "success_criteria: [{type: exit_code}]\n")
    experiment = write(
        tmp_path / "e.yaml",
        "experiment_id: e\ntasks: [tasks]\nvariants:\n"
        "  - {variant_id: a, command: echo a}\n"
        "  - {variant_id: b}\n"
        "  - {variant_id: c, command: echo c}\n",
    )

    loaded = load_tasks(experiment=experiment)

    assert loaded.tasks == []
    assert [s.path for s in loaded.skipped] == [str(tmp_path / "tasks" / "t.yaml")]
    assert "command" in loaded.skipped[0].reason


# -- ray resources -------------------------------------------------------------------------


def test_ray_resources_resolve_and_stay_out_of_the_definition(tmp_path: Path) -> None:
    plain = write(tmp_path / "a" / "t.yaml", MINIMAL)
    asking = write(tmp_path / "b" / "t.yaml",
                   MINIMAL + "ray: {num_cpus: 0.5, memory: 1000, resources: {docker: 1}}\n")
    [before], [after] = load_tasks([plain]).tasks, load_tasks([asking]).tasks
    assert (after.ray.num_cpus, after.ray.memory, after.ray.resources) == (0.5, 1000,
                                                                           {"docker": 1})
    assert before.ray.num_cpus == 1  # the default: one CPU per attempt
    # Where an attempt may run is not what the task is: asking for more is no drift.
    assert "ray" not in after.definition()
    assert before.definition_hash == after.definition_hash


@pytest.mark.parametrize(("ask", "said"), [
    ("resources: {CPU: 1}", "CPU is set with its own key (num_cpus)"),
    ("resources: {docker: 0.00001}", "docker is finer than 0.0001"),
    ("num_cpus: 0.123456", "finer than 0.0001"),
    ("num_gpus: -1", "greater than or equal to 0"),
    ("cpus: 1", "unknown key 'ray.cpus'"),
])
def test_a_ray_ask_ray_would_refuse_is_a_skipped_file(tmp_path: Path, ask: str,
                                                       said: str) -> None:
    bad = write(tmp_path / "bad.yaml", MINIMAL + f"ray: {{{ask}}}\n")
    assert said in only_skip(load_tasks([bad])).reason


# -- isolation keys ---------------------------------------------------------------------


def test_isolation_keys_at_their_defaults_leave_the_definition_and_hash_as_before(
    tmp_path: Path
) -> None:
    plain = load_tasks([write(tmp_path / "a" / "t.yaml", MINIMAL)]).tasks[0]
    said = load_tasks([write(tmp_path / "b" / "t.yaml", MINIMAL + "isolation: none\n"
                             "network: none\nenv_passthrough: []\nbinds: {}\n")]).tasks[0]
    for task in (plain, said):
        assert not {"isolation", "network", "env_passthrough", "binds"} & set(task.definition())
    assert plain.definition_hash == said.definition_hash


def test_changing_the_isolation_is_drift_and_run_isolation_overrides_the_file(
    tmp_path: Path
) -> None:
    path = write(tmp_path / "t.yaml", MINIMAL)
    before = load_tasks([path]).tasks[0]
    confined = load_tasks([path], overrides=Overrides(isolation="bwrap")).tasks[0]
    assert confined.isolation == "bwrap" and confined.definition()["isolation"] == "bwrap"
    assert confined.definition_hash != before.definition_hash
    write(path, MINIMAL + "isolation: bwrap\nnetwork: host\n")
    assert load_tasks([path], overrides=Overrides(isolation="none")).tasks[0].isolation == "none"


def test_binds_are_paths_from_the_file_that_set_them_and_merge_across_layers(
    tmp_path: Path
) -> None:
    write(tmp_path / "exp" / "experiment.yaml", """\
        experiment_id: e
        tasks: [tasks/]
        defaults: {binds: {AGENT: tools/agent.py, DATA: data}, env_passthrough: [API_KEY]}
        variants: [{variant_id: v, env_passthrough: [OTHER_KEY, API_KEY]}]
        """)
    write(tmp_path / "exp" / "tasks" / "t.yaml",
          MINIMAL + "binds: {DATA: ../fixtures/data}\nenv_passthrough: [TASK_KEY]\n")
    task = load_tasks(experiment=tmp_path / "exp" / "experiment.yaml").tasks[0]
    assert task.binds == {"AGENT": str((tmp_path / "exp" / "tools" / "agent.py").resolve()),
                          "DATA": str((tmp_path / "exp" / "fixtures" / "data").resolve())}
    assert task.env_passthrough == ["API_KEY", "TASK_KEY", "OTHER_KEY"]
    # Moving the suite keeps the hash: binds are compared relative to the task file.
    shutil.copytree(tmp_path / "exp", tmp_path / "moved")
    moved = load_tasks(experiment=tmp_path / "moved" / "experiment.yaml").tasks[0]
    assert moved.definition_hash == task.definition_hash


@pytest.mark.parametrize(("text", "said"), [
    ("binds: {'A=B': x}\n", "cannot be an environment variable name"),
    ("env_passthrough: ['']\n", "cannot be an environment variable name"),
    ("isolation: docker-ish\n", "isolation"),
    ("isolation: docker\n", "isolation docker: the task needs an image or a dockerfile"),
    ("network: bridge\n", "network"),
])
def test_bad_isolation_keys_skip_the_file_saying_why(tmp_path: Path, text: str, said: str) -> None:
    loaded = load_tasks([write(tmp_path / "t.yaml", MINIMAL + text)])
    assert not loaded.tasks and said in loaded.skipped[0].reason


@pytest.mark.parametrize(("text", "size"), [
    ("", DEFAULT_MAX_OUTPUT), ("max_output: 2000\n", 2000), ("max_output: 50MB\n", 50_000_000),
    ("max_output: 1 GiB\n", 1 << 30),
])
def test_max_output_reads_a_size(tmp_path: Path, text: str, size: int) -> None:
    task = load_tasks([write(tmp_path / "t.yaml", MINIMAL + text)]).tasks[0]
    assert task.max_output == size
    # Recorded (and hashed) only when not the default: a task without it is as before.
    assert task.definition().get("max_output") == (None if size == DEFAULT_MAX_OUTPUT else size)


@pytest.mark.parametrize("text", ["max_output: 0\n", "max_output: lots\n", "max_output: 1.5\n"])
def test_a_max_output_that_is_no_size_skips_the_file_saying_why(tmp_path: Path,
                                                               text: str) -> None:
    loaded = load_tasks([write(tmp_path / "t.yaml", MINIMAL + text)])
    assert not loaded.tasks and "max_output" in loaded.skipped[0].reason


def test_a_run_commands_binds_are_anchored_at_its_file_and_moving_the_folder_is_no_drift(
    tmp_path: Path,
) -> None:
    """A criterion's binds resolve from the file that set the criteria; a criterion
    without binds is recorded (and hashed) as before binds existed; a whole suite moved
    elsewhere keeps its definition hash."""
    body = ("command: echo\nsuccess_criteria:\n"
            "  - {type: run_command, command: 'true', binds: [helper.sh]}\n"
            "  - {type: run_command, command: 'true'}\n")
    first = write(tmp_path / "a" / "t.yaml", body)
    missing = load_tasks([first]).skipped  # a typo must not fail every attempt
    assert [s.reason for s in missing] == [
        f"success_criteria: binds {tmp_path / 'a' / 'helper.sh'} does not exist"]
    write(tmp_path / "a" / "helper.sh", "exit 0\n")
    write(tmp_path / "b" / "helper.sh", "exit 0\n")
    task = load_tasks([first]).tasks[0]
    bound, _ = task.success_criteria
    assert isinstance(bound, RunCommand) and bound.binds == [str(tmp_path / "a" / "helper.sh")]
    assert "binds" not in task.definition()["success_criteria"][1]
    moved = write(tmp_path / "b" / "t.yaml", body)
    assert load_tasks([moved]).tasks[0].definition_hash == task.definition_hash
