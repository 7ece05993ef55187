from __future__ import annotations

import pytest

from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.taxonomy import (
    PERSUASION_INTENTIONS,
    FaceAct,
    Role,
    Technique,
    Vulnerability,
    persuasion_intentions,
)


def test_label_sets() -> None:
    assert len(Technique) == 11
    assert len(Vulnerability) == 5
    assert len(FaceAct) == 9  # 8 acts + other
    assert {t.code for t in Technique} == {"DEN", "EVA", "FEI", "RAT", "VIC", "SER", "S_B", "INT", "B_A", "ACC", "P_S"}
    assert all(t.definition.startswith("The manipulator") for t in Technique)
    assert all(v.definition.startswith("The victim") for v in Vulnerability)


def test_csv_spellings_parse() -> None:
    assert Technique.parse("Playing Victim Role") is Technique.PLAYING_THE_VICTIM
    assert Technique.parse("s_b") is Technique.SHAMING_OR_BELITTLEMENT
    assert Vulnerability.parse("naivety") is Vulnerability.NAIVETE
    with pytest.raises(ValueError, match="unknown technique"):
        Technique.parse("Gaslighting")


def test_every_dataset_label_parses() -> None:
    for version in ("con", "maj"):
        dialogues = load_mentalmanip(mentalmanip_path(version))
        assert any(d.techniques for d in dialogues)


def test_seed_002_table_2_has_42_descriptions() -> None:
    assert len(PERSUASION_INTENTIONS) == 42
    assert all("STC" not in d.text for d in PERSUASION_INTENTIONS)
    assert persuasion_intentions(FaceAct.HPOS_MINUS, Role.PERSUADER)[0].text == "The persuader criticizes the persuadee."
    assert persuasion_intentions(FaceAct.SNEG_PLUS, Role.PERSUADER) == ()
    assert all(act.general_intention for act in FaceAct)
