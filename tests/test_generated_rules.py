"""Rules every generated project keeps, checked over every golden variant (the goldens are
kept equal to what genie renders by test_render.py)."""

from __future__ import annotations

import ast
import io
import tokenize

import pytest

from . import goldens
from .conftest import calls
from .goldens import modules

VARIANTS = goldens.variants()
LOCAL_DEVICES = {"'cpu'", "device", "self.device", "run.device"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_torch_load_maps_to_cpu_and_loads_weights_only_where_it_can(variant):
    for name, path in modules(variant).items():
        source = path.read_text()
        lines = source.splitlines()
        for call in calls(ast.parse(source), "torch.load"):
            keywords = {k.arg: ast.unparse(k.value) for k in call.keywords}
            where = f"{variant}/{name}:{call.lineno}"
            # never onto GPU 0 from every rank: the CPU or this rank's own device
            assert keywords.get("map_location") in LOCAL_DEVICES, where
            if keywords.get("weights_only") != "True":
                # a full unpickle must say why, just above the call
                above = " ".join(lines[max(call.lineno - 4, 0) : call.lineno - 1])
                assert keywords.get("weights_only") == "False", where
                assert "weights-only" in above or "weights_only" in above, where


@pytest.mark.parametrize("variant", VARIANTS)
def test_faults_are_armed_in_smoke_mode_only(variant):
    train = goldens.files(variant)["train.py"]
    tree = ast.parse(train.read_text())
    armed = calls(tree, "smoke_check.arm_fault")
    assert len(armed) == 1, variant
    guards = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) == "args.smoke"
        and any(armed[0] is inner for inner in ast.walk(node))
    ]
    assert guards, f"{variant}: arm_fault outside `if args.smoke:`"


PRAGMAS = ("# fmt:", "# noqa", "# type:")  # instructions to tools, not explanations
OPENING, CLOSING = set("([{"), set(")]}")


def stranded_comments(source: str) -> list[int]:
    """Lines where a comment follows nothing but closing brackets, or one lone atom inside
    brackets: what black leaves when it splits a statement too long for its trailing
    comment, e.g. ``x = (\n    None  # why\n)`` or ``f(\n    a\n)  # why``."""
    lines: dict[int, tuple[int, list[tokenize.TokenInfo]]] = {}  # depth at its start, tokens
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        lines.setdefault(token.start[0], (depth, []))[1].append(token)
        depth += (token.string in OPENING) - (token.string in CLOSING)
    stranded = []
    for number, (inside, tokens) in lines.items():
        comment = next((t.string for t in tokens if t.type == tokenize.COMMENT), None)
        if comment is None or comment.startswith(PRAGMAS):
            continue
        code = [
            t
            for t in tokens
            if t.type in (tokenize.OP, tokenize.NAME, tokenize.NUMBER, tokenize.STRING)
            and t.string not in (",", ":")
        ]
        closing = bool(code) and all(t.string in CLOSING for t in code)
        lone_atom = inside > 0 and len(code) == 1 and code[0].type != tokenize.OP
        if closing or lone_atom:
            stranded.append(number)
    return stranded


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_comment_is_stranded_where_black_split_its_statement(variant):
    """A comment explaining a statement goes on its own line above it, not after a lone
    ``None`` or ``)`` that black split off when the line grew too long."""
    stranded = [
        f"{variant}/{name}:{number}: {path.read_text().splitlines()[number - 1].strip()}"
        for name, path in modules(variant).items()
        for number in stranded_comments(path.read_text())
    ]
    assert stranded == []


def test_stranded_comments_are_found_and_comments_on_full_lines_are_not():
    source = (
        "first: int | None = (\n    None  # the first step's loss\n)\n"
        "scaler.unscale_(\n    optimizer\n)  # clip the true gradients\n"
        "if (\n    a == b\n):  # another world size\n    pass  # nothing to do\n"
        "x = f(a)  # fits on its line\n"
        "call(\n    a, b,\n)  # fmt: skip\n"
        "# above the statement it explains\ny = [\n    1,\n    2,\n]\n"
    )
    assert stranded_comments(source) == [2, 6, 9]


def keyword_values(call: ast.Call) -> dict[str, str]:
    return {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_settings_a_hand_tuned_loop_has(variant):
    """DDP keeps gradients in its buckets; the HF Trainer skips its per-step NaN filter and
    uses fused AdamW on GPUs; AdamW is fused on GPUs where torch has it (2.0), except under
    Lightning (see the test below)."""
    answers = goldens.files(variant)[".genie.yml"].read_text()
    torch_minor = answers.split('torch: "')[1].split('"')[0]
    fused_exists = tuple(int(x) for x in torch_minor.split(".")) >= (2, 0)
    lightning = 'framework: "lightning"' in answers
    for name, path in modules(variant).items():
        tree = ast.parse(path.read_text())
        where = f"{variant}/{name}"
        for wrapper in ("DDP", "DDPStrategy"):
            for call in calls(tree, wrapper):
                assert keyword_values(call).get("gradient_as_bucket_view") == "True", where
        for call in calls(tree, "TrainingArguments"):
            found = keyword_values(call)
            assert found.get("logging_nan_inf_filter") == "False", where
            fused = "'adamw_torch_fused' if cuda else 'adamw_torch'"
            assert found.get("optim") == (fused if fused_exists else None), where
        for call in calls(tree, "torch.optim.AdamW"):
            fused = keyword_values(call).get("fused")
            assert fused == ("cuda or None" if fused_exists and not lightning else None), where


def test_lightning_mixed_precision_refuses_to_clip_a_fused_optimizer():
    """Why Lightning projects build AdamW unfused: its mixed-precision plugin raises on the
    first step when clipping (--max-grad-norm) the gradients of an optimizer that unscales
    them itself, as a fused AdamW does (seen on an H200: every Lightning project failed its
    smoke test). When a Lightning release allows it, this fails: fuse them again."""
    torch = pytest.importorskip("torch")
    precision = pytest.importorskip("lightning.pytorch.plugins.precision")
    weights = torch.nn.Parameter(torch.ones(4))
    weights.grad = torch.ones(4)
    plugin = precision.MixedPrecision("bf16-mixed", "cpu")
    plugin.clip_gradients(torch.optim.AdamW([weights]), clip_val=1.0)  # unfused: clips
    assert weights.grad.norm() == pytest.approx(1.0)
    with pytest.raises(RuntimeError, match="fused"):
        plugin.clip_gradients(torch.optim.AdamW([weights], fused=True), clip_val=1.0)
