"""The three-way merge `genie upgrade` is built on: each rule in a table, then random edits
(seeded) for what must hold whatever the user and genie changed."""

from __future__ import annotations

import random

import pytest

from genie.upgrade.merge import merge3

BASE = "".join(f"line {n}\n" for n in range(1, 21))


def edit(text: str, number: int, new: str) -> str:
    """``text`` with its line ``number`` (1-based) replaced by ``new`` (lines, or nothing)."""
    lines = text.splitlines(keepends=True)
    lines[number - 1 : number] = [new] if new else []
    return "".join(lines)


def test_a_file_the_user_never_touched_becomes_genies_new_version():
    theirs = edit(BASE, 5, "line 5, fixed\n")
    assert merge3(BASE, BASE, theirs).text == theirs
    assert merge3(BASE, BASE, theirs).conflicts == ()


def test_a_file_genie_no_longer_changes_keeps_the_users_version():
    ours = edit(BASE, 5, "my line 5\n")
    assert merge3(BASE, ours, BASE).text == ours


@pytest.mark.parametrize(
    ("ours", "theirs", "merged"),
    [
        # separate regions: both changes, no conflict
        (edit(BASE, 2, "mine\n"), edit(BASE, 18, "genie's\n"),
         edit(edit(BASE, 2, "mine\n"), 18, "genie's\n")),
        # the same change on both sides: taken once
        (edit(BASE, 7, "same\n"), edit(BASE, 7, "same\n"), edit(BASE, 7, "same\n")),
        # the user added a block, genie changed a line far from it
        (edit(BASE, 3, "line 3\nextra a\nextra b\n"), edit(BASE, 15, "line 15 v2\n"),
         edit(edit(BASE, 3, "line 3\nextra a\nextra b\n"), 17, "line 15 v2\n")),
        # the user deleted a line genie left alone: the deletion stands
        (edit(BASE, 10, ""), edit(BASE, 1, "line 1 v2\n"), edit(edit(BASE, 10, ""), 1, "line 1 v2\n")),
        # a file whose last line has no newline, changed by genie elsewhere
        (BASE + "tail", edit(BASE, 1, "top\n") + "tail", edit(BASE, 1, "top\n") + "tail"),
    ],
)  # fmt: skip
def test_changes_to_different_lines_merge_without_conflict(ours, theirs, merged):
    result = merge3(BASE + ("tail" if ours.endswith("tail") else ""), ours, theirs)
    assert result.conflicts == ()
    assert result.text == merged


def test_the_same_line_changed_two_ways_is_a_conflict_holding_both():
    result = merge3(BASE, edit(BASE, 4, "mine\n"), edit(BASE, 4, "genie's\n"))
    expected = edit(BASE, 4, "<<<<<<< yours\nmine\n=======\ngenie's\n>>>>>>> genie\n")
    assert result.text == expected
    assert result.conflicts == (4,)


def test_a_conflict_holds_only_the_lines_the_sides_changed_differently():
    ours = edit(BASE, 9, "shared a\nmine\nshared z\n")
    theirs = edit(BASE, 9, "shared a\ngenie's\nshared z\n")
    result = merge3(BASE, ours, theirs)
    conflict = "shared a\n<<<<<<< yours\nmine\n=======\ngenie's\n>>>>>>> genie\nshared z\n"
    assert result.text == edit(BASE, 9, conflict)
    assert result.conflicts == (10,)


def test_a_conflict_on_a_last_line_without_newline_keeps_the_markers_on_their_own_lines():
    result = merge3("a\nb", "a\nmine", "a\ngenie's")
    assert result.text == "a\n<<<<<<< yours\nmine\n=======\ngenie's\n>>>>>>> genie\n"


def random_edit(rng: random.Random, lines: list[str], tag: str, lo: int, hi: int) -> list[str]:
    """Replace, insert or delete a few lines between ``lo`` and ``hi``."""
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(lo, min(hi, len(out)))
        kind = rng.choice(["replace", "insert", "delete"])
        new = [f"{tag} {rng.random():.6f}\n" for _ in range(rng.randint(1, 3))]
        if kind == "replace" and at < len(out):
            out[at : at + 1] = new
        elif kind == "delete" and at < len(out):
            del out[at]
        else:
            out[at:at] = new
    return out


@pytest.mark.parametrize("seed", range(60))
def test_edits_in_separate_halves_always_merge_cleanly_into_both_edits(seed):
    rng = random.Random(seed)
    base = [f"line {n}\n" for n in range(40)]
    ours = random_edit(rng, base[:18], "mine", 0, 17) + base[18:]
    theirs = base[:22] + random_edit(rng, base[22:], "genie", 0, 17)
    result = merge3("".join(base), "".join(ours), "".join(theirs))
    assert result.conflicts == ()
    assert result.text == "".join(ours[: len(ours) - 22] + base[18:22] + theirs[22:])


@pytest.mark.parametrize("seed", range(60))
def test_nothing_the_user_added_is_ever_dropped(seed):
    rng = random.Random(1000 + seed)
    base = [f"line {n}\n" for n in range(30)]
    ours = random_edit(rng, base, "mine", 0, 29)
    theirs = random_edit(rng, base, "genie", 0, 29)
    result = merge3("".join(base), "".join(ours), "".join(theirs))
    merged = result.text.splitlines(keepends=True)
    for line in ours:
        if line not in base:
            assert line in merged, (line, result.text)
    for line in theirs:  # and genie's change is there or in a conflict
        if line not in base:
            assert line in merged, (line, result.text)
    if not result.conflicts:  # no markers where no conflict was reported
        assert not any(line.startswith(("<<<<<<<", ">>>>>>>")) for line in merged)
    for number in result.conflicts:
        assert merged[number - 1] == "<<<<<<< yours\n"
