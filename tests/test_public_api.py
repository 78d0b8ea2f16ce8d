"""The public names are the ones we mean to export."""

import orchestra


def test_public_names_resolve_and_are_sorted():
    assert orchestra.__all__ == sorted(orchestra.__all__, key=lambda n: (not n.isupper(), n))
    for name in orchestra.__all__:
        assert getattr(orchestra, name) is not None


def test_constructors_are_keyword_only():
    import pytest

    with pytest.raises(TypeError):
        orchestra.Limits(3)  # type: ignore[misc]
    with pytest.raises(TypeError):
        orchestra.Agent("a", "m")  # type: ignore[misc]
