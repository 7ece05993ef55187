"""Draw the utterances for the everyday face-act set (issue 25).

Whole conversations are sampled (a few consecutive turns from each), so the
held-out split of `guardian.corpora.conversations.split_of` stays by
conversation. The previous turn is kept as context for the labellers.
Round 2 (more training data) draws other conversations, from the train and dev
parts only, so the held-out test part of round 1 stays what it was.
Round 3 (the rare acts): single turns, with the turn before them, of other
train/dev conversations, drawn among the turns that contain a phrase typical of
the acts the set has least of (self-praise and denial, self-blame, easing the
hearer's burden: `RARE_CUES`); the labellers are not told why a turn was drawn
and label it with any of the nine acts. At most one turn per conversation.
Round 4 (conflict talk): as round 2, stretches of 4 turns of other train/dev
conversations, 60 MentalManip film dialogues and 15 DailyDialog ones (`PLAN_4`).
Round 6 (a larger held-out test part): as round 1, stretches of 4 turns, but of other
conversations of the *test* part only (`PLAN_6`, two thirds of round 1's plan), so nothing
trained or tuned on reads them: round 1's 163 test turns were too few to tell a few points apart.
Round 7 (the weakest kinds): stretches of 4 turns of other *train-part* conversations, everyday chat
and film dialogues only (`PLAN_7`), none of those round 6's self-training pseudo-labelled
(`lab/intent_everyday_r6_selftrain.py`'s pool), so gold and pseudo labels never meet on one turn.
Round 8 (distillation, not gold): stretches of 4 turns of still other *train-part* conversations, film
dialogues, everyday chat and phone calls (`PLAN_8`, five times round 7's film and everyday share), none of
those an earlier round or round 6's self-training drew; labelled once each by an LLM agent from the same
guidelines (`lab/data/faceacts_distilled_r8.csv`), training data only, never in `everyday.csv`.
Round 9 (distillation, the rare acts): as round 8 (`PLAN_9`), none of a conversation round 8 drew either,
plus single turns drawn by round 3's recall net (`RARE_CUES`, `RARE_9`), the acts round 8's labels had least
of (hneg+ 20, spos- 41 of 1,858), all of the train part.
Round 10 (distillation, more of the same): as round 8 (`PLAN_10`), none of a conversation round 8 or 9 drew.
Round 11 (distillation at scale): as round 10 (`PLAN_11`), with task dialogues too, each source at most what
its train part has left.
Round 12 (distillation, whole conversations): every turn rounds 8-11 left out of the train-part film dialogues
and everyday chats they drew (so each of those conversations is then labelled whole, and a turn's context in
training is the turns really before it), plus 4-turn stretches of other train-part calls (`PLAN_12`); kept
apart in data/faceacts/everyday_distilled_r12.csv.
Usage: python lab/faceacts_sample.py OUT.csv [--round 2|3|...|12]
"""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = {  # source -> (conversations, turns per conversation)
    "dailydialog": (60, 4),
    "sgd": (35, 4),
    "calls:benign": (25, 4),
    "calls:scam": (25, 4),
    "mentalmanip": (45, 4),
}
#: Round 4 (conflict talk): film dialogues, whose quarrels, guilt trips and denials the product's
#: users meet most and the set had least of, and a few more everyday ones.
PLAN_4 = {"mentalmanip": (60, 4), "dailydialog": (15, 4)}
#: Round 6 (the held-out test part, enlarged): round 1's mix of sources, two thirds of its size.
PLAN_6 = {"dailydialog": (40, 4), "sgd": (24, 4), "calls:benign": (16, 4), "calls:scam": (16, 4), "mentalmanip": (30, 4)}
#: Round 7 (train part): the two kinds the held-out part scores worst (everyday chat .64, film quarrels .57).
PLAN_7 = {"dailydialog": (70, 4), "mentalmanip": (70, 4)}
#: Round 8 (train part, one LLM labeller each: distillation): the weak kinds at scale, and calls.
PLAN_8 = {"mentalmanip": (240, 4), "dailydialog": (200, 4), "calls:benign": (30, 4), "calls:scam": (30, 4)}
#: Round 9 (train part, one LLM labeller each): more of the weak kinds, and single turns of the rare acts.
PLAN_9 = {"mentalmanip": (190, 4), "dailydialog": (150, 4), "calls:benign": (25, 4), "calls:scam": (25, 4)}
#: Round 9's rare-act singles per `RARE_CUES` group (round 3 drew 90 / 70 / 90).
RARE_9 = {"self": 60, "blame": 60, "ease": 100}
#: Round 10 (train part, one LLM labeller each): round 8's mix again, calls doubled (round 8's side lost 4 points there).
PLAN_10 = {"mentalmanip": (240, 4), "dailydialog": (200, 4), "calls:benign": (60, 4), "calls:scam": (60, 4)}
#: Round 11 (train part, one LLM labeller each): a teacher's set at scale for the fine-tuned everyday half.
PLAN_11 = {"mentalmanip": (400, 4), "dailydialog": (350, 4), "calls:benign": (80, 4), "calls:scam": (80, 4),
           "sgd": (80, 4)}

