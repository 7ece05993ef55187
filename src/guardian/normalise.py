"""Text as the detectors read it, and the way back to what the user wrote (issue 47 item 3).

Trivial disguises defeated every detector: Cyrillic look-alike letters ("Υоu'rе
оvеrrеасting") dropped the local model's p on examples/gaslighting.txt from .76 to .18,
leetspeak ("y0u'r3 0v3rr34ct1ng") to .17, and a zero-width space inside a word hid the
guilt-appeal pattern. A reader sees the same words; the word-piece tokenizer and the
key-phrase lemmas see strangers. So the runner gives detectors a *normalised* copy of
each turn:

1. NFKC (full-width and ligature letters become plain ones), applied per character with
   its combining marks so every output character still knows where it came from;
2. invisible characters removed: format controls (category Cf: zero-width spaces and
   joiners, soft hyphens, bidi embeddings, overrides and isolates, tag characters) and
   the invisible marks and fillers (combining grapheme joiner, variation selectors,
   Hangul fillers);
3. a confusables skeleton: common Cyrillic, Greek and Armenian letters that look like
   Latin ones become those Latin letters, only inside a word whose other letters are
   Latin (or a word wholly of look-alikes in a text that has Latin letters and no
   other Cyrillic/Greek letters), so real Russian or Greek text is left alone;
4. common leetspeak folded (0→o, 1→i/l, 3→e, 4→a, 5→s, 7→t, 8→b, 9→g, @→a, $→s, ! between
   letters→i) only in a token that has letters, only when the folded token is a known
   English word (simplemma's lexicon; for two characters a short list of function words,
   for a contraction's ending "'re", "'ll", "'ve"), and never in a number, alone or
   with a unit ("2024", "$500", "4pm", "10th"): "y0u" → "you", "l1ke" → "like", "th@t" →
   "that", "m3" → "me", while "mp3", "b2b", "b4" and "anna@example.com" stay as written.

The result carries an offset map: each normalised character's span in the original,
so a span a detector finds on the normalised text maps back (`Normalised.original_span`)
to a verbatim slice of what the user wrote; quotes are never shown in normalised form.
A text with nothing to normalise (the common case: plain ASCII without a digit or a
symbol inside a word) comes back as itself at the cost of one `isascii` and one regex
scan, and the runner then passes the very same turn objects on.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Normalised", "normalise"]


@dataclass(frozen=True, slots=True)
class Normalised:
    """`text` as detectors read it, and where each of its characters came from in `original`.

    `starts[i]:ends[i]` is the original slice normalised character `i` came from (a ligature
    gives several characters the same slice; a letter with its combining accents is one
    slice of several characters). Both are empty when nothing changed (`changed` is False).
    """

    original: str
    text: str
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()

    @property
    def changed(self) -> bool:
        return self.text is not self.original

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The span of `original` that normalised `text[start:end]` came from.

        Invisible characters removed inside the span are part of it (the quote is what the
        user wrote, zero-width space and all); those just outside it are not.
        """
        if not self.changed:
            return start, end
        n = len(self.text)
        start, end = max(0, min(start, n)), max(0, min(end, n))
        if start >= end:
            pos = self.starts[start] if start < n else len(self.original)
            return pos, pos
        return self.starts[start], self.ends[end - 1]


# --- invisible characters -------------------------------------------------------------------

#: Invisible characters outside category Cf (which is removed whole).
_INVISIBLE_EXTRA = frozenset(
    [
        0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0,
        *range(0xFE00, 0xFE10),  # variation selectors
        *range(0xE0100, 0xE01F0),  # variation selectors supplement
    ]
)


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) == "Cf" or ord(ch) in _INVISIBLE_EXTRA


# --- confusables ----------------------------------------------------------------------------

