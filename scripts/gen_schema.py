"""Regenerate src/guardian/schema/*.schema.json from the pydantic models (tests pin them).

`watch-event` is the discriminated union of `guardian.events` (one line of `watch --headless`
or a session log); the others are a model's own schema with an `$id`.
"""

from __future__ import annotations

import json
from pathlib import Path

from guardian.analyze import AnalyzeReport
from guardian.events import json_schema as watch_event_schema
from guardian.findings import Assessment

OUT = Path(__file__).resolve().parent.parent / "src" / "guardian" / "schema"

SCHEMAS = {"analyze": AnalyzeReport, "assessment": Assessment}


def render(name: str) -> str:
    if name == "watch-event":
        return json.dumps(watch_event_schema(), indent=2, sort_keys=True) + "\n"
    schema = SCHEMAS[name].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"guardian/{name}.schema.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    for name in [*SCHEMAS, "watch-event"]:
        (OUT / f"{name}.schema.json").write_text(render(name), encoding="utf-8")
        print(f"wrote {name}.schema.json")
