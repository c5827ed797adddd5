"""Relative dates in a query ("yesterday", "last week", "in March", "two days ago", "on
Monday") resolved against the query's time into a window of record times.

English only, deterministic, stdlib only. Days, weeks (Monday first) and months are
calendar ones in the time zone of ``now``: "yesterday" asked at 00:30 is the day before,
whatever the hour. A phrase about the future ("tomorrow", "next week") is no window: a
memory is of the past. The first phrase in the query wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH_ABBR = {m[:3]: i for i, m in enumerate(MONTHS, 1)}
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
}
# Longest first: "a few" before "a".
_NUMBER = r"(?P<n>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_MONTH = r"(?P<month>" + "|".join([*MONTHS, "sept", *(m[:3] for m in MONTHS)]) + r")\b\.?"
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")s?"
_UNIT = r"days?|weeks?|months?|years?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
MAX_DAYS_BACK = 3660  # "999 days ago" is no date a memory has


@dataclass(frozen=True)
class Window:
    """Record times from ``start`` (included) to ``end`` (excluded); ``phrase`` is the
    query's text that said so, ``at`` where it starts in the query."""

    start: datetime
    end: datetime
    phrase: str
    at: int

    def holds(self, ts: float) -> bool:
        """``ts``: seconds since the epoch."""
        return self.start.timestamp() <= ts < self.end.timestamp()

    def strip(self, query: str) -> str:
        """The query without the phrase: its words name no topic."""
        rest = query[: self.at] + query[self.at + len(self.phrase) :]
        return re.sub(r"\s{2,}", " ", rest).strip()


def _day(now: datetime, back: int = 0) -> datetime:
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return start - timedelta(days=back)


def _days(start: datetime, days: int) -> tuple[datetime, datetime]:
    # Days are counted on the calendar, not as 24 hours: a daylight-saving change keeps
    # midnight at midnight.
    end = start + timedelta(days=days)
    return start, end.replace(hour=0, minute=0, second=0, microsecond=0)


def _week(now: datetime, back: int) -> tuple[datetime, datetime]:
    monday = _day(now, now.weekday() + 7 * back)
    return _days(monday, 7)


def _month(year: int, month: int, now: datetime) -> tuple[datetime, datetime]:
    start = now.replace(year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0)
    after = (year + 1, 1) if month == 12 else (year, month + 1)
    return start, start.replace(year=after[0], month=after[1])


