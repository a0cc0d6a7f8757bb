"""What an upgrade plans for each file, case by case (pure: no project on disk)."""

from __future__ import annotations

from genie.upgrade.plan import ADD, CONFLICT, KEEP, MERGE, REMOVE, REPLACE, SIDE, Step, plan, sha256

OLD = b"a\nb\nc\nd\ne\nf\n"
NEW = b"a\nb\nc\nd\ne\nf, fixed\n"  # genie's change, at the end
MINE = b"a, mine\nb\nc\nd\ne\nf\n"  # the user's, at the start


def only(steps: list[Step]) -> Step:
    assert len(steps) == 1, steps
    return steps[0]


def test_an_untouched_file_is_replaced_with_or_without_a_base():
    assert only(plan({"x": OLD}, {"x": NEW}, {"x": OLD}, {})) == Step(REPLACE, "x", NEW)
    hashes = {"x": sha256(OLD)}
    assert only(plan({"x": OLD}, {"x": NEW}, None, hashes)) == Step(REPLACE, "x", NEW)


def test_a_changed_file_is_merged_with_a_base_and_never_without_one():
    merged = only(plan({"x": MINE}, {"x": NEW}, {"x": OLD}, {}))
    assert merged == Step(MERGE, "x", b"a, mine\nb\nc\nd\ne\nf, fixed\n")
    beside = only(plan({"x": MINE}, {"x": NEW}, None, {"x": sha256(OLD)}))
    assert beside == Step(SIDE, "x", NEW) and beside.written == "x.genie-new"


def test_both_sides_changing_a_line_is_a_conflict_with_its_line():
    mine = b"a\nb\nc\nd\ne\nf, mine\n"
    step = only(plan({"x": mine}, {"x": NEW}, {"x": OLD}, {}))
    assert step.kind == CONFLICT and step.conflicts == (6,)
    assert (
        step.content == b"a\nb\nc\nd\ne\n<<<<<<< yours\nf, mine\n=======\nf, fixed\n>>>>>>> genie\n"
    )


def test_nothing_is_done_where_genie_changed_nothing_the_user_had_not():
    assert plan({"x": MINE}, {"x": OLD}, {"x": OLD}, {}) == []  # genie's the same as before
    assert plan({"x": NEW}, {"x": NEW}, {"x": OLD}, {}) == []  # the user made genie's change
    # without a base: genie's version is the one it wrote then, so the user's stands
    assert plan({"x": MINE}, {"x": OLD}, None, {"x": sha256(OLD)}) == []


def test_new_files_are_added_and_a_users_own_file_of_that_name_is_never_replaced():
    assert only(plan({}, {"new.py": NEW}, {}, {})) == Step(ADD, "new.py", NEW)
    mine = only(plan({"new.py": MINE}, {"new.py": NEW}, {}, {}))
    assert mine == Step(SIDE, "new.py", NEW)


def test_a_deleted_file_stays_deleted_unless_genie_changed_it():
    assert plan({}, {"x": OLD}, {"x": OLD}, {}) == []
    assert plan({}, {"x": OLD}, None, {"x": sha256(OLD)}) == []
    assert only(plan({}, {"x": NEW}, {"x": OLD}, {})) == Step(SIDE, "x", NEW)


def test_a_file_genie_no_longer_writes_goes_only_if_the_user_never_changed_it():
    assert only(plan({"gone": OLD}, {}, {"gone": OLD}, {})) == Step(REMOVE, "gone")
    assert only(plan({"gone": MINE}, {}, {"gone": OLD}, {})) == Step(KEEP, "gone")
    assert only(plan({"gone": MINE}, {}, None, {"gone": sha256(OLD)})) == Step(KEEP, "gone")
    assert plan({}, {}, {"gone": OLD}, {}) == []  # the user had removed it already


def test_a_file_that_is_not_text_is_never_merged():
    step = only(plan({"w.bin": b"\xff\x00mine"}, {"w.bin": b"\xff\x00new"}, {"w.bin": b"\xff"}, {}))
    assert step == Step(SIDE, "w.bin", b"\xff\x00new")