# No confusables package is installed (anyascii/unidecode transliterate by sound, "р" -> "r",
# which is the wrong answer here); these are the Unicode confusables.txt entries for the letters
# people actually use to disguise Latin text, kept to those that look the same in common fonts.
_CONFUSABLE: dict[str, str] = {
    # Cyrillic lower case
    "а": "a", "в": "b", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i", "ј": "j", "к": "k",
    "ӏ": "l", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "ԛ": "q", "ѕ": "s", "т": "t",
    "у": "y", "ԝ": "w", "х": "x", "ү": "y", "ԁ": "d", "ɡ": "g", "ѵ": "v", "ь": "b", "г": "r",
    # Cyrillic upper case
    "А": "A", "В": "B", "Е": "E", "Ё": "E", "Һ": "H", "І": "I", "Ї": "I", "Ј": "J", "К": "K",
    "Ӏ": "I", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Ԛ": "Q", "Ѕ": "S", "Т": "T",
    "У": "Y", "Ԝ": "W", "Х": "X", "Ү": "Y", "Ԁ": "D", "Ѵ": "V",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o",
    "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C",
    # Armenian and Latin oddities
    "օ": "o", "ս": "u", "ց": "g", "հ": "h", "ո": "n", "ı": "i", "ȷ": "j",
}


@lru_cache(maxsize=4096)
def _script(ch: str) -> str:
    """'latin', 'lookalike' (in the table), 'foreign' (another script's letter) or 'other'."""
    if ch in _CONFUSABLE:
        return "lookalike"
    if ("a" <= ch <= "z") or ("A" <= ch <= "Z"):
        return "latin"
    if not ch.isalpha():
        return "other"
    return "latin" if unicodedata.name(ch, "").startswith("LATIN") else "foreign"


def _fold_confusables(chars: list[str]) -> None:
    """Replace look-alike letters in place, word by word (see the module docstring, step 3)."""
    kinds = [_script(c) for c in chars]
    if "lookalike" not in kinds:
        return
    has_latin = "latin" in kinds
    # A word wholly of look-alikes ("о", "Ηе") is folded only where nothing says the text is
    # really Cyrillic or Greek: Latin letters present and no letter of those scripts outside the table.
    whole_words = has_latin and "foreign" not in kinds
    i, n = 0, len(chars)
    while i < n:
        if kinds[i] not in ("latin", "lookalike"):
            i += 1
            continue
        j = i
        while j < n and (kinds[j] != "other" or chars[j].isdigit() or chars[j] in "@$" or _is_mark(chars[j])):
            j += 1
        word = kinds[i:j]
        if "lookalike" in word and "foreign" not in word and ("latin" in word or whole_words):
            for k in range(i, j):
                if kinds[k] == "lookalike":
                    chars[k] = _CONFUSABLE[chars[k]]
        i = j


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch).startswith("M")


# --- leetspeak ------------------------------------------------------------------------------

_LEET: dict[str, tuple[str, ...]] = {
    "0": ("o",), "1": ("i", "l"), "3": ("e",), "4": ("a",), "5": ("s",), "7": ("t",),
    "8": ("b",), "9": ("g",), "@": ("a",), "$": ("s",), "!": ("i",),
}
#: A letter next to a leet character: the cheap test for "anything to fold" on ASCII text.
_LEET_HINT = re.compile(r"[A-Za-z][0-9@$]|[0-9@$][A-Za-z]|[A-Za-z]!+[A-Za-z]")
#: A candidate token: letters, digits and the symbol stand-ins, "!" only inside.
_TOKEN = re.compile(r"[A-Za-z0-9@$]+(?:!+[A-Za-z0-9@$]+)*")
#: A number with a unit or ordinal suffix, or a suffixed year: never leetspeak.
_NUMBER_WITH_UNIT = re.compile(
    r"\d\d+s|"  # "1990s", "20s"; a lone "4s" / "1s" is "as" / "is"
    r"\$?\d+(?:[.,]\d+)?(?:am|pm|st|nd|rd|th|k|m|b|x|h|hr|hrs|min|mins|km|kg|g|mg|mb|gb|tb|ml|"
    r"lb|lbs|ft|cm|mm|mph|kph|p|d|yo|yr|yrs|v|w|kw|hz|khz|ghz|fps|bn)",
    re.IGNORECASE,
)
_MAX_AMBIGUOUS = 6  # a token with more "1"s than this is not worth 2**n lexicon look-ups


@lru_cache(maxsize=8192)
def _known(word: str) -> bool:
    """Whether `word` is an English word in simplemma's lexicon (loaded on first use)."""
    import simplemma

    return bool(simplemma.is_known(word, lang="en"))


#: What may follow an apostrophe ("y0u'r3" -> "you're"): too short for the lexicon rule.
_CONTRACTION_ENDS = frozenset({"re", "ll", "ve", "nt"})


