"""Registry behaviour: names, dims, options, duplicates."""
import inspect

import pytest

import ndpe
from ndpe.registry import register


def test_available_lists_every_kind_with_dims():
    kinds = ndpe.available()
    assert "none" in kinds and kinds["none"] == (1, 2, 3)
    for name, dims in kinds.items():
        assert set(dims) <= {1, 2, 3} and dims


def test_duplicate_name_raises():
    with pytest.raises(ValueError, match="already registered"):
        register("none")(type("Again", (ndpe.Encoding,), {}))


def test_every_kind_has_keyword_only_init_without_kwargs():
    from ndpe.registry import _KINDS

    for name, cls in _KINDS.items():
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        table_options = [p for p in params if p.kind is p.VAR_KEYWORD]  # rope: its tables' options, declared there
        assert all(p.kind is p.KEYWORD_ONLY for p in params if p not in table_options), name
        assert not table_options or cls.option_tables, name
        assert cls.__doc__, f"kind {name!r} has no docstring"


@pytest.mark.parametrize("kind", [k for k in sorted(ndpe.available()) if ndpe.registry.kind_class(k).option_tables])
def test_a_kind_taking_table_options_refuses_a_typo(kind):
    """**options holds the tables' options only: a typo called on the class itself is a TypeError naming them."""
    cls = ndpe.registry.kind_class(kind)
    if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values()):
        return
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['thetaa'\]; valid options: .*'theta'"):
        cls(dims=cls.supported_dims[0], dim=16, thetaa=1.0)


def test_options_lists_defaults():
    assert ndpe.options("none") == {}


@pytest.mark.parametrize("kind", sorted(ndpe.available()))
def test_repr_shows_every_option_passed(kind):
    """extra_repr is derived from the signature: an option passed explicitly is always in the repr."""
    dims = ndpe.available()[kind][0]
    required = ndpe.registry.kind_class(kind).example_options(dims)
    defaults = {k: v for k, v in ndpe.options(kind).items() if v is not None and v is not inspect.Parameter.empty}
    pe = ndpe.make(dims=dims, kind=kind, dim=48, heads=2, **{**defaults, **required})
    text = repr(pe)
    assert all(f"{name}=" in text for name in [*defaults, *required]), text
