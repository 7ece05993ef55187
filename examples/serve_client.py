"""A client of `guardian serve`: post turns, retry safely, read a conversation, stream events.

Start a server first (docs/serve.md):

    guardian serve --new-token          # prints a token and the [serve] tokens line for config.toml
    guardian serve                      # http://127.0.0.1:8787, docs at /docs

then:

    GUARDIAN_TOKEN=gdn_... python examples/serve_client.py [http://127.0.0.1:8787]

Only httpx and websockets are needed (both come with guardian).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import httpx
import websockets

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8787"
TOKEN = os.environ.get("GUARDIAN_TOKEN", "")
HEADERS = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}

CHAT = [
    ("Maya", "You said you'd pick me up at six. I waited an hour."),
    ("Daniel", "I never said that. You're overreacting, as usual."),
    ("Maya", "You texted me this morning."),
    ("Daniel", "You always do this. Know your place."),
]


def post_turn(http: httpx.Client, conversation: str, speaker: str, text: str, *, key: str) -> dict:
    """One turn; on a broken connection, the same Idempotency-Key makes the retry safe."""
    for attempt in range(3):
        try:
            answer = http.post(f"/v1/conversations/{conversation}/turns",
                               json={"speaker": speaker, "text": text}, headers={"Idempotency-Key": key})
        except httpx.TransportError:
            if attempt == 2:
                raise
            continue
        if answer.status_code == 429:  # rate limited: wait as told
            import time

            time.sleep(float(answer.headers.get("Retry-After", "1")))
            continue
        answer.raise_for_status()
        return dict(answer.json())
    raise RuntimeError("gave up")


def chat_over_http(conversation: str) -> None:
    with httpx.Client(base_url=URL, headers=HEADERS, timeout=30) as http:
        for n, (speaker, text) in enumerate(CHAT):
            event = post_turn(http, conversation, speaker, text, key=f"{conversation}-{n}")
            verdict = event["assessment"]
            flags = ", ".join(f"{f['technique'] or f['pattern']}: {f['evidence'][0]['quote']!r}" for f in verdict["findings"]
                              if f["evidence"]) or "-"
            print(f"turn {event['turn']} {speaker:7} risk {event['risk']:.2f} "
                  f"{'FLAG' if verdict['decision'] else 'ok  '} {flags}")
        stored = http.get(f"/v1/conversations/{conversation}").json()
        print(f"stored: {len(stored['turns'])} turns, risk {stored['risk']:.2f}")
        screened = http.post("/v1/screen", json={"turns": [{"speaker": s, "text": t} for s, t in CHAT]}).json()
        print("screened at once:", [round(a["probability"] or 0, 2) for a in screened["assessments"]])
        http.delete(f"/v1/conversations/{conversation}").raise_for_status()  # forget it (privacy)


async def chat_over_websocket(conversation: str) -> None:
    ws_url = URL.replace("http", "ws", 1) + f"/v1/conversations/{conversation}/events"
    async with websockets.connect(ws_url, additional_headers=HEADERS) as ws:
        for speaker, text in CHAT[:2]:
            await ws.send(json.dumps({"speaker": speaker, "text": text}))
            while True:  # turn, then any findings and errors, then the assessment
                event = json.loads(await ws.recv())
                print("event:", event["type"], (event.get("finding") or {}).get("technique") or "")
                if event["type"] == "assessment":
                    break


if __name__ == "__main__":
    conversation = "example-" + uuid.uuid4().hex[:8]
    chat_over_http(conversation)
    asyncio.run(chat_over_websocket(conversation + "-ws"))