@lru_cache(maxsize=8192)
def _unleet(token: str, *, after_apostrophe: bool = False) -> str | None:
    """The English word `token` spells in leetspeak, or None (then it stays as written)."""
    if after_apostrophe and len(token) == 2 and any(c.isalpha() for c in token):
        for candidate in itertools.product(*(_LEET.get(c, (c,)) for c in token.lower())):
            if "".join(candidate) in _CONTRACTION_ENDS:
                word = "".join(c if c.isalpha() else o for c, o in zip(token, candidate, strict=True))
                return word.upper() if all(c.isupper() for c in token if c.isalpha()) else word
        return None
    if _NUMBER_WITH_UNIT.fullmatch(token):
        return None
    if len(token) == 2:
        return _short(token)
    if not any(c.isalpha() for c in token):
        return None
    if not any(c in _LEET for c in token):
        return None
    if token.count("1") > _MAX_AMBIGUOUS:
        return None
    options: list[tuple[str, ...]] = []
    for pos, c in enumerate(token):
        if c in _LEET:
            upper = _neighbour_upper(token, pos)
            options.append(tuple(o.upper() if upper else o for o in _LEET[c]))
        else:
            options.append((c,))
    for candidate in itertools.product(*options):
        word = "".join(candidate)
        if _known(word.lower()):
            return word
    return None


#: Two-letter words a one-letter token may spell ("m3" -> "me", "1f" -> "if"); the lexicon knows
#: too many two-letter abbreviations ("b4" -> "ba") to be asked about these.
_SHORT_WORDS = frozenset(
    ["am", "an", "as", "at", "be", "by", "do", "go", "he", "if", "in", "is", "it", "me", "my", "no", "of", "on", "or", "so", "to", "up", "us", "we"]
)


def _short(token: str) -> str | None:
    """The two-letter word a letter and a leet character spell, or None."""
    if sum(c.isalpha() for c in token) != 1:
        return None
    upper = any(c.isupper() for c in token)
    for candidate in itertools.product(*(_LEET.get(c, (c,)) for c in token.lower())):
        word = "".join(candidate)
        if word in _SHORT_WORDS:
            return "".join(c if c.isalpha() else (o.upper() if upper else o) for c, o in zip(token, word, strict=True))
    return None


def _neighbour_upper(token: str, pos: int) -> bool:
    """Whether the letters around `pos` are capitals ("Y0U" -> "YOU", "Y0u" -> "You")."""
    before = next((c for c in reversed(token[:pos]) if c.isalpha()), "")
    after = next((c for c in token[pos + 1 :] if c.isalpha()), "")
    return bool(before or after) and all(c.isupper() for c in (before, after) if c)


def _fold_leet(chars: list[str]) -> None:
    """Fold leetspeak tokens in place (one character for one, so the offset map stays valid)."""
    text = "".join(chars)
    if not _LEET_HINT.search(text):
        return
    for m in _TOKEN.finditer(text):
        word = _unleet(m.group(), after_apostrophe=m.start() > 0 and text[m.start() - 1] in "'\u2019")
        if word is not None:
            chars[m.start() : m.end()] = list(word)


# --- the whole ------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def normalise(text: str) -> Normalised:
    """`text` as detectors should read it, with the map back to `text` (see the module docstring).

    Cached: a live monitor's windows overlap, so each turn's text is normalised once.
    """
    if text.isascii() and not _LEET_HINT.search(text):
        return Normalised(text, text)
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    if text.isascii():
        chars, starts, ends = list(text), list(range(len(text))), list(range(1, len(text) + 1))
    else:
        nfkc = unicodedata.is_normalized("NFKC", text)
        for begin, end in _clusters(text):
            piece = text[begin:end]
            if not nfkc:
                piece = unicodedata.normalize("NFKC", piece)
            for ch in piece:
                if _invisible(ch):
                    continue
                chars.append(ch)
                starts.append(begin)
                ends.append(end)
        _fold_confusables(chars)
    _fold_leet(chars)
    out = "".join(chars)
    if out == text:
        return Normalised(text, text)
    return Normalised(text, out, tuple(starts), tuple(ends))


def _clusters(text: str) -> list[tuple[int, int]]:
    """Spans of each character with the combining marks that follow it (NFKC's unit, nearly:
    Hangul jamo stay apart, which no English model notices)."""
    spans: list[tuple[int, int]] = []
    begin = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or unicodedata.combining(text[i]) == 0:
            spans.append((begin, i))
            begin = i
    return spans
