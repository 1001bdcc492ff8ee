"""The console in a real browser against a real cluster: the grid follows a kill -9 and
a preferred election without a reload, lag appears and drains, the skew view flags a hot
key, a reassignment started in the page completes (once), hostile names stay text."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from partita.client.sync import Admin, Consumer, Producer
from partita.local.cluster import LocalCluster
from tests.console.conftest import ConsoleServer, until

pytestmark = pytest.mark.timeout(240)

EVIL_GROUP = "<script>alert(1)</script>"
EVIL_CLIENT = "<img src=x onerror=alert(2)>"
EVIL_KEY = "<svg onload=alert(3)>"


def admin_of(cluster: LocalCluster) -> Admin:
    return Admin(cluster.bootstrap)


def produce(
    cluster: LocalCluster, topic: str, records: list[tuple[bytes | None, bytes]], **options: Any
) -> None:
    with Producer(cluster.bootstrap, linger_ms=5) as producer:
        futures = [producer.send(topic, value, key, **options) for key, value in records]
        producer.flush(60)
        for future in futures:
            future.result(30)


def leader_cell(browser: Any, topic: str, partition: int) -> int:
    cell = browser.find_element(
        By.CSS_SELECTOR, f'td[data-tp="{topic}/{partition}"][data-role="leader"]'
    )
    return int(cell.get_attribute("data-broker"))


def role(browser: Any, topic: str, partition: int, broker: int) -> str:
    cell = browser.find_element(
        By.CSS_SELECTOR, f'td[data-tp="{topic}/{partition}"][data-broker="{broker}"]'
    )
    return str(cell.get_attribute("data-role"))


def no_alert(browser: Any) -> None:
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018  (the property raises when no alert is open)


def texts(browser: Any, css: str) -> list[str]:
    """The text of each element matching ``css``, read in one go in the page (the live part
    is swapped every half second: a WebElement found before a swap goes stale)."""
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())", css
    )
    return found


def click(browser: Any, by: str, what: str) -> None:
    """Click, finding the element again if the live part was swapped under it."""
    until(lambda: browser.find_element(by, what).click() or True, 10, f"click {what}")


def mark_page(browser: Any) -> None:
    """A value that a reload would lose: the page must keep it while it updates."""
    browser.execute_script("window.__kept = 'still here'")


def not_reloaded(browser: Any) -> bool:
    return bool(browser.execute_script("return window.__kept") == "still here")


def test_the_grid_follows_a_kill_and_a_preferred_election_without_a_reload(
    console_cluster: LocalCluster,
    console: ConsoleServer,
    browser: Any,
    screenshot: Callable[[str], Path],
) -> None:
    with admin_of(console_cluster) as admin:
        admin.create_topic("grid", 3, 3)
        until(
            lambda: all(p.leader >= 0 for p in admin.describe_topics(["grid"])[0].partitions),
            30,
            "leaders",
        )
        preferred = admin.describe_topics(["grid"])[0].partitions[0].replicas[0]
    browser.get(f"{console.url}/cluster?topic=grid")
    until(lambda: leader_cell(browser, "grid", 0) == preferred, 20, "the grid names P0's leader")
    mark_page(browser)

    console_cluster.broker(preferred).kill()
    until(
        lambda: leader_cell(browser, "grid", 0) != preferred, 20, "a new leader for P0 in the grid"
    )
    until(
        lambda: "(down)" in browser.find_element(By.ID, "grid").text,
        20,
        "the killed broker shown down",
    )
    assert not_reloaded(browser)

    console_cluster.broker(preferred).start()
    until(
        lambda: role(browser, "grid", 0, preferred) == "follower", 60, "the broker back in the ISR"
    )
    with admin_of(console_cluster) as admin:

        def elected() -> bool:
            answers = admin.elect_leaders(True, [("grid", 0), ("grid", 1), ("grid", 2)])
            return all(code in (0, 84) for code, _message in answers.values())  # 84: already

        until(elected, 30, "the preferred election")
    until(
        lambda: leader_cell(browser, "grid", 0) == preferred,
        20,
        "the preferred leader back in the grid",
    )
    assert not_reloaded(browser)
    screenshot("cluster-grid")


def test_lag_appears_and_drains_for_a_real_consumer_group(
    console_cluster: LocalCluster,
    console: ConsoleServer,
    browser: Any,
    screenshot: Callable[[str], Path],
) -> None:
    with admin_of(console_cluster) as admin:
        admin.create_topic("lagging", 3, 3)
    produce(console_cluster, "lagging", [(str(i % 30).encode(), b"x" * 100) for i in range(3000)])
    with admin_of(console_cluster) as admin:
        admin.alter_group_offsets("drainers", {("lagging", p): 0 for p in range(3)})
    browser.get(f"{console.url}/group?id=drainers")
    mark_page(browser)
    until(lambda: texts(browser, "#total-lag") == ["3000"], 20, "lag 3000 shown")

    with Consumer(
        console_cluster.bootstrap, group_id="drainers", enable_auto_commit=False
    ) as consumer:
        consumer.subscribe(["lagging"])
        read = 0
        deadline = time.monotonic() + 60
        while read < 3000 and time.monotonic() < deadline:
            read += len(consumer.poll(1000))
            consumer.commit()
        assert read == 3000
        until(lambda: texts(browser, "#total-lag") == ["0"], 20, "the lag drained")
        assert not_reloaded(browser)
        screenshot("group")
        browser.get(f"{console.url}/groups")
        screenshot("groups")


def test_the_skew_view_flags_a_topic_written_with_one_hot_key(
    console_cluster: LocalCluster,
    console: ConsoleServer,
    browser: Any,
    screenshot: Callable[[str], Path],
) -> None:
    with admin_of(console_cluster) as admin:
        admin.create_topic("skewed", 6, 2)
        admin.create_topic("even", 6, 2)
    produce(
        console_cluster,
        "skewed",
        [(b"customer-42", b"x" * 200)] * 1500
        + [(f"c{i}".encode(), b"y" * 200) for i in range(300)],
    )
    produce(console_cluster, "even", [(f"c{i}".encode(), b"y" * 200) for i in range(1800)])

    browser.get(f"{console.url}/topic?name=skewed")
    until(lambda: browser.find_element(By.ID, "skew-flag"), 20, "the skew flag")
    until(lambda: texts(browser, "table.keys tr.hot td.key") == ["customer-42"], 10, "one hot key")
    until(lambda: texts(browser, "#hot-key-flag"), 10, "the hot-key note")
    until(lambda: "Salt the key" in texts(browser, "ul.remedies")[0], 10, "the remedies")
    screenshot("topic")

    browser.get(f"{console.url}/topic?name=even")
    until(lambda: browser.find_element(By.ID, "skew-even"), 20, "an even topic is not flagged")
    assert texts(browser, "table.keys tr.hot") == []

    browser.get(f"{console.url}/topics")
    until(lambda: texts(browser, 'tr[data-topic="skewed"] .tag.hot') == ["skewed"], 10, "flagged")
    assert texts(browser, 'tr[data-topic="even"] .tag.hot') == []
    screenshot("topics")


def test_a_topic_deleted_under_its_page_is_said_so(
    console_cluster: LocalCluster, console: ConsoleServer, browser: Any
) -> None:
    with admin_of(console_cluster) as admin:
        admin.create_topic("doomed", 2, 2)
    produce(console_cluster, "doomed", [(None, b"z")] * 10)
    browser.get(f"{console.url}/topic?name=doomed")
    until(lambda: "10 records" in browser.find_element(By.ID, "live").text, 20, "the topic shown")
    mark_page(browser)
    with admin_of(console_cluster) as admin:
        admin.delete_topic("doomed")
    until(
        lambda: browser.find_element(By.ID, "topic-missing"), 20, "the page says the topic is gone"
    )
    assert not_reloaded(browser)


def test_a_reassignment_started_in_the_page_completes_once(
    console_cluster: LocalCluster,
    console: ConsoleServer,
    browser: Any,
    screenshot: Callable[[str], Path],
) -> None:
    with admin_of(console_cluster) as admin:
        admin.create_topic("moving", 4, 2)
    produce(console_cluster, "moving", [(f"k{i}".encode(), b"m" * 500) for i in range(2000)])
    browser.get(f"{console.url}/reassign")
    until(lambda: browser.find_element(By.ID, "plan-form"), 10)
    until(lambda: "moving" in browser.find_element(By.NAME, "topic").text, 20, "the topic listed")
    for broker in ("1", "2", "3"):
        box = f'input[name="broker"][value="{broker}"]'
        checked = browser.execute_script(f"return document.querySelector('{box}').checked")
        if checked != (broker != "3"):  # brokers 1 and 2 checked, 3 drained
            click(browser, By.CSS_SELECTOR, box)
    until(lambda: Select(browser.find_element(By.NAME, "topic")).select_by_value("moving") or 1)
    click(browser, By.ID, "make-plan")
    until(lambda: browser.find_element(By.ID, "execute"), 10, "the plan page")
    assert int(texts(browser, "#moved")[0]) > 0
    token = browser.execute_script("return document.querySelector('input[name=token]').value")
    screenshot("reassign-plan")
    click(browser, By.ID, "execute")
    until(lambda: browser.find_element(By.ID, "finished"), 90, "the reassignment done")
    screenshot("reassign")

    # Confirmed again (a resent form, a second tab): refused, nothing sent twice.
    status, page = console.post("/reassign/execute", {"token": token})
    assert status == 409 and "already executed" in page

    browser.get(f"{console.url}/cluster?topic=moving")
    until(lambda: browser.find_elements(By.CSS_SELECTOR, 'td[data-tp="moving/0"]'), 10)
    assert texts(browser, 'td[data-broker="3"][data-role="leader"]') == []
    assert texts(browser, 'td[data-broker="3"][data-role="follower"]') == []
    with admin_of(console_cluster) as admin:
        assert all(3 not in p.replicas for p in admin.describe_topics(["moving"])[0].partitions)


def test_hostile_names_render_as_text(
    console_cluster: LocalCluster, console: ConsoleServer, browser: Any
) -> None:
    with admin_of(console_cluster) as admin:
        admin.create_topic("evil", 2, 2)
    produce(
        console_cluster,
        "evil",
        [(EVIL_KEY.encode(), b"v")] * 50,
        headers=[(EVIL_GROUP, EVIL_GROUP.encode())],
    )
    with Consumer(
        console_cluster.bootstrap,
        group_id=EVIL_GROUP,
        client_id=EVIL_CLIENT,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as member:
        member.subscribe(["evil"])
        until(lambda: member.poll(500), 30, "the member reads")
        member.commit()
        browser.get(f"{console.url}/groups")
        until(lambda: EVIL_GROUP in texts(browser, "td.group-id"), 20, "the group listed as text")
        no_alert(browser)
        click(browser, By.XPATH, f'//td[@class="group-id"]/a[text()="{EVIL_GROUP}"]')
        until(lambda: EVIL_CLIENT in texts(browser, "td.client-id"), 20, "the client id as text")
        no_alert(browser)
        assert texts(browser, "h1") == [f"Group {EVIL_GROUP}"]
    browser.get(f"{console.url}/topic?name=evil")
    until(lambda: EVIL_KEY in texts(browser, "td.key"), 20, "the key as text")
    no_alert(browser)
    # Only the console's own script is in the page; no injected element exists.
    assert browser.execute_script("return document.scripts.length") == 1
    assert (
        browser.execute_script("return document.querySelectorAll('img, svg[onload]').length") == 0
    )
    assert console.get(f"/group?id={quote(EVIL_GROUP)}")[0] == 200


def test_the_sizing_advisor_measures_and_answers(
    console_cluster: LocalCluster,
    console: ConsoleServer,
    browser: Any,
    screenshot: Callable[[str], Path],
) -> None:
    browser.get(f"{console.url}/sizing")
    field = browser.find_element(By.NAME, "seconds")
    field.clear()
    field.send_keys("1")
    click(browser, By.ID, "advise")
    answer = until(lambda: browser.find_element(By.ID, "advice"), 90, "the advice")
    count = int(answer.text.split()[0])
    assert count >= 3 and count % 3 == 0  # spread evenly over the 3 brokers
    screenshot("sizing")

    # Last in the module: the whole cluster, every topic the tests made, for the README.
    browser.get(f"{console.url}/cluster")
    until(
        lambda: (
            len(heads := texts(browser, "#grid th.tp")) >= 20
            and not any("partita-advise" in head for head in heads)
        ),
        20,
        "the grid of every topic, the advisor's scratch topic gone",
    )
    screenshot("cluster")
    with admin_of(console_cluster) as admin:
        assert not [t.name for t in admin.describe_topics() if t.name.startswith("partita-advise-")]