#: Round 12 (train part, one LLM labeller each): new calls; the film and everyday conversations are completed.
PLAN_12 = {"calls:benign": (200, 4), "calls:scam": (200, 4)}
#: Round 12's sources whose drawn conversations are completed (every turn not yet labelled).
REST_12 = ("mentalmanip", "dailydialog")

# Phrases that often carry spos+, spos- or hneg+ (a recall net, not a label: the labellers
# see none of this). Group -> (turns to draw, pattern).
RARE_CUES = {
    "self": (90, r"\b(i've been (doing|working)|years of experience|i'm (good|great|an expert|certified|licensed|proud)"
             r"|we('re| are) (a|the) (leading|registered|licensed|trusted|reputable|certified)|i never said|i didn't say"
             r"|i did not|i'm not (lying|the one)|i know what i'm doing|trust me|i always|i'm very (good|experienced))"),
    "blame": (70, r"\b(my (fault|mistake|bad\b)|i was wrong|i forgot|i messed up|i shouldn't have|stupid of me"
              r"|i'm (so )?sorry (i|for|that i)|i apologi[sz]e for (my|the mistake)|i feel terrible|i'm (such )?an idiot)"),
    "ease": (90, r"\b(no (pressure|rush|obligation|problem)|take your time|sorry to (bother|disturb|trouble)"
             r"|if (it's|that's) (convenient|okay with you|alright)|at your convenience|feel free|you don't have to"
             r"|up to you|whenever (you|it)|it's (easy|simple|free|quick)|only takes|don't worry|sorry for the"
             r" (inconvenience|wait|trouble)|if you (don't|do not) mind|no need to)"),
}


