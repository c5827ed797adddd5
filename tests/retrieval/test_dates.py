"""Relative dates in queries, resolved against the query's time (``retrieval.dates``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from wakemark.shared.retrieval.dates import resolve

WED = datetime(2024, 1, 10, 15, 30, tzinfo=UTC)  # a Wednesday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end", "phrase"),
    [
        ("what did we fix yesterday?", day(2024, 1, 9), day(2024, 1, 10), "yesterday"),
        ("the deploy last night", day(2024, 1, 9), day(2024, 1, 10), "last night"),
        ("earlier today", day(2024, 1, 10), day(2024, 1, 11), "earlier today"),
        ("the day before yesterday", day(2024, 1, 8), day(2024, 1, 9), "the day before yesterday"),
        ("two days ago", day(2024, 1, 8), day(2024, 1, 9), "two days ago"),
        ("3 days ago", day(2024, 1, 7), day(2024, 1, 8), "3 days ago"),
        ("a few days ago", day(2024, 1, 4), day(2024, 1, 9), "a few days ago"),
        ("on Monday", day(2024, 1, 8), day(2024, 1, 9), "on Monday"),
        ("on Wednesday", day(2024, 1, 3), day(2024, 1, 4), "on Wednesday"),  # a week ago
        ("last Friday", day(2024, 1, 5), day(2024, 1, 6), "last Friday"),
        ("the bug from last week", day(2024, 1, 1), day(2024, 1, 8), "last week"),
        ("this week", day(2024, 1, 8), day(2024, 1, 15), "this week"),
        ("two weeks ago", day(2023, 12, 25), day(2024, 1, 1), "two weeks ago"),
        ("last weekend", day(2024, 1, 6), day(2024, 1, 8), "last weekend"),
        ("in the past 3 days", day(2024, 1, 8), day(2024, 1, 11), "in the past 3 days"),
        ("over the last week", day(2024, 1, 4), day(2024, 1, 11), "over the last week"),
        ("last month", day(2023, 12, 1), day(2024, 1, 1), "last month"),
        ("this month", day(2024, 1, 1), day(2024, 2, 1), "this month"),
        ("in March", day(2023, 3, 1), day(2023, 4, 1), "in March"),  # still to come this year
        ("in january", day(2024, 1, 1), day(2024, 2, 1), "in january"),  # this one
        ("last January", day(2023, 1, 1), day(2023, 2, 1), "last January"),
        ("in Dec.", day(2023, 12, 1), day(2024, 1, 1), "in Dec"),
        ("the March 2022 release", day(2022, 3, 1), day(2022, 4, 1), "March 2022"),
        ("in 2021", day(2021, 1, 1), day(2022, 1, 1), "in 2021"),
        ("last year", day(2023, 1, 1), day(2024, 1, 1), "last year"),
        ("six months ago", day(2023, 7, 1), day(2023, 8, 1), "six months ago"),
    ],
)
def test_phrase_to_window(query: str, start: datetime, end: datetime, phrase: str) -> None:
    window = resolve(query, WED)
    assert window is not None
    assert (window.start, window.end, window.phrase) == (start, end, phrase)


@pytest.mark.parametrize(
    "query",
    [
        "fix the login bug",
        "what happens tomorrow",
        "next week's release",
        "may I ask",
        "999 years ago",
    ],
)
def test_no_window(query: str) -> None:
    assert resolve(query, WED) is None


def test_month_boundaries() -> None:
    march_1 = datetime(2024, 3, 1, 9, tzinfo=UTC)
    yesterday = resolve("yesterday", march_1)
    assert yesterday is not None
    assert (yesterday.start, yesterday.end) == (day(2024, 2, 29), day(2024, 3, 1))  # leap year
    last_month = resolve("last month", datetime(2024, 1, 31, tzinfo=UTC))
    assert last_month is not None
    assert (last_month.start, last_month.end) == (day(2023, 12, 1), day(2024, 1, 1))
    new_year = resolve("last week", datetime(2024, 1, 2, tzinfo=UTC))  # a Tuesday
    assert new_year is not None
    assert (new_year.start, new_year.end) == (day(2023, 12, 25), day(2024, 1, 1))


def test_days_are_those_of_the_askers_time_zone() -> None:
    tokyo = timezone(timedelta(hours=9))
    now = datetime(2024, 1, 10, 0, 30, tzinfo=tokyo)  # still Jan 9 in UTC
    window = resolve("yesterday", now)
    assert window is not None
    assert window.start == datetime(2024, 1, 9, tzinfo=tokyo)
    assert window.holds(datetime(2024, 1, 9, 23, 59, tzinfo=tokyo).timestamp())
    assert not window.holds(datetime(2024, 1, 10, 0, 1, tzinfo=tokyo).timestamp())


def test_first_phrase_wins_and_is_stripped() -> None:
    query = "what did Anna say yesterday about the trip in March?"
    window = resolve(query, WED)
    assert window is not None
    assert window.phrase == "yesterday"
    assert window.strip(query) == "what did Anna say about the trip in March?"
