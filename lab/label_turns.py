"""The turn-label corpus (docs/labelling.md): batches for labellers, their answers checked, merged, compared.

    python lab/label_turns.py batches OUT            MentalManip train+dev manipulative dialogues in batches
    python lab/label_turns.py check BATCH ANSWER     every answer of a batch checked (ids, turns, verbatim quotes, gold)
    python lab/label_turns.py registers SRC OUT      conversations of other registers (../shared/data/conversations) in batches
    python lab/label_turns.py check-written FILE     a writer's labelled conversations checked
    python lab/label_turns.py written-second FILE OUT  a fifth of them, labels left out, for a blind second labeller
    python lab/label_turns.py disagreements WORK OUT the twice-labelled items whose labellings differ, for adjudication
    python lab/label_turns.py agreement WORK|DATA    turn-level Cohen's kappa (and per technique, per register); from
                                                     WORK, or from data/dialogues (labellings.jsonl) once merged
    python lab/label_turns.py merge WORK OUT         data/dialogues/{mentalmanip,registers,labellings,adjudication}.jsonl
    python lab/label_turns.py fixed OUT              batches of dialogues/turns.jsonl and chatbot/exchanges.jsonl (turns named)
    python lab/label_turns.py merge-fixed ANSWERS    their techniques and spans written into those files
    python lab/label_turns.py stats OUT              counts by register, label, technique, vulnerability and part

WORK holds mm/ (first_*, second_* batches, answers/), reg/ (reg_0*, reg_second, answers/),
written/ (w_*.jsonl by the writers, answers/ of the blind second labeller) and adjudication/answers/.

A batch is a JSONL file (`id`, `gold`, `turns`) and a `.txt` beside it for reading. An answer is a
JSONL file, one line per dialogue: `{"id", "turns": [{"turn", "techniques", "vulnerabilities",
"quote"}]}`. Nothing of the MentalManip test part (`split_of(id) == "test"`) is ever written.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from guardian.conversation import Turn
from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import LabelledDialogue, load_mentalmanip, mentalmanip_path
from guardian.corpora.turn_labels import Gold, TurnLabel, check_labels, parse_turn_label
from guardian.taxonomy import Technique, Vulnerability

SEED = 50
#: The train-part dialogues the guidelines' author read while writing them (the worked examples among
#: them): left out of every agreement figure, which must come from dialogues nobody shaped the rules on.
SEEN_BY_AUTHOR = frozenset({
    "85514484", "85514485", "85514486", "85514565", "85514860", "85515360", "85515786", "85516111",
    "85516382", "85517662", "85518612", "85518618", "85518638", "85518989", "85519004", "85519055",
})


def mentalmanip_dialogues() -> list[tuple[LabelledDialogue, str]]:
    """Train- and dev-part dialogues (con labels where con has the id, else maj), with the file they come from."""
    con = load_mentalmanip(mentalmanip_path("con"))
    con_ids = {d.id for d in con}
    maj_only = [d for d in load_mentalmanip(mentalmanip_path("maj")) if d.id not in con_ids]
    out = [(d, "con") for d in con] + [(d, "maj") for d in maj_only]
    return [(d, v) for d, v in out if split_of(d.id) in ("train", "dev")]


def gold_of(d: LabelledDialogue) -> Gold:
    return Gold(d.manipulative, d.techniques, d.vulnerabilities)


def gold_json(g: Gold) -> dict[str, Any]:
    return {"manipulative": g.manipulative, "techniques": [t.value for t in g.techniques],
            "vulnerabilities": [v.value for v in g.vulnerabilities]}


def render(item: dict[str, Any]) -> str:
    g = item["gold"]
    if g is None:
        head = f"### {item['id']} | register: {item['register']} | mark only turns that meet the definitions; [] if none"
        return "\n".join([head] + [f"[{t['i']}] {t['speaker']}: {t['text']}" for t in item["turns"]])
    tech = ", ".join(g["techniques"]) or "(none listed: choose from all 11)"
    vuln = ", ".join(g["vulnerabilities"]) or "(none listed)"
    lines = [f"### {item['id']} | techniques: {tech} | vulnerabilities: {vuln}"]
    lines += [f"[{t['i']}] {t['speaker']}: {t['text']}" for t in item["turns"]]
    return "\n".join(lines)


def write_batch(path: Path, items: Sequence[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    path.with_suffix(".txt").write_text("\n\n".join(render(i) for i in items) + "\n", encoding="utf-8")


def cmd_batches(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for d, version in mentalmanip_dialogues():
        if not d.manipulative:
            continue
        turns = [{"i": t.index, "speaker": t.speaker, "text": t.text} for t in d.conversation.turns]
        items.append({"id": d.id, "version": version, "gold": gold_json(gold_of(d)), "turns": turns})
    rng = random.Random(SEED)
    rng.shuffle(items)
    k = args.first
    for b in range(k):
        write_batch(out / f"first_{b:02d}.jsonl", items[b::k])
    second = items[: round(len(items) * args.second_share)]
    m = args.second
    for b in range(m):
        write_batch(out / f"second_{b:02d}.jsonl", second[b::m])
    print(json.dumps({"dialogues": len(items), "first_batches": k, "second_dialogues": len(second),
                      "second_batches": m}))


#: Conversations drawn per file of `../shared/data/conversations` (file stem: register, how many, label quotas).
REGISTERS: dict[str, tuple[str, int, dict[str, int] | None]] = {
    "robocalls_ftc": ("robocall (real)", 240, None),
    "esconv_train": ("emotional support", 50, None),
    "cabnc": ("face-to-face talk", 70, None),
    "meetings_ami_icsi": ("meeting", 20, None),
    "irc_ubuntu": ("group chat (IRC)", 90, None),
    "convabuse": ("user to chatbot", 120, {"abusive": 60, "benign": 60}),
    "calls": ("phone call (written)", 50, {"scam": 25, "benign": 25}),
    "dailydialog": ("everyday chat", 40, None),
    "sgd": ("task assistant", 30, None),
}
#: Which labeller gets which files (one batch each).
REGISTER_BATCHES = {
    "reg_00": ("robocalls_ftc",), "reg_01": ("esconv_train",), "reg_02": ("cabnc", "meetings_ami_icsi"),
    "reg_03": ("irc_ubuntu", "convabuse"), "reg_04": ("calls", "dailydialog", "sgd"),
}


def draw(rows: list[dict[str, Any]], n: int, quotas: dict[str, int] | None, rng: random.Random) -> list[dict[str, Any]]:
    """n conversations; robocalls one per script group first (near-copies share `meta.group`)."""
    rows = list(rows)
    rng.shuffle(rows)
    if quotas:
        return [r for label, k in quotas.items() for r in [x for x in rows if x.get("label") == label][:k]]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str((r.get("meta") or {}).get("group", r["id"])), []).append(r)
    firsts = [g[0] for g in groups.values()]
    rest = [r for g in groups.values() for r in g[1:]]
    return (firsts + rest)[:n]


def cmd_registers(args: argparse.Namespace) -> None:
    src, out = Path(args.source), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    drawn: dict[str, list[dict[str, Any]]] = {}
    for stem, (register, n, quotas) in REGISTERS.items():
        rows = read_jsonl(src / f"{stem}.jsonl")
        items = []
        for r in draw(rows, n, quotas, rng):
            meta = dict(r.get("meta") or {})
            if "turn_labels" in meta:  # ConvAbuse's abuse ratings, not manipulation labels
                meta["abuse_labels"] = meta.pop("turn_labels")
            turns = [{"i": i, "speaker": t["speaker"], "text": t["text"]} for i, t in enumerate(r["turns"])]
            items.append({"id": r["id"], "file": stem, "register": register, "source_label": r.get("label"),
                          "source": r.get("source"), "meta": meta, "gold": None, "turns": turns})
        drawn[stem] = items
    counts = {}
    for name, stems in REGISTER_BATCHES.items():
        items = [i for s in stems for i in drawn[s]]
        write_batch(out / f"{name}.jsonl", items)
        counts[name] = len(items)
    second = [i for s in drawn for i in drawn[s][: max(1, round(len(drawn[s]) * 0.2))]]
    rng.shuffle(second)
    write_batch(out / "reg_second.jsonl", second)
    counts["reg_second"] = len(second)
    print(json.dumps(counts))


def written_item(row: dict[str, Any]) -> dict[str, Any]:
    """A written conversation as a batch item (its labels left out, for a blind second labeller)."""
    turns = [{"i": i, "speaker": t["speaker"], "text": t["text"]} for i, t in enumerate(row["turns"])]
    return {"id": row["id"], "file": "written", "register": row["register"], "source_label": row["label"],
            "source": "guardian-written", "meta": row.get("meta") or {}, "gold": None, "turns": turns}


#: Files whose manipulative turns are already named (by their writers); the labellers add techniques and spans.
FIXED = {"dialogues": "data/dialogues/turns.jsonl", "chatbot": "data/chatbot/exchanges.jsonl"}


def fixed_items(name: str) -> list[dict[str, Any]]:
    items = []
    for r in read_jsonl(Path(FIXED[name])):
        meta = r.get("meta") or {}
        if r["label"] != "manipulative":
            continue
        marked = meta.get("manipulative_turns")
        fixed = sorted(marked) if marked is not None else [len(r["turns"]) - 1]  # a thread's last reply
        gold = Gold(True, tuple(Technique.parse(t) for t in meta.get("techniques") or ()),
                    tuple(Vulnerability.parse(v) for v in meta.get("vulnerabilities") or ()))
        turns = [{"i": i, "speaker": t["speaker"], "text": t["text"]} for i, t in enumerate(r["turns"])]
        items.append({"id": r["id"], "gold": gold_json(gold), "fixed_turns": fixed, "turns": turns})
    return items


def cmd_fixed(args: argparse.Namespace) -> None:
    """Batches of the files whose manipulative turns are named: techniques and spans still to add."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in FIXED:
        items = fixed_items(name)
        write_batch(out / f"{name}.jsonl", items)
        print(name, len(items), "conversations,", sum(len(i["fixed_turns"]) for i in items), "turns")