def _jsonl(name: str) -> list[dict]:
    with (ROOT / "data" / "conversations" / f"{name}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _mentalmanip() -> list[dict]:
    out = []
    with (ROOT / "data" / "mentalmanip" / "mentalmanip_con.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            turns = []
            for line in row["Dialogue"].splitlines():
                m = re.match(r"\s*(Person\d)\s*:\s*(.*)", line)
                if m and m.group(2).strip():
                    turns.append({"speaker": m.group(1), "text": m.group(2).strip()})
            if len(turns) >= 2:
                out.append({"id": f"mm-{row['ID']}", "turns": turns})
    return out


def source_pools() -> dict[str, list[dict]]:
    """Source (the keys of `PLAN`) -> its conversations ({"id", "turns": [{"speaker", "text"}]})."""
    calls = _jsonl("calls")
    return {
        "dailydialog": _jsonl("dailydialog"),
        "sgd": _jsonl("sgd"),
        "calls:benign": [c for c in calls if c.get("label") != "scam"],
        "calls:scam": [c for c in calls if c.get("label") == "scam"],
        "mentalmanip": _mentalmanip(),
    }


def main(out: str, *, round_: int = 1) -> None:
    from guardian.corpora.conversations import split_of

    rng = random.Random(25 if round_ == 1 else 25 + round_)
    taken: set[str] = set()
    if round_ > 1:
        with (ROOT / "data" / "faceacts" / "everyday.csv").open(encoding="utf-8") as f:
            # the conversations of the earlier rounds only, so that a round drawn again is the same draw
            taken = {row["conversation_id"] for row in csv.DictReader(f) if int(row.get("round") or 1) < round_}
    pools = source_pools()
    rows: list[dict] = []
    if round_ == 3:
        _draw_rare(pools, taken, rng, rows)
        _write(rows, out)
        return
    plan = {4: PLAN_4, 6: PLAN_6, 7: PLAN_7, 8: PLAN_8, 9: PLAN_9, 10: PLAN_10, 11: PLAN_11,
            12: PLAN_12}.get(round_, PLAN)
    if round_ >= 7:
        import intent_everyday_r6_selftrain

        taken |= {u.conversation_id for u in intent_everyday_r6_selftrain.unlabelled(2.0, 33)}
    if round_ >= 9:
        with (ROOT / "data" / "faceacts" / "everyday_distilled.csv").open(encoding="utf-8") as f:
            earlier = [row for row in csv.DictReader(f) if int(row["round"]) < round_]
        taken |= {row["conversation_id"] for row in earlier}
        if round_ == 12:
            _draw_rest(pools, earlier, rows)
    for source, (n_conv, per) in plan.items():
        pool = pools[source]
        if round_ >= 7:
            pool = [c for c in pool if c["id"] not in taken and split_of(c["id"]) == "train"]
        elif round_ == 6:
            pool = [c for c in pool if c["id"] not in taken and split_of(c["id"]) == "test"]
        elif round_ > 1:
            pool = [c for c in pool if c["id"] not in taken and split_of(c["id"]) != "test"]
        for conv in rng.sample(pool, min(n_conv, len(pool))):
            turns = conv["turns"]
            start = rng.randrange(0, max(1, len(turns) - per + 1))
            for i in range(start, min(len(turns), start + per)):
                text = turns[i]["text"].strip()
                if not text:
                    continue
                rows.append(_row(len(rows), source, conv, i))
    if round_ == 9:
        taken |= {r["conversation_id"] for r in rows}
        _draw_rare(pools, taken, rng, rows, sizes=RARE_9, parts=("train",))
    _write(rows, out)


def _draw_rest(pools: dict[str, list[dict]], earlier: list[dict], rows: list[dict]) -> None:
    """Every turn not yet labelled of the `REST_12` conversations the earlier distilled rounds drew."""
    labelled: dict[str, set[int]] = {}
    for row in earlier:
        labelled.setdefault(row["conversation_id"], set()).add(int(row["turn"]))
    for source in REST_12:
        for conv in pools[source]:
            done = labelled.get(conv["id"])
            if done is None:
                continue
            for i, turn in enumerate(conv["turns"]):
                if i not in done and turn["text"].strip():
                    rows.append(_row(len(rows), source, conv, i))


def _draw_rare(pools: dict[str, list[dict]], taken: set[str], rng: random.Random, rows: list[dict], *,
               sizes: dict[str, int] | None = None, parts: tuple[str, ...] = ("train", "dev")) -> None:
    from guardian.corpora.conversations import split_of

    candidates: dict[str, list[tuple[str, dict, int]]] = {group: [] for group in RARE_CUES}
    for source, pool in pools.items():
        for conv in pool:
            if conv["id"] in taken or split_of(conv["id"]) not in parts:
                continue
            for i, turn in enumerate(conv["turns"]):
                text = turn["text"].strip().lower()
                for group, (_, pattern) in RARE_CUES.items():
                    if 3 <= len(text.split()) <= 60 and re.search(pattern, text):
                        candidates[group].append((source, conv, i))
                        break
    used: set[str] = set()
    picked = []
    for group, (n, _) in RARE_CUES.items():
        n = (sizes or {}).get(group, n)
        found = candidates[group]
        rng.shuffle(found)
        by_source: dict[str, int] = {}
        for source, conv, i in found:
            # no source more than 40 % of a group, one turn per conversation
            if conv["id"] in used or by_source.get(source.split(":")[0], 0) >= 0.4 * n:
                continue
            used.add(conv["id"])
            kind = source.split(":")[0]
            by_source[kind] = by_source.get(kind, 0) + 1
            picked.append((source, conv, i))
            if sum(by_source.values()) >= n:
                break
    rng.shuffle(picked)
    for source, conv, i in picked:
        rows.append(_row(len(rows), source, conv, i))


def _row(item: int, source: str, conv: dict, i: int) -> dict:
    """One item of a sample: turn `i` of `conv` with the turn before it as context."""
    turns = conv["turns"]
    return {
        "item": item,
        "source": source.split(":")[0],
        "conversation_id": conv["id"],
        "turn": i,
        "speaker": turns[i]["speaker"],
        "previous": turns[i - 1]["text"].strip() if i else "",
        "utterance": turns[i]["text"].strip(),
    }


def _write(rows: list[dict], out: str) -> None:
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} utterances -> {out}")


if __name__ == "__main__":
    main(sys.argv[1], round_=int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--round" else 1)
