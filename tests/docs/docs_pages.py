"""The code of the documentation's pages, as the tests run it.

Every page of ``docs/`` and the README is run by ``test_pages.py``, by these rules
(the writer's side is in ``docs/guides/testing.md``):

- A page's ``python`` blocks run in order as one script, in a fresh process
  in an empty directory (also ``$HOME``).
- Its ``sh`` blocks run in order as one bash script (``set -e``), in the same
  directory, after the Python. A command joined with ``&&`` to setting-up
  steps (a virtual environment made or activated, ``pip install``, a clone)
  runs without them: installation is checked by ``tools/check_wheel.py`` and
  by CI itself. ``python -m pytest`` and ``mkdocs serve`` are not run (the
  suite is running; the site is built by ``test_site.py``). A line ending in
  ``# exit N`` (then any words) must exit with N. A line ending in ``&``, or
  a command that serves until stopped (``orchestra console``, ``worker``,
  ``serve-scripted``), starts a process in the background, stopped when the
  page ends (a line that needs it up waits for it, e.g. ``curl --retry 30
  --retry-connrefused``).
- ``python tools/NAME.py ...`` (benchmarks, stress loops: minutes to hours)
  is checked, not run: its ``--help`` (its subcommand's, if the line names
  one) must list every option the line uses
  (the tools have tests of their own); ``python examples/NAME.py`` must name
  a script of ``examples/`` (each is run by ``tests/test_examples.py``).
  ``tools/``, ``examples/``, ``otel/`` and ``docs/`` are linked into the
  directory, as in a clone.
- Both see ``$OPENAI_BASE_URL`` (``orchestra serve-scripted`` in its own
  process: any model name is a scenario of the scripted model),
  ``$OPENAI_API_KEY`` and ``$ORCHESTRA_STORE`` (a SQLite file of the page's
  own); a page that starts with ``<!-- needs: NAME ... -->`` is also given
  ``$ORCHESTRA_PG_URL`` (``postgresql``: a database of its own) or
  ``$OTEL_EXPORTER_OTLP_ENDPOINT`` and ``$ORCHESTRA_JAEGER_URL`` (``jaeger``),
  and is skipped where the service is missing. ``export`` of one of these is
  not run (the page's text shows the reader's own value).
- Other blocks (``text``, ``toml``, no language) are shown, not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.S | re.M)
NEEDS = re.compile(r"\A<!-- needs: ([\w ]+) -->")
SERVICES = ("postgresql", "jaeger")
PROVIDED = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ORCHESTRA_STORE",
    "ORCHESTRA_PG_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "ORCHESTRA_JAEGER_URL",
)
SETUP = re.compile(
    r"^(python3? -m venv |\. \S*activate|source \S*activate|(python3? -m )?pip install |"
    r"git clone |cd orchestra$)"
)
NOT_RUN = re.compile(r"^(python3? -m pytest|mkdocs serve)\b")
SERVES = re.compile(r"^orchestra (console|worker|serve-scripted)\b")
REPO_SCRIPT = re.compile(r"^python3? (tools|examples)/(\w+)\.py\b(.*)$")
EXPECT = re.compile(r"\s+#\s*exit (\d+)\b.*$")


@attrs.frozen(kw_only=True)
class Page:
    """One page's runnable code."""

    path: Path
    needs: tuple[str, ...]
    python: str
    shell: str

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def read(path: Path) -> Page:
    """The code of the page at ``path``.

    Raises:
        ValueError: the page needs a service the tests do not know.
    """
    text = path.read_text()
    declared = NEEDS.match(text)
    needs = tuple(declared.group(1).split()) if declared else ()
    unknown = set(needs) - set(SERVICES)
    if unknown:
        raise ValueError(f"{path}: unknown needs {sorted(unknown)}; known: {SERVICES}")
    blocks = FENCE.findall(text)
    python = "\n\n".join(body for lang, body in blocks if lang == "python")
    shell = "\n".join(body for lang, body in blocks if lang == "sh")
    return Page(path=path, needs=needs, python=python, shell=shell_script(shell))


def shell_script(text: str) -> str:
    """The bash script of a page's ``sh`` blocks, by the rules above ('' if nothing runs)."""
    lines = [_runnable(line) for line in _joined(text.splitlines())]
    body = [line for line in lines if line]
    if not body:
        return ""
    return "\n".join(["set -e", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", *body])


def _joined(lines: list[str]) -> list[str]:
    """Lines with their ``\\`` continuations joined."""
    out: list[str] = []
    for line in lines:
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + line.strip()
        else:
            out.append(line)
    return out


def _runnable(line: str) -> str:
    """A line as it runs ('' if it does not)."""
    expect = EXPECT.search(line)
    if expect:
        line = line[: expect.start()]
    steps = [s.strip() for s in line.strip().split(" && ")]
    steps = [s for s in steps if s and not SETUP.match(s) and not s.startswith("#")]
    command = " && ".join(steps)
    if not command or NOT_RUN.match(command) or _exports_provided(command):
        return ""
    script = REPO_SCRIPT.match(command)
    if script:
        return _checked(*script.groups())
    if SERVES.match(command) and not command.endswith("&"):
        return command + " &"
    if expect is None:
        return command
    code = expect.group(1)
    return (
        f"rc=0; {command} || rc=$?; [ $rc -eq {code} ] || "
        f"{{ echo 'expected exit {code}, got '$rc': {_quoted(command)}' >&2; exit 1; }}"
    )


def _checked(folder: str, name: str, arguments: str) -> str:
    """The check of a line running a script of the repository (see above)."""
    path = f"{folder}/{name}.py"
    if folder == "examples":
        return f"test -f {path} || {{ echo 'no {path}' >&2; exit 1; }}"
    words = re.sub(r"\s#.*$", "", arguments).split(" -- ")[0].split()
    command = f"{path} {words[0]}" if words and not words[0].startswith("-") else path
    options = [word.split("=")[0] for word in words if word.startswith("--")]
    checks = [
        f"grep -q -e '{option}' <<<\"$_help\" || {{ echo '{path} has no {option}' >&2; exit 1; }}"
        for option in options
    ]
    return "; ".join([f"_help=$(python {command} --help)", *checks])


def _exports_provided(command: str) -> bool:
    match = re.match(r"^export (\w+)=", command)
    return match is not None and match.group(1) in PROVIDED


def _quoted(command: str) -> str:
    return command.replace("'", "'\\''")


def pages() -> list[Page]:
    """Every page: the README and each page of ``docs/``."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [read(path) for path in paths]
