"""The int8 recipe of the fine-tuned pair classifiers on this CPU (2026-11-27): how far each is from float32.

On an x86 CPU without VNNI, onnxruntime's uint8 x int8 products overflow 16-bit pair sums, and the
eight-bit mpnet-6 halves drifted by about 3 logits (docs/intent.md, "int8 on CPUs without VNNI"). This
builds each recipe's int8 files into a private cache and scores the bundled model with them:

- `s8`: eight-bit weights (the recipe until RUNTIME_VERSION 2);
- `rr`: seven-bit weights (`reduce_range`, shipped);
- `u8`: uint8 weights (the U8U8 kernel: eight bits, no overflow);
- `float32`: no int8 at all, the torch networks (slow; the reference).

Prints one JSON line: the everyday part's accuracy and macro-F1 (`--part dev|test`), or with
`--persuasion` the in-sample accuracy on the persuasion corpus (predictions kept in `--save FILE.npz`
to compare two recipes). No choice is made here.
Usage: python lab/intent_int8_recipe.py RECIPE [--part dev] [--persuasion] [--save FILE.npz]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import numpy as np


def patch(recipe: str) -> None:
    """Make `export_int8` use `recipe` (or the torch networks, for `float32`) in this process."""
    import onnxruntime.quantization as oq

    from guardian.encoding import pair_classifier as pc

    original = oq.quantize_dynamic

    def quantize(src: str, dst: str, **kw: Any) -> None:
        if recipe in ("s8", "u8"):
            kw.pop("reduce_range", None)
        if recipe == "u8":
            kw["weight_type"] = oq.QuantType.QUInt8
        original(src, dst, **kw)

    oq.quantize_dynamic = quantize
    pc.MAX_INT8_DRIFT = float("inf")  # measure the drift's effect, do not refuse it
    if recipe == "float32":
        torch = pc.torch_module()
        nets: dict[int, Any] = {}

        def logits(self: pc.PairClassifier, pairs: Any) -> np.ndarray:
            out = np.zeros((len(pairs), len(self.classes)))
            if not pairs:
                return out
            self.prepare()
            net = nets.setdefault(id(self), self.network())
            ids, types = pc.tokenize_pairs(self._tokenizer, pairs, self.max_len)
            with torch.inference_mode():
                for k, (i, t) in enumerate(zip(ids, types, strict=True)):
                    out[k] = net(*pc.pad(torch, [i], [t]))[0].numpy()
            return out

        pc.PairClassifier.logits = logits  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    recipe = argv[0]
    if recipe not in ("s8", "rr", "u8", "float32"):
        raise SystemExit("recipe: s8, rr, u8 or float32")
    os.environ["GUARDIAN_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"guardian-int8-{recipe}-")
    patch(recipe)
    from guardian.corpora.datasets import load_faceacts
    from guardian.detectors.intent.model import load_model
    from guardian.detectors.intent.train import (
        evaluate_file,
        predict_in_turn_order,
        utterances_in_context,
    )

    if "--persuasion" in argv:
        model = load_model()
        rows = load_faceacts()
        order, probs = predict_in_turn_order(model, rows, utterances_in_context(rows), list(range(len(rows))))
        pred = np.array([str(model.classes[j]) for j in probs.argmax(1)])
        gold = np.array([str(rows[i].face_act) for i in order])
        if "--save" in argv:
            np.savez(argv[argv.index("--save") + 1], order=np.array(order), pred=pred, gold=gold)
        print(json.dumps({"recipe": recipe, "persuasion_in_sample_accuracy": round(float((pred == gold).mean()), 4),
                          "n": len(order)}))
        return
    part = argv[argv.index("--part") + 1] if "--part" in argv else "dev"
    result = evaluate_file("data/faceacts/everyday.csv", split=part)
    print(json.dumps({"recipe": recipe, "part": part, **{k: result[k] for k in ("n", "accuracy", "macro_f1",
                                                                              "shown_precision", "shown_share")}}))


if __name__ == "__main__":
    main(sys.argv[1:])
