"""Reading what people write in YAML (task, experiment and pricing files)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator


def _not_a_boolean(value: Any) -> Any:
    # YAML reads `yes` as True and pydantic would take True as 1: `timeout: yes`
    # must not become a one-second timeout, nor `input: yes` a price of $1.
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    return value


Number = Annotated[float, BeforeValidator(_not_a_boolean)]
Count = Annotated[int, BeforeValidator(_not_a_boolean)]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice is an error, not "last wins"."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged by the base class, may be overridden
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: Path) -> Any:
    """The YAML document in ``path``, every failure a one-line ``ValueError``.

    Raises:
        ValueError: unreadable, not UTF-8, not YAML, a key given twice, a value YAML
            cannot build (``2024-13-45``), or nested too deeply.
    """
    try:
        # A stream with the file's name: YAML's messages then say where (`in "x.yaml",
        # line 3`), not `in "<unicode string>"`.
        stream = io.StringIO(path.read_text(encoding="utf-8"))
        stream.name = str(path)
        return yaml.load(stream, Loader=_Loader)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read: {e}") from e
    except yaml.YAMLError as e:
        raise ValueError(f"invalid YAML: {' '.join(str(e).split())}") from e
    except RecursionError as e:
        raise ValueError("invalid YAML: nested too deeply") from e
    except ValueError as e:  # a value YAML recognised but cannot build, as 2024-13-45
        raise ValueError(f"invalid YAML value (quote it if it is text): {e}") from e
