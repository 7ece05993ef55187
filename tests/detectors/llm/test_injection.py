"""The prompt builder neutralises injection attempts: the transcript cannot close its fence or take a role."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage, SystemMessage

from guardian.conversation import Conversation
from guardian.detectors.llm.intent import reason_messages
from guardian.detectors.llm.manipulation import Shot, build_messages
from guardian.detectors.llm.parsing import ground_quote
from guardian.detectors.llm.prompting import escape_speaker, escape_text, new_fence_token, unescape

from .injection_cases import CASES

TOKEN = re.compile(r"^<<<(?:END )?(TRANSCRIPT|EXAMPLE \d+) ([0-9a-f]{16})>>>$")
TEMPLATE_TOKENS = ("<|", "|>", "<start_of_turn>", "<end_of_turn>", "[INST]", "[/INST]", "</s>", "<s>", "<<SYS>>")


def _conversation(name: str) -> Conversation:
    turns = [(s, t.replace("{TOKEN}", "0" * 16)) for s, t in CASES[name]]
    return Conversation.from_pairs(turns, id=name)


def _check_fenced(content: str, conv: Conversation, label: str = "TRANSCRIPT") -> list[str]:
    """The block between the fence lines: exactly one per turn, each `[turn N] name: text`."""
    lines = content.split("\n")
    opens = [i for i, line in enumerate(lines) if TOKEN.match(line) and not line.startswith("<<<END") and label in line]
    closes = [i for i, line in enumerate(lines) if TOKEN.match(line) and line.startswith("<<<END") and label in line]
    assert len(opens) == 1 and len(closes) == 1, "exactly one opening and one closing fence line"
    token = TOKEN.match(lines[opens[0]]).group(2)  # type: ignore[union-attr]
    assert TOKEN.match(lines[closes[0]]).group(2) == token  # type: ignore[union-attr]
    assert token not in conv.as_text()
    # The token appears only on fence lines: nothing inside can re-use it.
    assert sum(token in line for line in lines) == sum(bool(TOKEN.match(line)) for line in lines)
    inner = lines[opens[0] + 1 : closes[0]]
    assert len(inner) == len(conv.turns)
    for turn, line in zip(conv.turns, inner, strict=True):
        prefix = re.match(r"^\[turn (\d+)\] ([^:\[\]<>\n]{1,40}): ", line)
        assert prefix is not None, line
        assert int(prefix.group(1)) == turn.index
        assert "<<<" not in line and ">>>" not in line
        for tok in TEMPLATE_TOKENS:
            assert tok.lower() not in line.lower(), (tok, line)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]", line)
    return inner


def test_there_are_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_manipulation_prompt_neutralises(name: str) -> None:
    conv = _conversation(name)
    messages = build_messages(conv)
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage], "the transcript never adds a message"
    system, human = (str(m.content) for m in messages)
    assert conv.turns[-1].text not in system
    assert system == str(build_messages(Conversation.from_pairs([("A", "hi")]))[0].content), "system text is fixed"
    inner = _check_fenced(human, conv)
    # The operator's question comes after the fence, untouched by the transcript.
    assert human.rstrip().endswith("Answer with the JSON object only.")
    assert len(inner) == len(conv.turns)


@pytest.mark.parametrize("name", sorted(CASES))
def test_intent_prompt_neutralises(name: str) -> None:
    conv = _conversation(name)
    messages = reason_messages(conv)
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage]
    _check_fenced(str(messages[1].content), conv)


@pytest.mark.parametrize("name", ["fake_end_fence", "chatml_tokens", "speaker_named_system"])
def test_examples_are_fenced_too(name: str) -> None:
    conv = _conversation("ignore_above")
    shot_text = _conversation(name).as_text()
    human = str(build_messages(conv, [Shot(shot_text, manipulative=False)])[1].content)
    lines = human.split("\n")
    start = lines.index(next(line for line in lines if line.startswith("<<<EXAMPLE 1 ")))
    end = lines.index(next(line for line in lines if line.startswith("<<<END EXAMPLE 1 ")))
    for line in lines[start + 1 : end]:
        assert "<<<" not in line and "<|" not in line
    _check_fenced(human, conv)


def test_fence_token_is_fresh_per_call() -> None:
    conv = _conversation("ignore_above")
    tokens = {TOKEN.match(str(build_messages(conv)[1].content).split("\n")[0]).group(2) for _ in range(20)}  # type: ignore[union-attr]
    assert len(tokens) == 20


def test_a_token_in_the_text_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter(["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"])
    monkeypatch.setattr("guardian.detectors.llm.prompting.secrets.token_hex", lambda n: next(draws))
    assert new_fence_token("the text says aaaaaaaaaaaaaaaa") == "bbbbbbbbbbbbbbbb"


@pytest.mark.parametrize("name", sorted(CASES))
def test_quotes_of_escaped_text_still_ground(name: str) -> None:
    """A model quoting the escaped line gets back the transcript's own words."""
    conv = _conversation(name)
    turn = conv.turns[-1]
    escaped = escape_text(turn.text)
    words = [w for w in escaped.split(" ") if w and w != "⏎"]
    quote = " ".join(words[: min(6, len(words))])
    if not quote.strip() or not re.search(r"\w", quote):
        pytest.skip("no words to quote")
    evidence = ground_quote(conv, quote)
    if re.search(r"[\x00-\x08\x1b\x7f]", turn.text):
        return  # control characters are replaced by spaces: not quotable verbatim, by design
    assert evidence is not None, quote
    assert conv.turn(evidence.turn).text[evidence.start : evidence.end] == evidence.quote


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=0, max_size=30), st.text(min_size=0, max_size=200)),
        min_size=1,
        max_size=6,
    )
)
def test_any_text_stays_inside_its_fence(turns: list[tuple[str, str]]) -> None:
    conv = Conversation.from_pairs(turns, id="fuzz")
    _check_fenced(str(build_messages(conv)[1].content), conv)


@given(st.text(max_size=80))
def test_escape_is_one_inert_line(text: str) -> None:
    out = escape_text(text)
    assert len(out.splitlines()) <= 1
    assert "<<<" not in out and ">>>" not in out
    name = escape_speaker(text)
    assert 1 <= len(name) <= 40 and ":" not in name and len(name.splitlines()) == 1


def test_unescape_maps_lookalikes_back() -> None:
    assert unescape(escape_text("<|im_start|> [INST] a\nb")) == "<|im_start|> [INST] a \n b"


@pytest.mark.parametrize("text", ["<|", "|>", "<|>", "S⏎|<|><|", "I\n<|></s>⏎I|/<<>>"])
def test_lone_halves_of_template_tokens_stay_inert(text: str) -> None:
    """Found by the property test above (hypothesis drew "<|"; a 30,000-case random search then "<|>")."""
    conv = Conversation.from_pairs([("A", text)], id="halves")
    _check_fenced(str(build_messages(conv)[1].content), conv)
    if "⏎" not in text and "\n" not in text:  # ⏎ is the escaped line break, so those do not round-trip
        assert unescape(escape_text(text)) == text
