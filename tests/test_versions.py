"""Every supported torch minor x framework renders code that uses only that version's APIs."""

from __future__ import annotations

import ast

import pytest

from genie import compat
from genie.detect import Machine
from genie.errors import SpecError
from genie.generate import engine
from genie.spec import build_spec

from .conftest import call_keywords, imported_names, project_code
from .variants import FRAMEWORKS

MACHINE = Machine(gpus=0, torch=None, python="3.11", hostname="node0")


def python_for(release: compat.TorchRelease) -> str:
    """A Python every library line supports with this torch (3.10 where it can)."""
    return compat.format_minor(max(release.python_min, min((3, 10), release.python_max)))


def attribute_names(source: str) -> set[str]:
    return {ast.unparse(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize("release", compat.RELEASES, ids=lambda r: r.minor)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_generated_code_follows_the_version_rules(release, framework):
    spec = build_spec(
        {
            "name": "p",
            "torch": release.minor,
            "python": python_for(release),
            "framework": framework,
        },
        MACHINE,
    )
    files = engine.render(spec)
    source = project_code(files)
    names = attribute_names(source)
    version = release.version
    for path, data in files.items():
        if path.endswith(".py"):
            compile(data.decode(), path, "exec")
    if framework == "lightning":  # compiled in place from 2.2: checkpoint keys unchanged
        assert ("self.net.compile" in names) is (version >= (2, 2))
        assert ("torch.compile" in names) is ((2, 0) <= version < (2, 2))
    elif framework == "ddp":  # each block compiled in place from 2.2, as under FSDP2
        assert ("block.compile" in names) is (version >= (2, 2))
        assert ("torch.compile" in names) is ((2, 0) <= version < (2, 2))
    else:
        assert ("torch.compile" in names) is (version >= (2, 0) and framework != "hf")
    if framework in ("ddp", "dp"):
        assert ("torch.amp.GradScaler" in names) is (version >= (2, 3))
        assert ("torch.cuda.amp.GradScaler" in names) is (version < (2, 3))
    if framework in ("ddp", "dp"):
        # explicit everywhere; weights-only where the unpickler can read an optimizer state
        [load] = [
            n for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "torch.load"
        ]  # fmt: skip
        [weights_only] = [kw.value for kw in load.keywords if kw.arg == "weights_only"]
        assert ast.literal_eval(weights_only) is (version >= (2, 0))
    if framework == "ddp":
        assert ("device_id" in call_keywords(source, "dist.init_process_group")) is (
            version >= (2, 3)
        )
    requirements = files["requirements.txt"].decode()
    assert f"torch>={release.minor},<" in files["requirements-torch.txt"].decode()
    assert ("numpy<2" in requirements) is (version < (2, 3))


@pytest.mark.parametrize("release", compat.RELEASES, ids=lambda r: r.minor)
@pytest.mark.parametrize("framework", ("ddp", "lightning", "hf"))
def test_fsdp_uses_the_fsdp_of_each_version(release, framework):
    raw = {
        "name": "p",
        "torch": release.minor,
        "python": python_for(release),
        "framework": framework,
        "strategy": "fsdp",
        "gpus_per_node": 4,  # Lightning's and the Trainer's FSDP need GPUs
    }
    if release.version < (2, 2):
        with pytest.raises(SpecError, match="torch 2.2 or newer"):
            build_spec(raw, MACHINE)
        return
    files = engine.render(build_spec(raw, MACHINE))
    source = project_code(files)
    for path, data in files.items():
        if path.endswith(".py"):
            compile(data.decode(), path, "exec")
    imports = imported_names(source)
    assert "torch.nn.parallel.DistributedDataParallel" not in imports
    if framework == "ddp":
        fsdp2 = release.version >= (2, 6)
        assert ("torch.distributed.fsdp.fully_shard" in imports) is fsdp2
        assert ("torch.distributed.fsdp.FullyShardedDataParallel" in imports) is not fsdp2
        # Full state dicts through the DCP helpers, not the deprecated FSDP.state_dict_type.
        assert "torch.distributed.checkpoint.state_dict.get_state_dict" in imports
        assert "FSDP.state_dict_type" not in attribute_names(source)
    elif framework == "lightning":
        assert "lightning.pytorch.strategies.FSDPStrategy" in imports
        assert call_keywords(source, "FSDPStrategy") >= {"auto_wrap_policy", "state_dict_type"}
        # Lightning's FSDP precision plugin raises on clipping by norm: the module clips
        # through the FSDP root (found on the H200: MisconfigurationException otherwise).
        assert "self.trainer.strategy.model.clip_grad_norm_" in attribute_names(source)
    else:
        args = call_keywords(source, "TrainingArguments")
        assert {"fsdp", "fsdp_config"} <= args
        assert "ddp_find_unused_parameters" not in args
        fsdp, config = keyword_values(source, "TrainingArguments", "fsdp", "fsdp_config")
        pinned = transformers_pin(files["requirements.txt"].decode())
        if pinned >= (5, 10):  # a string is deprecated there, and FSDP2 the default
            assert fsdp is True
            assert config["version"] == (2 if release.version >= (2, 6) else 1)
            assert config["auto_wrap_policy"] == "SIZE_BASED_WRAP"
        else:
            assert fsdp == "full_shard auto_wrap" and "version" not in config


def keyword_values(source: str, func: str, *names: str) -> list:
    """The values of keyword arguments of calls to ``func``: literals as Python values,
    dicts key by key, anything else (a name, a call) as its source text."""

    def value(node: ast.expr):
        if isinstance(node, ast.Dict):
            return {
                ast.literal_eval(k): value(v) for k, v in zip(node.keys, node.values, strict=True)
            }
        try:
            return ast.literal_eval(node)
        except ValueError:
            return ast.unparse(node)

    found = {
        kw.arg: value(kw.value)
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == func
        for kw in n.keywords
        if kw.arg in names
    }
    return [found[name] for name in names]


def transformers_pin(requirements: str) -> tuple[int, int]:
    [line] = [x for x in requirements.splitlines() if x.startswith("transformers>=")]
    low, high = line.removeprefix("transformers>=").split(",<")
    low_v, high_v = compat.parse_minor(low), compat.parse_minor(high)
    # the pin must not straddle a release that changed an API the code writes
    for package, first in compat.LIBRARY_FEATURES.values():
        if package == "transformers":
            assert not low_v < first < high_v, line
    return low_v


@pytest.mark.parametrize("release", compat.RELEASES, ids=lambda r: r.minor)
def test_pretrained_models_load_fp32_master_weights_with_each_transformers(release):
    """transformers 5 loads a checkpoint in its stored dtype (bf16 for most): the nlp
    model asks for fp32, with the keyword the pinned transformers reads."""
    spec = {"name": "p", "torch": release.minor, "python": python_for(release), "task": "nlp"}
    files = engine.render(build_spec(spec, MACHINE))
    source = files["model.py"].decode()
    keyword = "dtype" if transformers_pin(files["requirements.txt"].decode()) >= (4, 56) else (
        "torch_dtype")  # fmt: skip
    for func in ("AutoModelForSequenceClassification.from_pretrained",
                 "AutoModelForSequenceClassification.from_config"):  # fmt: skip
        calls = [n for n in ast.walk(ast.parse(source))
                 if isinstance(n, ast.Call) and ast.unparse(n.func) == func]  # fmt: skip
        given = {kw.arg: ast.unparse(kw.value) for call in calls for kw in call.keywords}
        assert given.get(keyword) == "torch.float32", (func, given)
