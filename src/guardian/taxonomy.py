"""The label sets guardian speaks in, defined once.

Every other module imports names from here, so a label spelled in a dataset
("Playing Victim Role") and a label shown to a user ("Playing the Victim Role")
can never drift apart. Definitions are quoted from MentalManip (seed 000,
Appendix A); face acts and intention descriptions from seed 002 (section 2.1.2,
Table 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Technique(StrEnum):
    """The 11 manipulation techniques of MentalManip; the value is the display name."""

    DENIAL = "Denial"
    EVASION = "Evasion"
    FEIGNING_INNOCENCE = "Feigning Innocence"
    RATIONALIZATION = "Rationalization"
    PLAYING_THE_VICTIM = "Playing the Victim Role"
    PLAYING_THE_SERVANT = "Playing the Servant Role"
    SHAMING_OR_BELITTLEMENT = "Shaming or Belittlement"
    INTIMIDATION = "Intimidation"
    BRANDISHING_ANGER = "Brandishing Anger"
    ACCUSATION = "Accusation"
    PERSUASION_OR_SEDUCTION = "Persuasion or Seduction"

    @property
    def code(self) -> str:
        return _TECHNIQUE_INFO[self].code

    @property
    def definition(self) -> str:
        return _TECHNIQUE_INFO[self].definition

    @classmethod
    def parse(cls, label: str) -> Technique:
        """Accept display names, the CSV spellings and abbreviations, any case."""
        key = _norm(label)
        try:
            return _TECHNIQUE_ALIASES[key]
        except KeyError:
            raise ValueError(f"unknown technique {label!r}") from None


class Vulnerability(StrEnum):
    """The 5 vulnerabilities a manipulator targets (MentalManip)."""

    NAIVETE = "Naivete"
    DEPENDENCY = "Dependency"
    OVER_RESPONSIBILITY = "Over-responsibility"
    OVER_INTELLECTUALIZATION = "Over-intellectualization"
    LOW_SELF_ESTEEM = "Low self-esteem"

    @property
    def code(self) -> str:
        return _VULNERABILITY_INFO[self].code

    @property
    def definition(self) -> str:
        return _VULNERABILITY_INFO[self].definition

    @classmethod
    def parse(cls, label: str) -> Vulnerability:
        key = _norm(label)
        try:
            return _VULNERABILITY_ALIASES[key]
        except KeyError:
            raise ValueError(f"unknown vulnerability {label!r}") from None


class FaceAct(StrEnum):
    """Face acts (seed 002 section 2.1.2): speaker/hearer x positive/negative face x saved/attacked."""

    SPOS_PLUS = "spos+"
    SPOS_MINUS = "spos-"
    HPOS_PLUS = "hpos+"
    HPOS_MINUS = "hpos-"
    SNEG_PLUS = "sneg+"
    SNEG_MINUS = "sneg-"
    HNEG_PLUS = "hneg+"
    HNEG_MINUS = "hneg-"
    OTHER = "other"

    @property
    def general_intention(self) -> str:
        """A description that fits any conversation, not only persuasion."""
        return GENERAL_INTENTIONS[self]

    @classmethod
    def parse(cls, label: str) -> FaceAct:
        try:
            return cls(label.strip().lower())
        except ValueError:
            raise ValueError(f"unknown face act {label!r}") from None


class Role(StrEnum):
    """Sides of a request/persuasion setting (seed 002: ER persuader, EE persuadee)."""

    PERSUADER = "persuader"
    PERSUADEE = "persuadee"


@dataclass(frozen=True, slots=True)
class LabelInfo:
    code: str
    definition: str


_TECHNIQUE_INFO: dict[Technique, LabelInfo] = {
    Technique.DENIAL: LabelInfo(
        "DEN", "The manipulator either denies wrongdoing or pretends to be confused about others' concerns."
    ),
    Technique.EVASION: LabelInfo(
        "EVA", "The manipulator refuses to pay attention to something or gives irrelevant or vague responses."
    ),
    Technique.FEIGNING_INNOCENCE: LabelInfo(
        "FEI", "The manipulator implies that any harm caused was accidental."
    ),
    Technique.RATIONALIZATION: LabelInfo(
        "RAT", "The manipulator rationalizes their inappropriate behavior with excuses."
    ),
    Technique.PLAYING_THE_VICTIM: LabelInfo(
        "VIC",
        "The manipulator portrays themselves as a victim to gain sympathy, attention, or divert "
        "focus from their misconduct.",
    ),
    Technique.PLAYING_THE_SERVANT: LabelInfo(
        "SER", "The manipulator disguises their self-serving motives as a contribution to a more noble cause."
    ),
    Technique.SHAMING_OR_BELITTLEMENT: LabelInfo(
        "S_B",
        "The manipulator uses sarcasm, criticism, and put-downs to make others feel inferior, "
        "unworthy, or embarrassed.",
    ),
    Technique.INTIMIDATION: LabelInfo(
        "INT", "The manipulator places others on the defensive by using veiled threats."
    ),
    Technique.BRANDISHING_ANGER: LabelInfo(
        "B_A", "The manipulator uses anger to brandish emotional intensity to shock the victim into submission."
    ),
    Technique.ACCUSATION: LabelInfo(
        "ACC",
        "The manipulator suggests that the victim is at fault, selfish, uncaring, or leading an "
        "excessively easy life.",
    ),
    Technique.PERSUASION_OR_SEDUCTION: LabelInfo(
        "P_S",
        "The manipulator employs charm, emotional appeal, or logical reasoning to make others "
        "lower their defenses.",
    ),
}

_VULNERABILITY_INFO: dict[Vulnerability, LabelInfo] = {
    Vulnerability.NAIVETE: LabelInfo(
        "NAI", "The victim is easily trusting and struggles to accept that others might be malevolent."
    ),
    Vulnerability.DEPENDENCY: LabelInfo(
        "DEP", "The victim has interest-based or emotional dependencies on the manipulator."
    ),
    Vulnerability.OVER_RESPONSIBILITY: LabelInfo(
        "O_R",
        "The victim is overly self-critical and sets high standards for themselves, often assuming "
        "undue blame and responsibility for the manipulator's actions.",
    ),
    Vulnerability.OVER_INTELLECTUALIZATION: LabelInfo(
        "O_I",
        "The victim rationalizes the manipulator's hurtful behavior by believing there is always a "
        "justified reason behind it.",
    ),
    Vulnerability.LOW_SELF_ESTEEM: LabelInfo(
        "L_S", "The victim is self-doubting and unconfident in pursuing their own wants and needs."
    ),
}


def _norm(label: str) -> str:
    return " ".join(label.replace("_", " ").replace("-", " ").lower().split())


_TECHNIQUE_ALIASES: dict[str, Technique] = {}
for _t in Technique:
    _TECHNIQUE_ALIASES[_norm(_t.value)] = _t
    _TECHNIQUE_ALIASES[_norm(_t.code)] = _t
    _TECHNIQUE_ALIASES[_norm(_t.name)] = _t
_TECHNIQUE_ALIASES[_norm("Playing Victim Role")] = Technique.PLAYING_THE_VICTIM
_TECHNIQUE_ALIASES[_norm("Playing Servant Role")] = Technique.PLAYING_THE_SERVANT

_VULNERABILITY_ALIASES: dict[str, Vulnerability] = {}
for _v in Vulnerability:
    _VULNERABILITY_ALIASES[_norm(_v.value)] = _v
    _VULNERABILITY_ALIASES[_norm(_v.code)] = _v
    _VULNERABILITY_ALIASES[_norm(_v.name)] = _v
_VULNERABILITY_ALIASES[_norm("Naivety")] = Vulnerability.NAIVETE
_VULNERABILITY_ALIASES[_norm("NAT")] = Vulnerability.NAIVETE  # seed 000 Appendix A's abbreviation


def parse_label_list(field: str) -> tuple[str, ...]:
    """Split a comma-separated label field of the MentalManip CSVs."""
    return tuple(part.strip() for part in field.split(",") if part.strip())


GENERAL_INTENTIONS: dict[FaceAct, str] = {
    FaceAct.SPOS_PLUS: "presents themselves in a good light (their virtues, deeds or reputation)",
    FaceAct.SPOS_MINUS: "admits fault, apologises or puts themselves down",
    FaceAct.HPOS_PLUS: "praises, agrees with or shows sympathy for the listener",
    FaceAct.HPOS_MINUS: "criticises or doubts the listener",
    FaceAct.SNEG_PLUS: "resists or refuses, protecting their own freedom",
    FaceAct.SNEG_MINUS: "gives in, committing themselves against their own wish",
    FaceAct.HNEG_PLUS: "eases the listener's burden or apologises for imposing",
    FaceAct.HNEG_MINUS: "presses the listener to do something",
    FaceAct.OTHER: "small talk, greeting or other talk with no face at stake",
}


@dataclass(frozen=True, slots=True)
class IntentionDescription:
    """One of seed 002's Table 2 descriptions, with "STC" generalised to the cause/request."""

    face_act: FaceAct
    role: Role
    text: str


