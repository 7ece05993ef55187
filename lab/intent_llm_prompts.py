"""Issue 25: the LLM intent agent's prompts for the held-out everyday turns, for answering by hand.

`guardian eval faceacts FILE --detector llm` measures the agent through an OpenAI-compatible endpoint;
this machine has none with a model worth measuring. To compare prompt versions anyway, this writes
the exact messages the agent sends (system + question, one JSON object per row) for the turns of a
part, so that LLM agents can answer them as the endpoint would; `--score` reads their answers
(`{"row": N, "option": "A".."I"}` per line, through the agent's own answer parser) and prints the
metrics by kind of conversation, for the agent alone (`guardian eval faceacts --detector llm`) and
for the cascade's policy (`--detector cascade`: the bundled local model where it shows its intent,
the answer elsewhere). No labels are written into the prompt file.
Usage: python lab/intent_llm_prompts.py OUT.jsonl [--part test]
       python lab/intent_llm_prompts.py --score ANSWERS.jsonl [--part test]
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.train import metrics
from guardian.detectors.llm.intent import LETTERS, OPTIONS, IntentChoice, reason_messages
from guardian.eval.llm_faceacts import faceact_windows, local_intents

EVERYDAY = Path("data/faceacts/everyday.csv")


def main(argv: list[str]) -> None:
    part = argv[argv.index("--part") + 1] if "--part" in argv else "test"
    rows = load_faceacts(EVERYDAY)
    keep = [i for i, r in enumerate(rows) if split_of(r.conversation_id) == part]
    if "--score" in argv:
        score(Path(argv[argv.index("--score") + 1]), rows, set(keep), part)
        return
    out = Path(argv[0])
    with out.open("w", encoding="utf-8") as f:
        for w in faceact_windows(rows, keep):
            msgs = reason_messages(w.window, token="F3K9Q2")
            f.write(json.dumps({"row": w.row, "conversation": w.window.id, "system": msgs[0].content,
                                "question": msgs[1].content}) + "\n")
    print(f"{len(keep)} prompts -> {out}")


def score(answers: Path, rows: list, keep: set[int], part: str) -> None:
    with EVERYDAY.open(encoding="utf-8") as f:
        source = [t["source"] for t in csv.DictReader(f)]
    got: dict[int, str] = {}
    bad = 0
    for line in answers.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        try:
            got[int(item["row"])] = str(OPTIONS[LETTERS.index(IntentChoice.model_validate(item).option)])
        except (ValueError, KeyError):
            bad += 1
    rows_ = sorted(i for i in got if i in keep)
    print(json.dumps({"answers": len(got), "unparsed": bad, "missing": len(keep - set(got))}))
    local = local_intents(rows, sorted(keep), path=EVERYDAY, part=part)  # type: ignore[arg-type]
    cascade = {i: str(local[i][0]) if local[i][1] else got[i] for i in rows_}
    print(json.dumps({"cascade_asked": sum(not local[i][1] for i in rows_)}))
    for policy, answer in (("agent", got), ("cascade", cascade)):
        for name in ["all", *sorted({source[i] for i in rows_})]:
            idx = [i for i in rows_ if name == "all" or source[i] == name]
            m = metrics([str(rows[i].face_act) for i in idx], [answer[i] for i in idx])
            print(json.dumps({"policy": policy, "group": name, "n": len(idx), "accuracy": round(m["accuracy"], 4),
                              "macro_f1": round(m["macro_f1"], 4)}))


if __name__ == "__main__":
    main(sys.argv[1:])