def _months_back(now: datetime, back: int) -> tuple[datetime, datetime]:
    index = now.year * 12 + now.month - 1 - back
    return _month(index // 12, index % 12 + 1, now)


def _year(year: int, now: datetime) -> tuple[datetime, datetime]:
    start = now.replace(year=year, month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    return start, start.replace(year=year + 1)


def _number(m: re.Match[str]) -> int:
    raw = m["n"].lower()
    return int(raw) if raw.isdigit() else _NUMBERS[raw]


def _named_month(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    """ "in March": the last March that has begun (this one, or last year's when it is
    still to come; "last March" in March is last year's); with a year, that year's."""
    month = _MONTH_ABBR[m["month"][:3].lower()]
    if m["year"]:
        return _month(int(m["year"]), month, now)
    last = m.group(0).lower().startswith("last")
    year = now.year if month < now.month or (month == now.month and not last) else now.year - 1
    return _month(year, month, now)


def _weekday(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    """ "on Monday": the last Monday before today (a week ago on a Monday)."""
    back = (now.weekday() - WEEKDAYS.index(m["weekday"].lower())) % 7 or 7
    return _days(_day(now, back), 1)


def _units_ago(m: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    n, unit = _number(m), m["unit"].lower().rstrip("s")
    vague = m["n"].lower().endswith(("few", "couple of"))
    if unit == "day":
        if n > MAX_DAYS_BACK:
            return None
        # "a few days ago" is a span: from twice as far back to the day before.
        return (_day(now, 2 * n), _day(now, 1)) if vague else _days(_day(now, n), 1)
    if unit == "week":
        if n * 7 > MAX_DAYS_BACK:
            return None
        return (_week(now, 2 * n)[0], _week(now, 1)[1]) if vague else _week(now, n)
    if unit == "month":
        if n * 30 > MAX_DAYS_BACK:
            return None
        return (
            (_months_back(now, 2 * n)[0], _months_back(now, 1)[1])
            if vague
            else _months_back(now, n)
        )
    if n * 365 > MAX_DAYS_BACK:
        return None
    return _year(now.year - n, now)


def _past_span(m: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    """ "in the last 3 days", "over the past two weeks": back from now, today included."""
    n = _number(m) if m["n"] else 1
    days = {"day": 1, "week": 7, "month": 31, "year": 366}[m["unit"].lower().rstrip("s")] * n
    if days > MAX_DAYS_BACK:
        return None
    return _day(now, days - 1), _day(now, -1)


def _weekend(now: datetime) -> tuple[datetime, datetime]:
    """ "last weekend": the Saturday and Sunday before the current week."""
    saturday = _day(now, now.weekday() + 2)
    return _days(saturday, 2)


Rule = Callable[[re.Match[str], datetime], tuple[datetime, datetime] | None]
_RULES: list[tuple[re.Pattern[str], Rule]] = [
    (re.compile(p, re.IGNORECASE), rule)
    for p, rule in [
        (r"\bthe day before yesterday\b", lambda m, now: _days(_day(now, 2), 1)),
        (r"\b(?:yesterday|last night)\b", lambda m, now: _days(_day(now, 1), 1)),
        (
            r"\b(?:earlier )?today\b|\bthis (?:morning|afternoon|evening)\b|\btonight\b",
            lambda m, now: _days(_day(now), 1),
        ),
        (
            rf"\b(?:(?:in|over|during) )?the (?:last|past) (?:{_NUMBER} )?(?P<unit>{_UNIT})\b",
            _past_span,
        ),
        (rf"\b{_NUMBER} (?P<unit>{_UNIT}) ago\b", _units_ago),
        (r"\blast weekend\b|\bover the weekend\b", lambda m, now: _weekend(now)),
        (r"\blast week\b", lambda m, now: _week(now, 1)),
        (r"\bthis week\b", lambda m, now: _week(now, 0)),
        (r"\blast month\b", lambda m, now: _months_back(now, 1)),
        (r"\bthis month\b", lambda m, now: _months_back(now, 0)),
        (r"\blast year\b", lambda m, now: _year(now.year - 1, now)),
        (r"\bthis year\b", lambda m, now: _year(now.year, now)),
        (rf"\b(?:(?:on|last|this past) ){_WEEKDAY}\b", _weekday),
        (rf"\b(?:(?:in|during|last|early|late|mid) ){_MONTH}(?:,? {_YEAR})?\b", _named_month),
        (rf"\b{_MONTH},? {_YEAR}\b", _named_month),
        (rf"\b(?:in|during) {_YEAR}\b", lambda m, now: _year(int(m["year"]), now)),
    ]
]


# A word every phrase has: most queries have none, and one search of this settles them.
_ANY = re.compile(
    r"\b(?:ago|yesterday|today|tonight|last|past|night|weekend|week|month|year|morning"
    r"|afternoon|evening|(?:19|20)\d\d|" + "|".join([*WEEKDAYS, *(m[:3] for m in MONTHS)]) + ")",
    re.IGNORECASE,
)


def resolve(query: str, now: datetime) -> Window | None:
    """The window the query's first relative date names, or None. ``now``: an aware
    datetime, the query's time in the asker's time zone."""
    if _ANY.search(query) is None:
        return None
    found: list[tuple[int, int, re.Match[str], Rule]] = []
    for pattern, rule in _RULES:
        m = pattern.search(query)
        if m is not None:
            found.append((m.start(), -len(m.group(0)), m, rule))
    for _, _, m, rule in sorted(found, key=lambda f: (f[0], f[1])):
        span = rule(m, now)
        if span is not None and span[0] < span[1] and span[0] <= now:
            return Window(span[0], span[1], m.group(0), m.start())
    return None