def _d(act: FaceAct, role: Role, *texts: str) -> list[IntentionDescription]:
    return [IntentionDescription(act, role, t) for t in texts]


_ER, _EE = Role.PERSUADER, Role.PERSUADEE
PERSUASION_INTENTIONS: tuple[IntentionDescription, ...] = tuple(
    _d(
        FaceAct.SPOS_PLUS, _ER,
        "The persuader praises or promotes the good deeds of the cause.",
        "The persuader states that the cause is a reputable and trustworthy organization.",
        "The persuader provides information on the request or related matters, implying that the cause does good for society.",
        "The persuader shows their own involvement in the cause, having given to it or planning to.",
        "The persuader expresses their preference for causes or the people they want to help.",
        "The persuader claims that they want to do something good, such as helping children.",
        "The persuader claims that they have given to other causes or taken part in their activities.",
        "The persuader insists that they are proud of themselves.",
    )
    + _d(
        FaceAct.SPOS_PLUS, _EE,
        "The persuadee presents their knowledge about such causes to the persuader.",
        "The persuadee claims that they have given to other causes or taken part in their activities.",
        "The persuadee expresses their preference for causes or the people they want to help.",
        "The persuadee claims that they want to do something good, such as helping children.",
        "The persuadee states that they do good deeds.",
    )
    + _d(
        FaceAct.SPOS_MINUS, _EE,
        "The persuadee apologizes for not agreeing to the request or for agreeing to only a small part of it.",
    )
    + _d(
        FaceAct.HPOS_PLUS, _ER,
        "The persuader appreciates or praises the persuadee's generosity.",
        "The persuader empathizes or agrees with the persuadee.",
        "The persuader encourages the persuadee to do good deeds other than the request.",
        "The persuader is interested in something the persuadee mentioned and plans to look into it later.",
        "The persuader compliments the persuadee for their virtues, efforts, likes or desires.",
        "The persuader motivates the persuadee to agree, e.g. by explaining the essential role their help plays or highlighting the suffering of those in need.",
    )
    + _d(
        FaceAct.HPOS_PLUS, _EE,
        "The persuadee shows willingness to agree to the request or to discuss the cause.",
        "The persuadee empathizes or agrees with the persuader.",
        "The persuadee acknowledges the efforts of the cause.",
        "The persuadee says they are not so familiar with the organization.",
        "The persuadee appreciates or praises the persuader's generosity.",
        "The persuadee is planning to browse the website recommended by the persuader.",
    )
    + _d(FaceAct.HPOS_MINUS, _ER, "The persuader criticizes the persuadee.")
    + _d(
        FaceAct.HPOS_MINUS, _EE,
        "The persuadee doubts or criticizes the cause or the persuader.",
        "The persuadee either knows nothing about the cause or is not interested in it.",
    )
    + _d(
        FaceAct.SNEG_PLUS, _EE,
        "The persuadee is either hesitant or unwilling to agree to the request.",
        "The persuadee refuses the request, or to increase what they give, without even giving a reason.",
        "The persuadee cites a reason for not agreeing at all or not giving more.",
    )
    + _d(
        FaceAct.HNEG_PLUS, _ER,
        "The persuader makes agreeing easy and simple, reducing any inconvenience for the persuadee.",
        "The persuader apologizes for inconvenience or intrusion.",
        "The persuader tries to minimize the financial burden on the persuadee.",
    )
    + _d(
        FaceAct.HNEG_MINUS, _ER,
        "The persuader asks the persuadee to agree to the request (e.g. to donate).",
        "The persuader asks the persuadee to give more.",
        "The persuader asks the persuadee for their time or permission to discuss the cause.",
        "The persuader asks or confirms the amount the persuadee is giving.",
    )
    + _d(
        FaceAct.HNEG_MINUS, _EE,
        "The persuadee asks the persuader to give.",
        "The persuadee asks the persuader questions about the cause.",
        "The persuadee asks the persuader how they themselves are involved in the cause.",
    )
)


def persuasion_intentions(face_act: FaceAct, role: Role) -> tuple[IntentionDescription, ...]:
    """The seed's domain-specific descriptions that fit a face act and a side."""
    return tuple(d for d in PERSUASION_INTENTIONS if d.face_act is face_act and d.role is role)


TECHNIQUES: tuple[Technique, ...] = tuple(Technique)
VULNERABILITIES: tuple[Vulnerability, ...] = tuple(Vulnerability)
FACE_ACTS: tuple[FaceAct, ...] = tuple(FaceAct)
