"""The error of every config problem, and the YAML reader every config file, preset and override value goes through.

:func:`load_yaml` / :func:`load_yaml_text` are ``yaml.safe_load`` with limits: at most ``MAX_YAML_BYTES`` and
``MAX_YAML_NODES`` nodes once aliases are expanded (no alias bombs), integers of at most ``MAX_INT_DIGITS``
characters; every refusal is a one-line :class:`ConfigError`.

>>> load_yaml_text("seeds: [0, 1]")
{'seeds': [0, 1]}
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config key is unknown or holds a value of the wrong type or range (a one-line message)."""


MAX_YAML_BYTES = 1 << 20  # a config file or override value larger than this is refused
MAX_YAML_NODES = 10_000  # nodes of the document, also once every alias is expanded (alias bombs); presets hold < 500
MAX_INT_DIGITS = 64  # characters of one YAML integer


def load_yaml(path: str | Path) -> Any:
    """The YAML document in ``path``, refusing a missing, oversized, undecodable or alias-bomb file (ConfigError).

    The benchmark presets go through here too (``train.bench.load_bench_config``).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ConfigError(f"config {path} is not a file")
        if size > MAX_YAML_BYTES:
            raise ConfigError(f"config {path} is {size} bytes; at most {MAX_YAML_BYTES} are read")
        with path.open("rb") as f:
            data = f.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror or e}") from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(f"config {path} is larger than {MAX_YAML_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    return load_yaml_text(text, f"config {path}")


def load_yaml_text(text: str, source: str = "YAML") -> Any:
    """``yaml.safe_load(text)`` with the size and alias-expansion limits; errors are one-line ConfigErrors."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{source} is larger than {MAX_YAML_BYTES} characters")
    loader = BoundedLoader(text, source)
    try:
        node = loader.get_single_node()  # refused as soon as it composes MAX_YAML_NODES nodes
        if node is None:
            return None
        _check_expanded_size(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source} is not valid YAML: {_one_line(e)}") from None
    except RecursionError:
        raise ConfigError(f"{source} nests too deeply") from None
    finally:
        loader.dispose()


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that stops composing after ``MAX_YAML_NODES`` nodes (before the cost of a huge document
    is spent) and refuses integers longer than ``MAX_INT_DIGITS`` characters (Python's int() limit, a raw
    ValueError, is far beyond any config value)."""

    def __init__(self, text: str, source: str):
        super().__init__(text)
        self.source, self.composed = source, 0

    def compose_node(self, parent, index):  # type: ignore[override]
        self.composed += 1
        if self.composed > MAX_YAML_NODES:
            raise ConfigError(f"{self.source} has more than {MAX_YAML_NODES} nodes; refused")
        return super().compose_node(parent, index)

    def construct_yaml_int(self, node):  # type: ignore[override]
        if len(node.value) > MAX_INT_DIGITS:
            raise ConfigError(f"{self.source}: an integer of {len(node.value)} characters at line "
                              f"{node.start_mark.line + 1}; at most {MAX_INT_DIGITS} are read")
        return super().construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)


def _check_expanded_size(root: yaml.Node, source: str) -> None:
    """Refuse a document whose alias-expanded tree has more than MAX_YAML_NODES nodes, or a recursive alias."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative post-order walk, each distinct node once (its size memoized)
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_YAML_NODES:
                raise ConfigError(f"{source} expands to more than {MAX_YAML_NODES} nodes (aliases); refused")
            continue
        if key in sizes:
            continue
        if key in active:
            raise ConfigError(f"{source} holds a recursive alias; refused")
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _one_line(e: BaseException) -> str:
    """The exception's message on one line (never empty)."""
    text = " ".join(str(e).split())
    return text or type(e).__name__
