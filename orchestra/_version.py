"""Orchestra's distribution name and installed version, named in one place.

The import name is ``orchestra``; the distribution (what ``pip install``
names) is ``orchestra-trees``, since ``orchestra`` on the public index is an
unrelated project. Versions follow semantic versioning, ``0.y.z`` while the
public API may still change between minor versions (see ``CHANGELOG.md``).
"""

from __future__ import annotations

import functools
from importlib import metadata

__all__ = ["DISTRIBUTION", "installed_version"]

DISTRIBUTION = "orchestra-trees"


@functools.cache
def installed_version() -> str:
    """The installed distribution's version (``0+unknown`` when not installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"