def cmd_merge_fixed(args: argparse.Namespace) -> None:
    """`meta.turn_labels` (and, for the chatbot threads, `meta.manipulative_turns`) written into the files."""
    answers = Path(args.answers)
    for name, path in FIXED.items():
        items = {i["id"]: i for i in fixed_items(name)}
        labels = load_answers(items, sorted(answers.glob(f"{name}*.jsonl")))
        missing = sorted(set(items) - set(labels))
        if missing:
            raise SystemExit(f"{name}: {len(missing)} conversations without a valid answer (first {missing[0]})")
        rows = read_jsonl(Path(path))
        for r in rows:
            if r["id"] in labels:
                found = sorted(labels[r["id"]], key=lambda x: x.turn)
                r["meta"]["manipulative_turns"] = [x.turn for x in found]
                r["meta"]["turn_labels"] = [x.to_json() for x in found]
        Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(name, len(labels), "conversations labelled")


def cmd_written_second(args: argparse.Namespace) -> None:
    """A share of a writer's conversations, their labels left out, for a blind second labeller."""
    rows = read_jsonl(Path(args.file))
    rng = random.Random(SEED)
    chosen = rng.sample(rows, max(1, round(len(rows) * args.share)))
    write_batch(Path(args.out), [written_item(r) for r in chosen])
    print(len(chosen), "of", len(rows))


