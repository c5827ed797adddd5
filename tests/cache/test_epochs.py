"""Cache epochs: in-process and real Redis, incl. two processes' views and Redis down."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.threads import race
from wakemark.shared.cache import Epochs, LocalEpochs, RedisEpochs, open_epochs, prefixes
from wakemark.shared.config import Settings

NS = "/actor/a/project/p/"
SIBLING = "/actor/a/project/q/"
OTHER_ACTOR = "/actor/b/project/p/"


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
def epochs(request: pytest.FixtureRequest) -> Iterator[Epochs]:
    made: Epochs
    if request.param == "redis":
        made = RedisEpochs(request.getfixturevalue("redis_url"))
    else:
        made = LocalEpochs()
    yield made
    made.close()


def test_prefixes() -> None:
    assert prefixes(NS) == ["/", "/actor/", "/actor/a/", "/actor/a/project/", NS]
    assert prefixes("/actor/a/") == ["/", "/actor/", "/actor/a/"]


def test_bump_changes_namespace_and_its_prefixes_only(epochs: Epochs) -> None:
    watched = [NS, "/actor/a/", SIBLING, "/actor/b/", OTHER_ACTOR]
    before = {ns: epochs.get(ns) for ns in watched}
    assert before == {ns: epochs.get(ns) for ns in watched}  # stable without bumps
    epochs.bump({NS})
    after = {ns: epochs.get(ns) for ns in watched}
    assert after[NS] != before[NS]
    assert after["/actor/a/"] != before["/actor/a/"]  # prefix searches see the change
    for untouched in (SIBLING, "/actor/b/", OTHER_ACTOR):
        assert after[untouched] == before[untouched]


def test_bump_of_several_and_of_nothing(epochs: Epochs) -> None:
    a, b = epochs.get(NS), epochs.get(OTHER_ACTOR)
    epochs.bump(set())
    assert (epochs.get(NS), epochs.get(OTHER_ACTOR)) == (a, b)
    epochs.bump({NS, OTHER_ACTOR})
    assert epochs.get(NS) != a and epochs.get(OTHER_ACTOR) != b


def test_concurrent_bumps_are_all_counted() -> None:
    epochs = LocalEpochs()

    def bump_many() -> None:
        for _ in range(200):
            epochs.bump({NS})

    assert race([bump_many] * 4) == []
    assert epochs.get(NS) == 800 and epochs.get("/actor/a/") == 800


@pytest.mark.redis
def test_two_processes_see_each_others_bumps(redis_url: str) -> None:
    api, worker = RedisEpochs(redis_url), RedisEpochs(redis_url)
    try:
        seen = api.get(NS), api.get("/actor/a/")
        assert worker.get(NS) == seen[0]
        worker.bump({NS})
        assert api.get(NS) != seen[0] and api.get("/actor/a/") != seen[1]
        assert api.get(NS) == worker.get(NS)
    finally:
        api.close()
        worker.close()


@pytest.mark.redis
def test_redis_data_loss_never_repeats_an_epoch(redis_url: str) -> None:
    import redis

    epochs = RedisEpochs(redis_url)
    try:
        epochs.bump({NS})
        cached = epochs.get(NS)
        redis.Redis.from_url(redis_url).flushdb()  # a restart without persistence
        epochs.bump({NS})  # the counter is back at 1, as before the loss
        assert epochs.get(NS) != cached
    finally:
        epochs.close()


def test_redis_down_never_serves_a_stale_epoch(caplog: pytest.LogCaptureFixture) -> None:
    epochs = RedisEpochs(f"redis://127.0.0.1:{free_port()}/15")
    with caplog.at_level(logging.WARNING, logger="wakemark.shared.cache.epochs"):
        values = [epochs.get(NS) for _ in range(5)]
        epochs.bump({NS})  # must not raise: ingest never fails because Redis is down
    assert len(set(values)) == len(values) and all(v < 0 for v in values)
    assert "Redis unreachable" in caplog.text and "bump of 1 namespace(s) failed" in caplog.text
    epochs.close()


def test_open_epochs_picks_by_settings(tmp_path: Path) -> None:
    assert isinstance(open_epochs(Settings(home=tmp_path)), LocalEpochs)
    remote = open_epochs(Settings(home=tmp_path, redis_url="redis://127.0.0.1:1/0"))
    assert isinstance(remote, RedisEpochs)  # constructing does not connect
    remote.close()


def test_recently_searched_is_latest_first_and_bounded(epochs: Epochs) -> None:
    assert epochs.recently_searched(3600, 10) == []
    for ns in (NS, SIBLING, OTHER_ACTOR):
        epochs.searched(ns)
    assert epochs.recently_searched(3600, 10) == [OTHER_ACTOR, SIBLING, NS]
    assert epochs.recently_searched(3600, 2) == [OTHER_ACTOR, SIBLING]
    assert epochs.recently_searched(-60, 10) == []  # a window that ends before now


def test_a_search_noted_again_moves_to_the_front() -> None:
    # Redis notes a namespace once per NOTE_EVERY_S per process (no round trip per
    # search); in-process the latest search always counts.
    epochs = LocalEpochs()
    epochs.searched(NS)
    epochs.searched(SIBLING)
    epochs.searched(NS)
    assert epochs.recently_searched(3600, 10) == [NS, SIBLING]


@pytest.mark.redis
def test_a_starting_process_sees_what_others_searched(redis_url: str) -> None:
    api, starting = RedisEpochs(redis_url), RedisEpochs(redis_url)
    try:
        api.searched(NS)
        api.searched(SIBLING)
        api.searched(NS)  # noted within NOTE_EVERY_S already: no second round trip
        assert starting.recently_searched(3600, 10) == [SIBLING, NS]
    finally:
        api.close()
        starting.close()


def test_redis_down_notes_and_reads_no_searches(caplog: pytest.LogCaptureFixture) -> None:
    epochs = RedisEpochs(f"redis://127.0.0.1:{free_port()}/15")
    with caplog.at_level(logging.WARNING, logger="wakemark.shared.cache.epochs"):
        epochs.searched(NS)  # must not raise: a search never fails because Redis is down
        assert epochs.recently_searched(3600, 10) == []
    assert "noting a search failed" in caplog.text
    epochs.close()
