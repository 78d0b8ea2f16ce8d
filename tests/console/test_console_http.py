"""The console over HTTP, in its own process: pages, live updates, actions and
what keeps other sites out."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.parse
from collections.abc import Iterator

import httpx
import pytest
from cli_processes import ENDLESS, reap
from console_support import Served, cli, start_console, stop_console, wait_for
from test_console_views import hostile_state

from orchestra import SQLiteStore, Status
from orchestra.console._actions import STOP_REASON
from orchestra.console._guard import SECURITY_HEADERS
from orchestra.console._launches import Launch
from orchestra.console._tree_view import doing


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    """A console over a store holding a completed research tree, two runs waiting for
    approval, a tree whose child asks for more budget and a run full of markup;
    the run ids by name."""
    path = tmp_path_factory.mktemp("console") / "runs.db"
    store = ("--store", str(path))
    runs = {
        "research": cli("demo", "research", *store)["run_id"],
        "waiting": cli("demo", "destructive", *store, code=6)["run_id"],
        "other": cli("demo", "destructive", *store, code=6)["run_id"],
        "asking": cli(
            "demo",
            "research_runaway",
            "--child-budget",
            "0.004",
            "--on-limit",
            "ask",
            *store,
            code=6,
        )["run_id"],
    }
    hostile = hostile_state()
    with SQLiteStore(path) as saved:
        saved.save(hostile)
    runs["hostile"] = hostile.run_id
    served = start_console(path)
    try:
        yield served, runs
    finally:
        stop_console(served)


@pytest.fixture
def browser(site: tuple[Served, dict[str, str]]) -> Iterator[httpx.Client]:
    """A client with its own session (cookie jar)."""
    with httpx.Client(base_url=site[0].url, timeout=10.0) as client:
        yield client


def token_of(page: str) -> str:
    found = re.search(r'name="token" value="([0-9a-f]+)"', page)
    assert found, "no form on the page"
    return found[1]


def test_the_runs_page_lists_the_trees_and_starts_a_session(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    _, runs = site
    page = browser.get("/")
    assert page.status_code == 200
    for name in ("research", "waiting", "other"):
        assert f'data-run="{runs[name]}"' in page.text
    assert "waits for a human: delete_file" in page.text
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie
    for header, value in SECURITY_HEADERS.items():
        assert page.headers[header] == value
    assert browser.get("/").headers.get("set-cookie") is None  # the same session


def test_static_files_and_unknown_paths(browser: httpx.Client) -> None:
    css, js = browser.get("/static/console.css"), browser.get("/static/console.js")
    assert css.headers["content-type"].startswith("text/css") and ".node" in css.text
    assert js.headers["content-type"].startswith("text/javascript") and "EventSource" in js.text
    assert browser.get("/static/nope.js").status_code == 404
    missing = browser.get("/runs/run_nope")
    assert missing.status_code == 404 and "no run id starts with" in missing.text


def test_a_run_page_shows_its_tree_transcript_and_events(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    _, runs = site
    root = browser.get(f"/runs/{runs['research'][:12]}").text  # a prefix is enough
    assert root.count('class="node ') == 4  # the root and its three researchers
    assert "of the whole tree, newest first" in root and "run_stopped" in root
    child = re.findall(r'data-run="(run_[0-9a-f]+)"', root)[1]
    page = browser.get(f"/runs/{child}").text
    assert 'class="node s-completed selected"' in page  # the child, looked at
    assert "of this run, newest first" in page and "read_file" in page


def test_everything_from_the_store_is_escaped(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    _, runs = site
    url = "/runs/" + urllib.parse.quote(runs["hostile"], safe="")
    for made in (browser.get("/").text, browser.get(url).text, first_update(browser, url)):
        assert "<script>alert" not in made and "&lt;script&gt;alert" in made
        assert "<script" not in made.replace('<script src="/static/console.js" defer>', "")


def first_update(client: httpx.Client, url: str) -> str:
    """The HTML of the first server-sent update of a page."""
    with client.stream("GET", f"{url}/live") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines) == "event: update"
        data = next(lines)
    parts = json.loads(data.removeprefix("data: "))
    assert set(parts) in ({"summary", "actions", "tree", "transcript", "events"}, {"runs"})
    return "".join(parts.values())


def test_the_runs_page_updates_live(browser: httpx.Client) -> None:
    assert "data-run=" in first_update(browser, "")


def test_a_foreign_host_or_origin_is_refused(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    _, runs = site
    rebound = browser.get("/", headers={"host": "evil.example:80"})
    assert rebound.status_code == 403 and "loopback" in rebound.text
    token = token_of(browser.get(f"/runs/{runs['waiting']}").text)
    foreign = browser.post(
        f"/runs/{runs['waiting']}/reject",
        data={"token": token, "reason": "x"},
        headers={"origin": "http://evil.example"},
    )
    assert foreign.status_code == 403 and "another site" in foreign.text
    assert waiting_call(site, "waiting")["decision"] == "waiting"


def test_an_action_needs_the_token_of_its_own_session(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    _, runs = site
    url = f"/runs/{runs['waiting']}"
    token = token_of(browser.get(url).text)
    with httpx.Client(base_url=site[0].url) as stranger:
        stranger.get("/")  # a session of its own
        for data in ({}, {"token": "0" * 64}, {"token": token}):
            refused = stranger.post(f"{url}/approve", data=data)
            assert refused.status_code == 403 and "reload the page" in refused.text
    assert waiting_call(site, "waiting")["decision"] == "waiting"


def waiting_call(site: tuple[Served, dict[str, str]], name: str) -> dict[str, object]:
    served, runs = site
    with SQLiteStore(served.store) as store:
        state = store.load(runs[name])
    assert state.interruption is not None
    call_id = state.interruption.call_id
    if call_id in state.rejections:
        return {"decision": "rejected", "reason": state.rejections[call_id]}
    approved = any(a.call_id == call_id for a in state.approvals)
    return {"decision": "approved" if approved else "waiting"}


def test_reject_with_a_reason_then_a_second_decision_is_refused(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    _, runs = site
    url = f"/runs/{runs['other']}"
    page = browser.get(url).text
    assert "Waiting for a human" in page and "delete_file" in page
    call_id = re.search(r'name="call_id" value="([^"]+)"', page)
    assert call_id
    form = {"token": token_of(page), "call_id": call_id[1], "reason": "keep <it>"}
    done = browser.post(f"{url}/reject", data=form)
    assert done.status_code == 303 and done.headers["location"] == f"{url}?done=reject"
    assert waiting_call(site, "other") == {"decision": "rejected", "reason": "keep <it>"}
    after = browser.get(done.headers["location"]).text
    assert "Rejected. Resume the tree" in after and 'id="resume"' in after
    assert "(reason: keep &lt;it&gt;)" in after
    again = browser.post(f"{url}/approve", data=form)
    assert again.status_code == 409
    assert "already rejected" in again.text and 'role="alert"' in again.text


def test_a_request_for_more_is_granted_once_from_the_page(
    site: tuple[Served, dict[str, str]], browser: httpx.Client
) -> None:
    served, runs = site
    assert "waits for a human: more budget" in browser.get("/").text  # the list says what
    url = f"/runs/{runs['asking']}"
    page = browser.get(url).text
    assert "Asks for more budget" in page and 'name="usd"' in page
    with SQLiteStore(served.store) as store:
        asking = store.load(store.load(runs["asking"]).interruption.run_id)
    form = {"token": token_of(page), "usd": "0.002"}
    done = browser.post(f"{url}/grant", data=form)
    assert done.status_code == 303 and done.headers["location"] == f"{url}?done=grant"
    assert "Granted. Resume the tree" in browser.get(done.headers["location"]).text
    again = browser.post(f"{url}/grant", data={**form, "usd": "0.5"})
    assert again.status_code == 409 and "already granted otherwise" in again.text
    bad = browser.post(f"{url}/grant", data={**form, "usd": "nan"})
    assert bad.status_code == 409 and "positive amount" in bad.text
    with SQLiteStore(served.store) as store:
        raised = store.load(asking.run_id).limits.max_budget_usd
    assert raised == pytest.approx(asking.limits.max_budget_usd + 0.002)


@pytest.mark.parametrize(
    ("name", "action", "said"),
    [
        ("research", "stop", "is not running: it ended completed"),
        ("research", "resume", "ended completed: there is nothing to resume"),
        ("research", "approve", "waits for no approval"),
        ("hostile", "resume", "ended failed"),
    ],
)
def test_an_action_that_cannot_be_done_says_why(
    site: tuple[Served, dict[str, str]], browser: httpx.Client, name: str, action: str, said: str
) -> None:
    _, runs = site
    token = token_of(browser.get(f"/runs/{runs['waiting']}").text)
    url = "/runs/" + urllib.parse.quote(runs[name], safe="")
    refused = browser.post(f"{url}/{action}", data={"token": token})
    assert refused.status_code == 409
    assert said in refused.text
    assert browser.post(f"{url}/explode", data={"token": token}).status_code == 404


def test_a_resume_that_fails_is_said_on_the_page() -> None:
    failed = Launch(root_id="r", returncode=8, said="error: run r is leased by someone")
    assert failed.failed and not failed.running
    assert not Launch(root_id="r", returncode=6).failed  # stopped again: not a failure
    assert Launch(root_id="r", returncode=-9).failed


def test_a_refused_stop_leaves_no_cancel_request(
    site: tuple[Served, dict[str, str]],
) -> None:
    served, runs = site
    with SQLiteStore(served.store) as store:
        assert store.load(runs["research"]).status is Status.COMPLETED
        assert store.pending_cancels() == {}


def test_stop_of_a_tree_whose_process_died_records_it_stopped(console: Served) -> None:
    command = [*ENDLESS, "demo", "slow_tree", "--store", str(console.store), "--json"]
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with SQLiteStore(console.store) as store:
            root = wait_for(lambda: _in_scans(store, 4), what="4 runs, the children in scans")
        demo.send_signal(signal.SIGKILL)
    finally:
        reap(demo)
    with httpx.Client(base_url=console.url) as client:
        page = client.get(f"/runs/{root}").text
        assert "No process runs this tree any more" in page
        assert 'id="resume"' in page and 'id="stop"' in page
        done = client.post(f"/runs/{root}/stop", data={"token": token_of(page)})
    assert done.status_code == 303
    with SQLiteStore(console.store) as store:
        tree = store.tree(root)
        assert store.pending_cancels() == {}
    assert len(tree) == 4
    assert all(s.status is Status.INTERRUPTED and s.reason == STOP_REASON for s in tree)


def _in_scans(store: SQLiteStore, runs: int) -> str | None:
    """The root of the running tree, once it has ``runs`` runs and every child is in its scan."""
    roots = store.list_runs(limit=1)
    if not roots or roots[0].status is not Status.RUNNING:
        return None
    tree = store.tree(roots[0].run_id)
    scanning = [s for s in tree[1:] if doing(s) == "running scan_archive"]
    return roots[0].run_id if len(tree) == runs and len(scanning) == runs - 1 else None
