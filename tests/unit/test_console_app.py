"""The console's pages without a cluster: what an unreachable cluster shows, escaping,
refusals. (Against a real cluster and a real browser: tests/console.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from partita.console.app import create_app
from partita.console.model import (
    Broker,
    Group,
    Member,
    PartitionLag,
    PartitionState,
    Snapshot,
    Topic,
)
from partita.console.state import Console, Settings

EVIL = "<script>alert(1)</script>"
UNREACHABLE = "127.0.0.1:1"


def console_of(client: TestClient) -> Console:
    console: Console = client.app.state.console  # type: ignore[attr-defined]
    return console


@pytest.fixture
def client() -> Iterator[TestClient]:
    # A poll an hour apart: the test sets the snapshot after the first (failed) one.
    app = create_app(Settings(UNREACHABLE, interval_s=3600))
    with TestClient(app) as client:
        sampler = console_of(client).sampler
        deadline = time.monotonic() + 30
        while sampler.version == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield client


def test_an_unreachable_cluster_is_a_message_not_a_trace(client: TestClient) -> None:
    for path in ("/cluster", "/topics", "/groups", "/reassign", "/topic?name=x", "/group?id=y"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert f"cannot read the cluster at {UNREACHABLE}" in page.text, path
        assert "Traceback" not in page.text


def test_odd_query_strings_still_draw_the_page(client: TestClient) -> None:
    for path in ("/cluster?page=-5", "/cluster?page=zz", "/cluster?page=" + "9" * 5000,
                 "/cluster?topic=nope", "/topic", "/group", "/reassign?token=nope",
                 "/topics?page=99999"):  # fmt: skip
        page = client.get(path)
        assert page.status_code == 200, path
        assert "Traceback" not in page.text


def test_unknown_pages_and_views_answer_404_in_words(client: TestClient) -> None:
    page = client.get("/no/such/page")
    assert page.status_code == 404 and "/no/such/page" in page.text
    assert client.get("/stream?view=nothing").status_code == 404


def test_every_value_from_the_cluster_is_escaped(client: TestClient) -> None:
    partition = PartitionState("t", 0, 1, (1,), (1,), (), 0, 10, {1: 100})
    console_of(client).sampler.snapshot = Snapshot(
        time.time(),
        "c",
        1,
        (Broker(1, "127.0.0.1", 9092, EVIL),),
        (Topic("t", False, (partition,)),),
        (
            Group(
                EVIL,
                "Stable",
                "range",
                (Member(EVIL, EVIL, EVIL, (("t", 0),)),),
                (PartitionLag("t", 0, 5, 10, EVIL),),
            ),
        ),
        warnings=(EVIL,),
    )
    for path in ("/cluster", "/groups", f"/group?id={EVIL}"):
        page = client.get(path)
        assert page.status_code == 200
        assert EVIL not in page.text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text, path


def test_a_plan_cannot_be_executed_unknown_and_forms_refuse_bad_input(client: TestClient) -> None:
    page = client.post("/reassign/execute", data={"token": "made-up"})
    assert page.status_code == 409 and "not known" in page.text
    page = client.post("/reassign/plan", data={"broker": "x"})
    assert page.status_code == 400 and "whole numbers" in page.text
    page = client.post("/sizing", data={"target": "-3"})
    assert page.status_code == 400 and "positive" in page.text


def test_a_read_only_console_executes_nothing() -> None:
    app = create_app(Settings(UNREACHABLE, interval_s=3600, read_only=True))
    with TestClient(app) as client:
        assert client.post("/reassign/execute", data={"token": "t"}).status_code == 403
        page = client.post("/sizing", data={"target": "10"})
        assert page.status_code == 403 and "read-only" in page.text


def test_ten_thousand_partitions_are_paginated(client: TestClient) -> None:
    partitions = tuple(
        PartitionState("big", i, 1 + i % 3, (1 + i % 3, 1 + (i + 1) % 3), (1 + i % 3,), (), 0, i)
        for i in range(10_000)
    )
    brokers = tuple(Broker(b, "127.0.0.1", 9000 + b, None) for b in (1, 2, 3))
    console_of(client).sampler.snapshot = Snapshot(
        time.time(), "c", 1, brokers, (Topic("big", False, partitions),)
    )
    page = client.get("/cluster?page=84").text
    assert page.count("data-tp=") == 3 * (10_000 - 83 * 120)  # the last page's columns
    assert "of 84</nav>" in page
    page = client.get("/topic?name=big&page=2").text
    assert page.count("data-partition=") == 200
    assert 'data-partition="200"' in page and 'data-partition="399"' in page


def test_a_plan_drawn_before_the_cluster_changed_is_refused(client: TestClient) -> None:
    brokers = tuple(Broker(b, "127.0.0.1", 9000 + b, None) for b in (1, 2, 3))

    def cluster_with(replicas: tuple[int, ...]) -> Snapshot:
        p = PartitionState("t", 0, replicas[0], replicas, replicas, (), 0, 10, {})
        return Snapshot(time.time(), "c", 1, brokers, (Topic("t", False, (p,)),))

    console = console_of(client)
    console.sampler.snapshot = cluster_with((1, 3))
    planned = client.post("/reassign/plan", data={"broker": ["1", "2"]}, follow_redirects=False)
    token = planned.headers["location"].split("token=")[1]
    console.sampler.snapshot = cluster_with((3, 2))  # moved by someone else meanwhile
    page = client.post("/reassign/execute", data={"token": token})
    assert page.status_code == 409 and "changed since this plan was made" in page.text


def test_a_change_asked_by_another_site_is_refused(client: TestClient) -> None:
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        page = client.post("/reassign/execute", data={"token": "t"}, headers=headers)
        assert page.status_code == 403 and "console's own pages" in page.text, headers
    # The console's own page: its origin, or no browser headers at all (curl, a script).
    own = client.post(
        "/reassign/execute",
        data={"token": "t"},
        headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
    )
    assert own.status_code == 409  # past the check: the made-up plan is unknown


def test_a_console_answers_only_to_the_names_it_is_served_under() -> None:
    app = create_app(Settings(UNREACHABLE, interval_s=3600, allowed_hosts=["127.0.0.1"]))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/cluster").status_code == 200
        assert client.get("/cluster", headers={"Host": "rebound.example"}).status_code == 400
