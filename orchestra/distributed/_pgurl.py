"""PostgreSQL URLs: shown with the password hidden, and where they point."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .._exceptions import ConfigError

__all__ = ["redacted", "where"]


def redacted(url: str) -> str:
    """``url`` with its password (in the user part or the query) replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:***@{hosts}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def where(url: str, shown: str) -> str:
    """``host:port/database`` of a PostgreSQL URL (``shown``: the URL as messages
    show it); :class:`ConfigError` if it is not one."""
    if urlsplit(url).scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"a PostgreSQL store needs a postgresql:// URL, got {shown!r}")
    try:
        urlsplit(url).port  # noqa: B018 - a port that is not a number raises ValueError
        info = conninfo_to_dict(url)
    except (ValueError, psycopg.Error) as exc:
        raise ConfigError(f"not a valid PostgreSQL URL: {shown!r}") from exc
    host = info.get("host") or info.get("hostaddr") or "localhost"
    port = info.get("port") or 5432
    database = info.get("dbname") or info.get("user") or ""
    return f"{host}:{port}/{database}"