def _written_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a written conversation's shape or label (its turn labels are checked as answers)."""
    try:
        item = written_item(row)
        if not 2 <= len(item["turns"]) <= 40:
            return f"{len(item['turns'])} turns (2-40 allowed)"
        if any(not str(t["text"]).strip() or not str(t["speaker"]).strip() for t in item["turns"]):
            return "a turn with an empty speaker or text"
        if row["label"] not in ("manipulative", "benign"):
            return f"label {row['label']!r} (manipulative or benign)"
        if row["label"] == "manipulative" and not row.get("labels"):
            return "labelled manipulative with no manipulative turn"
        if row["label"] == "benign" and row.get("labels"):
            return "labelled benign with manipulative turns"
    except (KeyError, TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def cmd_check_written(args: argparse.Namespace) -> int:
    """A writer's file: schema, turns, label consistent with the turn labels, and the labels as answers."""
    rows = read_jsonl(Path(args.file))
    broken = {str(r.get("id")): why for r in rows if (why := _written_problem(r)) is not None}
    for cid, why in broken.items():
        print(f"{cid}: {why}")
    batch = {str(r["id"]): written_item(r) for r in rows if str(r.get("id")) not in broken}
    lines = [json.dumps({"id": r["id"], "turns": r.get("labels") or []}) for r in rows if str(r["id"]) in batch]
    answered, bad, _ = check_lines(batch, lines)
    print(f"{len(rows)} conversations, {bad + len(broken)} with problems")
    return 1 if bad or broken or answered != len(rows) else 0


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def turns_of(item: dict[str, Any]) -> tuple[Turn, ...]:
    return tuple(Turn(index=t["i"], speaker=t["speaker"], text=t["text"]) for t in item["turns"])


def parse_answer(item: dict[str, Any], answer: dict[str, Any]) -> tuple[list[TurnLabel], list[str]]:
    """The answer's turn labels and what is wrong with them (gold binding included)."""
    turns = turns_of(item)
    labels: list[TurnLabel] = []
    problems: list[str] = []
    for raw in answer.get("turns") or ():
        try:
            labels.append(parse_turn_label(raw, turns))
        except ValueError as exc:
            problems.append(str(exc))
    fixed = item.get("fixed_turns")
    if fixed is not None and sorted({lab.turn for lab in labels}) != sorted(fixed):
        problems.append(f"label exactly the turns {sorted(fixed)} (the file's manipulative turns), no others")
    g = item["gold"]
    if g is None:  # another register: the source's label does not bind (docs/labelling.md)
        if len({lab.turn for lab in labels}) != len(labels):
            problems.append("a turn is labelled twice")
        return labels, problems
    gold = Gold(g["manipulative"], tuple(Technique.parse(t) for t in g["techniques"]),
                tuple(Vulnerability.parse(v) for v in g["vulnerabilities"]))
    problems += check_labels(labels, gold)
    return labels, problems


def check_lines(batch: dict[str, dict[str, Any]], lines: Sequence[str]) -> tuple[int, int, list[str]]:
    """Each answer line checked against its batch item: (answered, with problems, missing ids); problems printed."""
    answers: dict[str, dict[str, Any]] = {}
    bad = 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            a = json.loads(line)
        except json.JSONDecodeError as exc:
            print(f"line {n}: not JSON ({exc.msg})")
            bad += 1
            continue
        cid = str(a.get("id"))
        if cid not in batch:
            print(f"line {n}: id {cid!r} is not in the batch")
            bad += 1
            continue
        if cid in answers:
            print(f"line {n}: id {cid} answered twice")
            bad += 1
        answers[cid] = a
        _, problems = parse_answer(batch[cid], a)
        for p in problems:
            print(f"{cid}: {p}")
        bad += bool(problems)
    return len(answers), bad, [i for i in batch if i not in answers]


def cmd_check(args: argparse.Namespace) -> int:
    batch = {i["id"]: i for i in read_jsonl(Path(args.batch))}
    answered, bad, missing = check_lines(batch, Path(args.answer).read_text(encoding="utf-8").splitlines())
    print(f"{answered} of {len(batch)} answered, {bad} with problems, {len(missing)} missing"
          + (f" (first: {', '.join(missing[:5])})" if missing else ""))
    return 1 if bad or missing else 0


def kappa(a: Sequence[int], b: Sequence[int]) -> float:
    n = len(a)
    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return 1.0 if pe == 1 else (po - pe) / (1 - pe)


def compare(items: dict[str, dict[str, Any]], first: dict[str, list[TurnLabel]],
            second: dict[str, list[TurnLabel]]) -> dict[str, Any]:
    """Turn-level kappa on manipulative-or-not, and per technique (over the turns of the shared dialogues)."""
    ids = sorted((set(first) & set(second)) - SEEN_BY_AUTHOR)
    if not ids:
        return {"dialogues": 0, "turns": 0, "manipulative_a": 0, "manipulative_b": 0, "agreement": None,
                "kappa": None, "same_manipulator": None, "techniques": {}}
    ya: list[int] = []
    yb: list[int] = []
    per: dict[Technique, tuple[list[int], list[int]]] = {t: ([], []) for t in Technique}
    same_speaker = 0
    for cid in ids:
        la = {lab.turn: lab for lab in first[cid]}
        lb = {lab.turn: lab for lab in second[cid]}
        turns = turns_of(items[cid])
        for t in range(len(turns)):
            ya.append(int(t in la))
            yb.append(int(t in lb))
            for tech, (xa, xb) in per.items():
                xa.append(int(t in la and tech in la[t].techniques))
                xb.append(int(t in lb and tech in lb[t].techniques))
        sa = {turns[t].speaker for t in la}
        sb = {turns[t].speaker for t in lb}
        same_speaker += sa == sb
    out: dict[str, Any] = {
        "dialogues": len(ids), "turns": len(ya), "manipulative_a": sum(ya), "manipulative_b": sum(yb),
        "agreement": round(sum(x == y for x, y in zip(ya, yb, strict=True)) / max(1, len(ya)), 4),
        "kappa": round(kappa(ya, yb), 4), "same_manipulator": round(same_speaker / max(1, len(ids)), 4),
        "techniques": {},
    }
    for tech, (xa, xb) in per.items():
        if sum(xa) + sum(xb):
            out["techniques"][tech.value] = {"a": sum(xa), "b": sum(xb), "kappa": round(kappa(xa, xb), 4)}
    return out


def load_answers(items: dict[str, dict[str, Any]], paths: Iterable[Path],
                 extra: dict[str, dict[str, Any]] | None = None) -> dict[str, list[TurnLabel]]:
    """The first valid answer for each item (an answer with any problem is left out: it is not a label)."""
    answers = [a for p in paths for a in read_jsonl(p)] + [{"id": k, **v} for k, v in (extra or {}).items()]
    out: dict[str, list[TurnLabel]] = {}
    for a in answers:
        cid = str(a.get("id"))
        if cid in items and cid not in out:
            labels, problems = parse_answer(items[cid], a)
            if not problems:
                out[cid] = labels
    return out


def cmd_agreement(args: argparse.Namespace) -> None:
    """Kappa of the two labellings, per corpus, and for the registers per register."""
    report: dict[str, Any] = {}
    work = Path(args.work)
    for corpus, items, first, second in (passes_from_data(work) if (work / "labellings.jsonl").is_file()
                                         else passes(work)):
        report[corpus] = compare(items, first, second)
        if corpus != "mentalmanip":
            for register in sorted({i["register"] for i in items.values()}):
                ids = {k for k, i in items.items() if i["register"] == register}
                sub = compare(items, {k: v for k, v in first.items() if k in ids},
                              {k: v for k, v in second.items() if k in ids})
                report[f"{corpus}: {register}"] = {k: sub[k] for k in ("dialogues", "turns", "manipulative_a",
                                                                        "manipulative_b", "agreement", "kappa")}
    print(json.dumps(report, indent=1))


def same(a: Sequence[TurnLabel], b: Sequence[TurnLabel]) -> bool:
    """Two labellings agree when they mark the same turns with the same techniques (quotes may differ)."""
    return {(x.turn, frozenset(x.techniques)) for x in a} == {(x.turn, frozenset(x.techniques)) for x in b}


def label_lines(labels: Sequence[TurnLabel]) -> str:
    if not labels:
        return "    (no manipulative turn)"
    return "\n".join(f"    turn {x.turn}: {', '.join(t.value for t in x.techniques)}"
                     f" [{', '.join(v.value for v in x.vulnerabilities) or '-'}] \"{x.quote}\"" for x in labels)


def passes(work: Path) -> list[tuple[str, dict[str, dict[str, Any]], dict[str, list[TurnLabel]], dict[str, list[TurnLabel]]]]:
    """(corpus, items, first labels, second labels) for MentalManip, the drawn registers and the written ones."""
    out = []
    mm = {i["id"]: i for p in sorted((work / "mm").glob("first_*.jsonl")) for i in read_jsonl(p)}
    out.append(("mentalmanip", mm, load_answers(mm, sorted((work / "mm" / "answers").glob("first_*.jsonl"))),
                load_answers(mm, sorted((work / "mm" / "answers").glob("second_*.jsonl")))))
    reg = {i["id"]: i for p in sorted((work / "reg").glob("reg_0*.jsonl")) for i in read_jsonl(p)}
    out.append(("registers", reg, load_answers(reg, sorted((work / "reg" / "answers").glob("reg_0*.jsonl"))),
                load_answers(reg, sorted((work / "reg" / "answers").glob("reg_second*.jsonl")))))
    rows = [r for p in sorted((work / "written").glob("w_*.jsonl")) for r in read_jsonl(p)]
    written = {r["id"]: written_item(r) for r in rows}
    first = load_answers(written, [], extra={r["id"]: {"turns": r.get("labels") or []} for r in rows})
    out.append(("written", written, first, load_answers(written, sorted((work / "written" / "answers").glob("*.jsonl")))))
    return out


def answered_by(work: Path) -> dict[str, dict[int, dict[str, str]]]:
    """Which answer file (one labeller each) gave each item's first and second labelling."""
    def names(paths: Iterable[Path]) -> dict[str, str]:
        out: dict[str, str] = {}
        for p in paths:
            for a in read_jsonl(p):
                out.setdefault(str(a.get("id")), p.stem)
        return out

    mm, reg, written = work / "mm" / "answers", work / "reg" / "answers", work / "written"
    return {
        "mentalmanip": {1: names(sorted(mm.glob("first_*.jsonl"))), 2: names(sorted(mm.glob("second_*.jsonl")))},
        "registers": {1: names(sorted(reg.glob("reg_0*.jsonl"))), 2: names(sorted(reg.glob("reg_second*.jsonl")))},
        "written": {1: {k: f"writer {v}" for k, v in names(sorted(written.glob("w_*.jsonl"))).items()},
                    2: names(sorted((written / "answers").glob("*.jsonl")))},
    }


def passes_from_data(data: Path) -> list[tuple[str, dict[str, dict[str, Any]], dict[str, list[TurnLabel]],
                                              dict[str, list[TurnLabel]]]]:
    """The same as `passes`, read back from the merged files (so the agreement figures reproduce from data/)."""
    from guardian.corpora.conversations import load_conversations

    items: dict[str, dict[str, dict[str, Any]]] = {"mentalmanip": {}, "registers": {}, "written": {}}
    for name in ("mentalmanip", "registers"):
        for c in load_conversations(data / f"{name}.jsonl"):
            corpus = "written" if name == "registers" and c.id.startswith("w-") else name  # writers' ids: w-*
            g = c.gold
            items[corpus][c.id] = {
                "id": c.id, "register": c.register or "?",
                "gold": None if g is None else gold_json(g),
                "turns": [{"i": t.index, "speaker": t.speaker, "text": t.text} for t in c.conversation.turns],
            }
    by_pass: dict[str, dict[int, dict[str, list[TurnLabel]]]] = {k: {1: {}, 2: {}} for k in items}
    for r in read_jsonl(data / "labellings.jsonl"):
        item = items[r["corpus"]][r["id"]]
        labels, problems = parse_answer(item, r)
        if problems:
            raise SystemExit(f"labellings.jsonl {r['id']}: {'; '.join(problems)}")
        by_pass[r["corpus"]][r["pass"]][r["id"]] = labels
    return [(k, items[k], by_pass[k][1], by_pass[k][2]) for k in items]


def cmd_disagreements(args: argparse.Namespace) -> None:
    """Every twice-labelled item whose two labellings differ, both shown, for adjudication."""
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for corpus, items, first, second in passes(work):
        rows = []
        for cid in sorted(set(first) & set(second)):
            if not same(first[cid], second[cid]):
                item = dict(items[cid])
                item["labels_a"] = [x.to_json() for x in first[cid]]
                item["labels_b"] = [x.to_json() for x in second[cid]]
                rows.append(item)
        (out / f"{corpus}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                             encoding="utf-8")
        text = [render(r) + "\n  A:\n" + label_lines(first[r["id"]]) + "\n  B:\n" + label_lines(second[r["id"]])
                for r in rows]
        (out / f"{corpus}.txt").write_text("\n\n".join(text) + "\n", encoding="utf-8")
        print(corpus, len(rows), "disagreements of", len(set(first) & set(second)))


def adjudicated(work: Path, corpus: str, items: dict[str, dict[str, Any]]) -> dict[str, tuple[list[TurnLabel], str]]:
    """The adjudicator's final labels and reason for each disagreement of `corpus`."""
    out: dict[str, tuple[list[TurnLabel], str]] = {}
    for p in sorted((work / "adjudication" / "answers").glob(f"{corpus}*.jsonl")):
        for a in read_jsonl(p):
            cid = str(a.get("id"))
            if cid in items and cid not in out:
                labels, problems = parse_answer(items[cid], a)
                if problems:
                    raise SystemExit(f"adjudication of {cid}: {'; '.join(problems)}")
                out[cid] = (labels, str(a.get("reason") or ""))
    return out


def conversation_row(item: dict[str, Any], labels: Sequence[TurnLabel] | None, labelled_by: str,
                     source: str, label: str, meta: dict[str, Any]) -> dict[str, Any]:
    turns = [{"speaker": t["speaker"], "text": t["text"]} for t in item["turns"]]
    meta = dict(meta)
    if labels is not None:
        meta["manipulative_turns"] = sorted(x.turn for x in labels)
        meta["turn_labels"] = [x.to_json() for x in sorted(labels, key=lambda x: x.turn)]
        suspects = sorted({item["turns"][x.turn]["speaker"] for x in labels})
        roles = dict(meta.get("roles") or {})
        roles = {k: v for k, v in roles.items() if v != "Suspect"}
        meta["roles"] = {**roles, **dict.fromkeys(suspects, "Suspect")}
    meta["labelled_by"] = labelled_by
    return {"id": item["id"], "source": source, "label": label, "turns": turns, "meta": meta}


def cmd_merge(args: argparse.Namespace) -> None:
    """data/dialogues/{mentalmanip,registers,labellings,adjudication}.jsonl from the work folder."""
    work, out = Path(args.work), Path(args.out)
    final: dict[str, dict[str, list[TurnLabel]]] = {}
    how: dict[str, dict[str, str]] = {}
    labellings: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    everything: dict[str, dict[str, dict[str, Any]]] = {}
    who = answered_by(work)
    for corpus, items, first, second in passes(work):
        everything[corpus] = items
        adj = adjudicated(work, corpus, items)
        final[corpus], how[corpus] = {}, {}
        for cid in items:
            if cid not in first:
                continue
            for n, labels in ((1, first.get(cid)), (2, second.get(cid))):
                if labels is not None:
                    labellings.append({"corpus": corpus, "id": cid, "pass": n, "labeller": who[corpus][n].get(cid),
                                       "turns": [x.to_json() for x in labels]})
            if cid in second and not same(first[cid], second[cid]):
                if cid not in adj:
                    raise SystemExit(f"{corpus} {cid}: the two labellings differ and nothing adjudicates them")
                final[corpus][cid], reason = adj[cid]
                how[corpus][cid] = "two labellers, adjudicated"
                decisions.append({"corpus": corpus, "id": cid, "turns": [x.to_json() for x in adj[cid][0]],
                                  "reason": reason})
            else:
                final[corpus][cid] = first[cid]
                how[corpus][cid] = "two labellers, agreed" if cid in second else "one labeller"
    mm_rows = []
    mm_items = everything["mentalmanip"]
    for d, version in mentalmanip_dialogues():
        gold = gold_json(gold_of(d))
        meta: dict[str, Any] = {"register": "film", "gold": gold, "version": version}
        item: dict[str, Any] = {"id": d.id, "turns": [{"i": t.index, "speaker": t.speaker, "text": t.text}
                                      for t in d.conversation.turns]}
        if not d.manipulative:
            mm_rows.append(conversation_row(item, [], "gold (not manipulative)", f"mentalmanip_{version}",
                                            "benign", meta))
        elif d.id in final["mentalmanip"]:
            assert mm_items[d.id]["turns"] == item["turns"]
            mm_rows.append(conversation_row(item, final["mentalmanip"][d.id], how["mentalmanip"][d.id],
                                            f"mentalmanip_{version}", "manipulative", meta))
    reg_rows = []
    for corpus in ("registers", "written"):
        for cid, labels in final[corpus].items():
            item = everything[corpus][cid]
            meta = {**item["meta"], "register": item["register"], "source_label": item["source_label"]}
            if corpus == "registers":
                meta["file"] = item["file"]
            reg_rows.append(conversation_row(item, labels, how[corpus][cid], item["source"] or "guardian-written",
                                             "manipulative" if labels else "benign", meta))
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("mentalmanip", mm_rows), ("registers", reg_rows), ("labellings", labellings),
                       ("adjudication", decisions)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                           encoding="utf-8")
        print(name, len(rows))


def cmd_stats(args: argparse.Namespace) -> None:
    """Counts of the merged files: conversations, turns and labels by register and part (data/README.md)."""
    from guardian.corpora.conversations import load_conversations

    report: dict[str, Any] = {}
    for name in ("mentalmanip", "registers"):
        rows = load_conversations(Path(args.data) / f"{name}.jsonl")
        by: dict[str, Counter[str]] = {}
        for c in rows:
            key = c.register or "?"
            counts = by.setdefault(key, Counter())
            labels = c.turn_labels or ()
            counts["conversations"] += 1
            counts[f"conversations {c.label}"] += 1
            counts[f"part {split_of(c.id)}"] += 1
            counts["turns"] += len(c.conversation.turns)
            counts["manipulative turns"] += len(labels)
            for lab in labels:
                for t in lab.techniques:
                    counts[f"technique {t.value}"] += 1
                for v in lab.vulnerabilities:
                    counts[f"vulnerability {v.value}"] += 1
        report[name] = {k: dict(sorted(v.items())) for k, v in sorted(by.items())}
    print(json.dumps(report, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    positionals = {
        "batches": ("out",), "check": ("batch", "answer"), "registers": ("source", "out"), "check-written": ("file",),
        "disagreements": ("work", "out"), "merge": ("work", "out"), "fixed": ("out",), "merge-fixed": ("answers",),
        "written-second": ("file", "out"), "stats": ("data",), "agreement": ("work",),
    }
    parsers = {name: sub.add_parser(name) for name in positionals}
    for name, names in positionals.items():
        for arg in names:
            parsers[name].add_argument(arg)
    parsers["batches"].add_argument("--first", type=int, default=12)
    parsers["batches"].add_argument("--second", type=int, default=4)
    parsers["batches"].add_argument("--second-share", type=float, default=0.28)
    parsers["written-second"].add_argument("--share", type=float, default=0.2)
    args = ap.parse_args(argv)
    commands: dict[str, Any] = {
        "batches": cmd_batches, "registers": cmd_registers, "fixed": cmd_fixed, "merge-fixed": cmd_merge_fixed,
        "written-second": cmd_written_second, "stats": cmd_stats, "merge": cmd_merge,
        "disagreements": cmd_disagreements, "check-written": cmd_check_written, "check": cmd_check,
        "agreement": cmd_agreement,
    }
    return int(commands[args.cmd](args) or 0)

if __name__ == "__main__":
    sys.exit(main())
