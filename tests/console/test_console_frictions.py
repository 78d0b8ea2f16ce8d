"""``orchestra console`` refuses a store that is not there (unless ``--create``),
and its page approves a call and continues the tree in one step."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from click.testing import CliRunner
from console_support import Served, cli, start_console, stop_console, wait_for

from orchestra import SQLiteStore, Status
from orchestra._cli.main import main
from orchestra._views.exits import OPERATIONAL


def test_a_store_that_is_not_there_is_refused_and_not_created(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    result = CliRunner().invoke(main, ["console", "--store", str(typo), "--port", "0"])
    assert result.exit_code == OPERATIONAL
    assert result.stderr == (
        f"error: no run store at {typo}: no run was saved there (check --store; "
        "--create starts an empty one)\n"
    )
    assert not typo.exists()


def test_create_serves_a_new_empty_store(tmp_path: Path) -> None:
    served = start_console(tmp_path / "new.db", create=True)
    try:
        page = httpx.get(f"{served.url}/", timeout=10).text
        assert str(tmp_path / "new.db") in page
    finally:
        stop_console(served)


def form_of(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the page's form for ``action``."""
    form = re.search(rf'<form[^>]*action="[^"]*/{action}".*?</form>', page, re.S)
    assert form, f"no {action} form on the page"
    return dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', form[0]))


def test_approve_and_continue_runs_the_call_in_one_step(console: Served, tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    store = ("--store", str(console.store))
    root = cli("demo", "destructive", *store, "--dir", str(sandbox), code=6)["run_id"]
    with httpx.Client(base_url=console.url, timeout=10) as browser:
        page = browser.get(f"/runs/{root[:12]}").text  # a prefix is enough
        assert 'id="approve-resume"' in page and ">Approve and continue</button>" in page
        done = browser.post(f"/runs/{root[:12]}/approve-resume", data=form_of(page, "approve"))
        assert done.status_code == 303
        assert done.headers["location"] == f"/runs/{root}?done=approve-resume"
        said = browser.get(done.headers["location"]).text
        assert "Approved; the resume that runs the call started" in said

    def completed() -> bool:
        with SQLiteStore(console.store) as saved:
            return saved.load(root).status is Status.COMPLETED

    wait_for(completed, timeout=60, what="the tree completed")
    assert not (sandbox / "access.log").exists()  # the approved call ran


def test_a_run_at_its_turn_limit_is_granted_turns_from_the_page(
    console: Served, tmp_path: Path
) -> None:
    store = ("--store", str(console.store), "--dir", str(tmp_path / "sandbox"))
    root = cli("demo", "runaway", *store, "--max-turns", "3", "--on-limit", "ask", code=6)
    with httpx.Client(base_url=console.url, timeout=10) as browser:
        page = browser.get(f"/runs/{root['run_id']}").text
        turns = re.search(r'<input[^>]*name="turns"[^>]*>', page)
        assert turns and 'value="3"' in turns[0], page  # what the run asks for, filled in
        form = {**form_of(page, "grant"), "usd": "", "turns": "3", "tokens": ""}
        done = browser.post(f"/runs/{root['run_id']}/grant", data=form)
        assert done.status_code == 303, done.text
    with SQLiteStore(console.store) as saved:
        assert saved.load(root["run_id"]).limits.max_turns == 6
