"""A multi-session conversational dev set with evidence labels, built from REALTALK.

REALTALK (Lee et al. 2025, arXiv:2502.13270, github.com/danny911kr/REALTALK) is ten
21-day conversations between two people on a messaging app, each turn timestamped, with
memory-probing questions whose answers cite the turns that hold them (``evidence``) and a
category: 1 multi-hop (several facts), 2 temporal ("When did ..."), 3 commonsense. The
repository's ``data/locomo`` copy of LoCoMo is never read (held out for independent
checks). The repository states no licence: the data is read where ``fetch`` put it and
what this builds stays outside the repository (``OUT``), never committed.

Written to ``OUT`` (``$WAKEMARK_CONVO_DIR``, default ``/work/data/convo/realtalk``):

- ``turns.jsonl``: ``{id, chat, session, speaker, text, time}``, one line per turn
  (``id`` is ``<chat>:<dia_id>``; ``time`` ISO 8601, UTC: the app's export has no zone).
- ``questions.jsonl``: ``{qid, chat, kind, query, evidence, now}``; ``now`` is when the
  question is asked. The dataset's questions are asked the day after the last session.
  Kinds: ``multi-hop``, ``temporal``, ``commonsense`` (the dataset's categories), and
  ``relative-date``: each temporal question whose evidence lies in one day, turned from
  "When did X ...?" into "Did X ... <phrase>?", asked at a time when the phrase names
  that day (its week or month): "yesterday", "two days ago", "on <weekday>", "last
  week", "in <month>" in turn.

Run: ``python -m bench._convo_set`` (after ``fetch`` of the repository; the source is
``$WAKEMARK_CONVO_SOURCE``, default the fetched mirror's git directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SOURCE = Path(os.environ.get("WAKEMARK_CONVO_SOURCE", "/work/.mirror/danny911kr+REALTALK/repo"))
OUT = Path(os.environ.get("WAKEMARK_CONVO_DIR", "/work/data/convo/realtalk"))
KINDS = {1: "multi-hop", 2: "temporal", 3: "commonsense"}
WHEN = re.compile(r"^when (did|was|were|does|do|is) ", re.IGNORECASE)
PHRASES = ("yesterday", "two days ago", "weekday", "last week", "month")


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={SOURCE}", *args], check=True, capture_output=True
    ).stdout


def chats() -> dict[str, dict[str, Any]]:
    """The conversations by file stem (``Chat_1_Emi_Elise``), never ``data/locomo``."""
    names = _git("ls-tree", "--name-only", "HEAD", "data/").decode().split()
    return {
        Path(n).stem: json.loads(_git("show", f"HEAD:{n}"))
        for n in names
        if re.fullmatch(r"data/Chat_\d+_\w+\.json", n)
    }


def _time(raw: str) -> datetime:
    return datetime.strptime(raw, "%d.%m.%Y, %H:%M:%S").replace(tzinfo=UTC)


def turns(chat: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    sessions = sorted(
        (int(k.split("_")[1]), v) for k, v in data.items() if re.fullmatch(r"session_\d+", k)
    )
    for number, session in sessions:
        for turn in session:
            text = (turn.get("clean_text") or "").strip()
            if not text:
                continue
            out.append(
                {
                    "id": f"{chat}:{turn['dia_id']}",
                    "chat": chat,
                    "session": number,
                    "speaker": turn["speaker"],
                    "text": text,
                    "time": _time(turn["date_time"]).isoformat(),
                }
            )
    return out


def _pick(key: str, options: int) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % options


def relative(qid: str, query: str, day: datetime) -> tuple[str, datetime] | None:
    """The question asked about ``day`` with a relative date, and when it is asked so
    that the phrase names that day (or its week, or month); None if not a "When ..."."""
    m = WHEN.match(query)
    if m is None:
        return None
    verb = m.group(1).capitalize()
    rest = query[m.end() :].rstrip(" ?")
    noon = day.replace(hour=12, minute=0, second=0, microsecond=0)
    phrase = PHRASES[_pick(qid, len(PHRASES))]
    if phrase == "yesterday":
        now = noon + timedelta(days=1)
    elif phrase == "two days ago":
        now = noon + timedelta(days=2)
    elif phrase == "weekday":
        now = noon + timedelta(days=2 + _pick(qid + "d", 5))
        phrase = "on " + day.strftime("%A")
    elif phrase == "last week":
        now = noon + timedelta(days=7 - day.weekday() + _pick(qid + "d", 7))
    else:
        first = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
        now = first.replace(hour=12) + timedelta(days=_pick(qid + "d", 20))
        phrase = "in " + day.strftime("%B")
    return f"{verb} {rest} {phrase}?", now


def questions(chat: str, data: dict[str, Any], times: dict[str, datetime]) -> list[dict[str, Any]]:
    asked = max(times.values()) + timedelta(days=1)
    out = []
    for i, qa in enumerate(data["qa"]):
        # A few evidence ids carry stray punctuation ("D5:3."); ids of no turn are dropped.
        evidence = [f"{chat}:{e.strip().rstrip('.')}" for e in qa.get("evidence") or []]
        evidence = [e for e in dict.fromkeys(evidence) if e in times]
        kind = KINDS.get(qa.get("category"))
        if not evidence or kind is None:
            continue
        qid = f"{chat}:{i}"
        row = {"qid": qid, "chat": chat, "kind": kind, "query": qa["question"].strip()}
        out.append({**row, "evidence": evidence, "now": asked.isoformat()})
        days = {times[e].date() for e in evidence}
        if kind == "temporal" and len(days) == 1:
            made = relative(qid, row["query"], times[evidence[0]])
            if made is not None:
                query, now = made
                out.append(
                    {
                        **row,
                        "qid": qid + ":rel",
                        "kind": "relative-date",
                        "query": query,
                        "evidence": evidence,
                        "now": now.isoformat(),
                    }
                )
    return out


def build(out: Path = OUT) -> tuple[int, int]:
    """Write the set; returns (turns, questions)."""
    all_turns: list[dict[str, Any]] = []
    all_questions: list[dict[str, Any]] = []
    for chat, data in sorted(chats().items()):
        chat_turns = turns(chat, data)
        times = {t["id"]: datetime.fromisoformat(t["time"]) for t in chat_turns}
        all_turns += chat_turns
        all_questions += questions(chat, data, times)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("turns.jsonl", all_turns), ("questions.jsonl", all_questions)):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(all_turns), len(all_questions)


if __name__ == "__main__":
    n_turns, n_questions = build()
    print(f"{n_turns} turns, {n_questions} questions -> {OUT}", file=sys.stderr)
