"""Dependencies on workers (issue 49): made by each worker from the reference the
root was submitted with, never saved; instructions computed once per run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from distributed_support import finished, wait_until, workers

from orchestra import ConfigError, Status
from orchestra.distributed import AGENTS_KEY, DEPS_KEY, Cluster, submit
from orchestra.distributed._worker import agent_of_reference

TREE = "tests.distributed.agents:deps_tree"
DEPS = "tests.distributed.agents:incident"


@pytest.mark.parametrize("inline", [0, 8], ids=["queued", "inline"])
def test_tools_read_deps_their_worker_made(
    pg_url: str, tmp_path: Path, sandbox: Path, inline: int
) -> None:
    env = {"ORCHESTRA_TEST_SANDBOX": str(sandbox)}
    agent = agent_of_reference(TREE)
    with workers(pg_url, tmp_path, 2, env, inline=inline), Cluster(pg_url) as cluster:
        root = submit(cluster, agent, "Why did it fail?", metadata={AGENTS_KEY: TREE}, deps=DEPS)
        wait_until(lambda: finished(cluster, root), 90.0, "the tree")
        states = cluster.store.tree(root)
    assert {s.status for s in states} == {Status.COMPLETED}, [s.reason for s in states]
    top = next(s for s in states if s.run_id == root)
    assert top.metadata[DEPS_KEY] == DEPS  # the reference is saved, never the value
    assert top.messages[0]["content"].endswith("depth 0.")
    children = [s for s in states if s.parent_id == root]
    assert len(children) == 3
    assert all(c.messages[0]["content"].endswith("depth 1.") for c in children)
    read = [m["content"] for c in children for m in c.messages if m["role"] == "tool"]
    assert any("WORKER-MADE" in text for text in read), read
    assert all(f"(pid {os.getpid()})" not in text for text in read)  # made by a worker


def test_a_submit_without_the_deps_the_agent_needs_is_refused(pg_url: str) -> None:
    with Cluster(pg_url) as cluster, pytest.raises(ConfigError, match="needs its dependencies"):
        submit(cluster, agent_of_reference(TREE), "Why?", metadata={AGENTS_KEY: TREE})
    with Cluster(pg_url) as cluster, pytest.raises(ConfigError, match="cannot import dependencies"):
        submit(cluster, agent_of_reference(TREE), "Why?", deps="tests.distributed.agents:nope")
