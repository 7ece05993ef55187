"""The turn-label corpus (docs/labelling.md): its format, its invariants, and the one loader."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from guardian.conversation import Turn
from guardian.corpora.conversations import load_conversations, split_of
from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.corpora.turn_labels import (
    Gold,
    TurnLabel,
    check_labels,
    find_span,
    labelled_turns,
    parse_turn_label,
)
from guardian.errors import InputError
from guardian.taxonomy import Technique, Vulnerability

DIALOGUES = Path(__file__).resolve().parents[2] / "data" / "dialogues"
TURNS = (Turn(index=0, speaker="A", text="Where were you?"),
         Turn(index=1, speaker="B", text="I never said I'd come.  You always hear what you want."))


def test_a_quote_is_located_verbatim_and_a_paraphrase_is_refused() -> None:
    label = parse_turn_label({"turn": 1, "techniques": ["Denial"], "quote": "I never said I'd come."}, TURNS)
    assert label.span == (0, 22) and TURNS[1].text[slice(*label.span)] == label.quote
    assert label.techniques == (Technique.DENIAL,)
    with pytest.raises(ValueError, match="not found verbatim"):
        parse_turn_label({"turn": 1, "techniques": ["Denial"], "quote": "I never said I would come."}, TURNS)
    with pytest.raises(ValueError, match="not a turn"):
        parse_turn_label({"turn": 2, "techniques": ["Denial"], "quote": "x"}, TURNS)
    with pytest.raises(ValueError, match="at least one technique"):
        parse_turn_label({"turn": 1, "techniques": [], "quote": "I never said I'd come."}, TURNS)
    with pytest.raises(ValueError, match="does not hold"):
        parse_turn_label({"turn": 1, "techniques": ["Denial"], "quote": "I never said I'd come.", "span": [1, 5]},
                         TURNS)
    assert find_span("abc", "  ") is None


def test_the_gold_labels_bind() -> None:
    denial = TurnLabel(1, (Technique.DENIAL,), (Vulnerability.NAIVETE,), (0, 22), "I never said I'd come.")
    assert check_labels([denial], Gold(True, (Technique.DENIAL,), (Vulnerability.NAIVETE,))) == []
    assert check_labels([denial], Gold(True)) == []  # gold lists none: any technique
    assert "no manipulative turn" in check_labels([], Gold(True))[0]
    assert "not manipulative" in check_labels([denial], Gold(False))[0]
    assert "outside the gold list" in check_labels([denial], Gold(True, (Technique.EVASION,)))[0]
    assert "vulnerabilities outside" in check_labels([denial], Gold(True, (), (Vulnerability.DEPENDENCY,)))[0]


def test_the_loader_refuses_a_label_that_breaks_the_file(tmp_path: Path) -> None:
    row = {"id": "x1", "label": "manipulative", "turns": [{"speaker": t.speaker, "text": t.text} for t in TURNS],
           "meta": {"manipulative_turns": [1], "gold": {"manipulative": True, "techniques": ["Evasion"]},
                    "turn_labels": [{"turn": 1, "techniques": ["Denial"], "quote": "I never said I'd come."}]}}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="outside the gold list"):
        load_conversations(path)
    row["meta"]["gold"]["techniques"] = ["Denial"]
    row["meta"]["manipulative_turns"] = [0]
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="different turns"):
        load_conversations(path)


def test_labelled_turns_yield_each_turn_with_the_turns_before_it(tmp_path: Path) -> None:
    row = {"id": "x2", "label": "manipulative", "turns": [{"speaker": t.speaker, "text": t.text} for t in TURNS],
           "meta": {"manipulative_turns": [1],
                    "turn_labels": [{"turn": 1, "techniques": ["Denial"], "quote": "I never said I'd come."}]}}
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "id": "x3", "meta": {}}) + "\n", encoding="utf-8")
    turns = list(labelled_turns(load_conversations(path)))
    assert [(len(t.context), t.manipulative) for t in turns] == [(0, False), (1, True)]  # x3: not turn-labelled
    assert turns[1].label is not None and turns[1].label.quote == "I never said I'd come."
    assert [len(t.context) for t in labelled_turns(load_conversations(path), context=0)] == [0, 0]


@pytest.fixture(scope="module")
def mentalmanip() -> list:
    return load_conversations(DIALOGUES / "mentalmanip.jsonl")


def test_mentalmanip_turn_labels_cover_the_train_and_dev_parts_and_never_the_test_part(mentalmanip: list) -> None:
    con = {d.id: d for d in load_mentalmanip(mentalmanip_path("con"))}
    maj = {d.id: d for d in load_mentalmanip(mentalmanip_path("maj"))}
    gold = {**maj, **con}  # con labels where con has the id
    wanted = {i for i in gold if split_of(i) in ("train", "dev")}
    ids = [c.id for c in mentalmanip]
    assert len(ids) == len(set(ids))
    assert not [i for i in ids if split_of(i) == "test"]
    assert set(ids) == wanted
    for c in mentalmanip:
        d = gold[c.id]
        assert c.gold == Gold(d.manipulative, d.techniques, d.vulnerabilities)
        assert [(t.speaker, t.text) for t in c.conversation.turns] == [(t.speaker, t.text) for t in
                                                                         d.conversation.turns]
        assert c.turn_labels is not None and c.manipulative_turns is not None
        # the binding the loader checks, restated: a manipulative dialogue has a manipulative turn, a benign none
        assert bool(c.turn_labels) == d.manipulative == (c.label == "manipulative")
        for lab in c.turn_labels:
            assert c.conversation.turns[lab.turn].text[lab.span[0]:lab.span[1]] == lab.quote
        # the manipulator named is a speaker of a manipulative turn, and nobody is named in a benign dialogue
        assert c.suspect in ({c.conversation.turns[lab.turn].speaker for lab in c.turn_labels} or {None})


def test_registers_are_turn_labelled_with_verbatim_spans_in_every_part() -> None:
    rows = load_conversations(DIALOGUES / "registers.jsonl")
    assert len({c.id for c in rows}) == len(rows)
    registers = Counter(c.register for c in rows)
    assert len(registers) >= 8, registers
    parts = Counter(split_of(c.id) for c in rows)
    assert min(parts.values()) > 0.1 * len(rows)
    for c in rows:
        assert c.turn_labels is not None and c.register
        assert (c.label == "manipulative") == bool(c.turn_labels)
        for lab in c.turn_labels:
            assert c.conversation.turns[lab.turn].text[lab.span[0]:lab.span[1]] == lab.quote
    kinds = {c.register for c in rows if c.label == "manipulative"}
    assert len(kinds) >= 4, kinds  # positives beyond films


def test_every_disagreement_of_the_twice_labelled_dialogues_is_adjudicated_with_a_reason(mentalmanip: list) -> None:
    passes: dict[tuple[str, str], dict[int, list[dict]]] = {}
    for line in (DIALOGUES / "labellings.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        passes.setdefault((r["corpus"], r["id"]), {})[r["pass"]] = r["turns"]
    decisions = {(r["corpus"], r["id"]): r for r in
                 map(json.loads, (DIALOGUES / "adjudication.jsonl").read_text(encoding="utf-8").splitlines())}
    twice = [k for k, v in passes.items() if 2 in v]
    # a fifth of what the labellers labelled (the manipulative dialogues; a benign one follows from its gold label)
    labelled = sum(1 for c in mentalmanip if c.label == "manipulative")
    assert sum(1 for k in twice if k[0] == "mentalmanip") >= 0.2 * labelled > 0
    registers = [k for k in passes if k[0] != "mentalmanip"]
    assert sum(1 for k in registers if 2 in passes[k]) >= 0.2 * len(registers) > 0

    def key(turns: list[dict]) -> set:
        return {(t["turn"], frozenset(t["techniques"])) for t in turns}

    final = {c.id: c for c in mentalmanip}
    for k in twice:
        if key(passes[k][1]) != key(passes[k][2]):
            assert k in decisions and decisions[k]["reason"].strip(), k
            if k[0] == "mentalmanip":  # the file holds the adjudicated labels
                assert [lab.turn for lab in final[k[1]].turn_labels] == sorted(t["turn"] for t in decisions[k]["turns"])


@pytest.mark.parametrize("path", ["dialogues/turns.jsonl", "chatbot/exchanges.jsonl"])
def test_the_written_dialogues_carry_a_verbatim_label_on_every_manipulative_turn(path: str) -> None:
    rows = load_conversations(DIALOGUES.parent / path)
    listed = {json.loads(line)["id"]: json.loads(line)["meta"] for line in
              (DIALOGUES.parent / path).read_text(encoding="utf-8").splitlines()}
    manipulative = [c for c in rows if c.label == "manipulative"]
    assert manipulative and all(c.turn_labels for c in manipulative)
    assert not any(c.turn_labels for c in rows if c.label != "manipulative")
    for c in manipulative:
        assert c.turn_labels is not None
        allowed = {Technique.parse(t) for t in listed[c.id].get("techniques") or ()}
        for lab in c.turn_labels:
            assert c.conversation.turns[lab.turn].text[lab.span[0]:lab.span[1]] == lab.quote
            assert not allowed or set(lab.techniques) <= allowed  # the writer's dialogue labels bind
