"""Regenerate src/guardian/schema/*.schema.json from the pydantic models (tests pin them)."""

from __future__ import annotations

import json
from pathlib import Path

from guardian.analyze import AnalyzeReport
from guardian.findings import Assessment

OUT = Path(__file__).resolve().parent.parent / "src" / "guardian" / "schema"

SCHEMAS = {"analyze": AnalyzeReport, "assessment": Assessment}


def render(name: str) -> str:
    schema = SCHEMAS[name].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"guardian/{name}.schema.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    for name in SCHEMAS:
        (OUT / f"{name}.schema.json").write_text(render(name), encoding="utf-8")
        print(f"wrote {name}.schema.json")
