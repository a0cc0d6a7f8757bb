"""Every fixed device becomes this process's device, ``DEVICE`` (from ``LOCAL_RANK``).

``torch.device("cuda")``, ``"cuda:0"``, integer devices, ``"cuda" if torch.cuda.is_available()
else "cpu"``, ``torch.accelerator.current_accelerator()``, ``.cuda()`` and ``device=0`` all
name GPU 0 (or the one accelerator); under torchrun each process must use its own.
``torch.load`` gets ``map_location=DEVICE`` so rank 1 does not load tensors onto GPU 0.
"""

from __future__ import annotations

import re

import libcst as cst

from genie.convert.base import DEVICE, Rewrite, code, dotted, expr, keyword_arg, kwarg
from genie.i18n import _

_GPU_STRING = re.compile(r"^['\"](cuda|gpu)(:\d+)?['\"]$")
_AVAILABLE = ("cuda.is_available", "accelerator.is_available", "mps.is_available")
# names that hold a device: device, dev, gpu, gpu_id, rank_device... (not n_gpus or gpu_count)
_DEVICE_NAME = re.compile(r"(.*[._])?(device|dev|gpu|gpu_id|gpu_idx|gpu_index|device_id)")


CONFIG_NAMES = ("args", "opt", "opts", "cfg", "config", "hparams", "params", "FLAGS", "conf")


def names_gpu(node: cst.BaseExpression) -> bool:
    """A device that means "the GPU": "cuda", "cuda:0", 0, the accelerator, or the one a
    flag chose (``args.device``): under torchrun each process needs its own."""
    if isinstance(node, cst.Attribute) and node.attr.value == "device":
        return isinstance(node.value, cst.Name) and node.value.value in CONFIG_NAMES
    if isinstance(node, cst.SimpleString):
        return bool(_GPU_STRING.match(node.value))
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.Name) and node.value == DEVICE:
        return True
    if isinstance(node, cst.Attribute) and node.attr.value == "type":
        return names_gpu(node.value)
    if isinstance(node, cst.Call):
        name = dotted(node.func)
        if name.endswith("current_accelerator"):
            return True
        if name in ("torch.device", "device") and node.args:
            return names_gpu(node.args[0].value)
    return isinstance(node, cst.IfExp) and _gpu_if_available(node)


def _gpu_if_available(node: cst.IfExp) -> bool:
    """``"cuda" if torch.cuda.is_available() else ...`` or ``"cuda" if use_cuda else "cpu"``."""
    test, fallback = code(node.test), code(node.orelse).strip("'\"")
    return names_gpu(node.body) and (any(a in test for a in _AVAILABLE) or fallback == "cpu")


class DeviceRewrite(Rewrite):
    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        if _gpu_if_available(original):
            self.ctx.change(original, _("the GPU-or-CPU choice -> DEVICE (this process's device)"))
            return expr(DEVICE)
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = dotted(original.func)
        if name.endswith("current_accelerator"):
            self.ctx.change(original, _("{c} -> DEVICE").format(c=code(original)))
            return expr(DEVICE)
        if name in ("torch.device", "device") and updated.args:
            cuda_index = len(updated.args) == 2 and _GPU_STRING.match(code(updated.args[0].value))
            if names_gpu(updated.args[0].value) and len(updated.args) == 1 or cuda_index:
                if not (isinstance(updated.args[0].value, cst.Name)):
                    self.ctx.change(original, _("{c} -> DEVICE").format(c=code(original)))
                return expr(DEVICE)
        if isinstance(updated.func, cst.Attribute):
            method = updated.func.attr.value
            if method == "cuda":
                return self._cuda_call(original, updated)
            if method == "to" and updated.args and updated.args[0].keyword is None:
                first = updated.args[0].value
                if names_gpu(first) and not (isinstance(first, cst.Name)):
                    self.ctx.change(original, _(".to({d}) -> .to(DEVICE)").format(d=code(first)))
                    return updated.with_changes(args=[cst.Arg(expr(DEVICE)), *updated.args[1:]])
        if name == "torch.load":
            return self._map_location(original, updated)
        return self._device_keyword(original, updated)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        """``device = "cuda"``: a name holding a GPU literal holds DEVICE instead."""
        targets = [dotted(t.target).lower() for t in updated.targets]
        value = updated.value
        literal = isinstance(value, (cst.SimpleString, cst.Integer))
        flag = isinstance(value, cst.Attribute)  # device = args.device, whatever the name
        if flag or literal and any(_DEVICE_NAME.fullmatch(t) for t in targets):
            if names_gpu(value):
                self.ctx.change(original, _("{v} -> DEVICE").format(v=code(value)))
                return updated.with_changes(value=expr(DEVICE))
        return updated

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        """Drop ``DEVICE = DEVICE`` (the script had its own DEVICE) and set_device calls."""
        [small, *rest] = updated.body
        if rest:
            return updated
        if isinstance(small, cst.Assign) and code(small).replace(" ", "") == f"{DEVICE}={DEVICE}":
            return cst.RemoveFromParent()
        if isinstance(small, cst.Expr) and dotted(getattr(small.value, "func", None)) in (
            "torch.cuda.set_device",
            "torch.accelerator.set_device_index",
        ):
            self.ctx.change(original, _("set_device removed: genie's setup sets the device"))
            return cst.RemoveFromParent()
        return updated

    def _cuda_call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        assert isinstance(updated.func, cst.Attribute)
        keywords = [a for a in updated.args if a.keyword is not None]
        self.ctx.change(original, _(".cuda() -> .to(DEVICE)"))
        return updated.with_changes(
            func=updated.func.with_changes(attr=cst.Name("to")),
            args=[cst.Arg(expr(DEVICE)), *keywords],
        )

    def _map_location(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        arg = kwarg(updated, "map_location")
        if arg is not None and not names_gpu(arg.value):
            return updated
        if arg is not None and isinstance(arg.value, cst.Name) and arg.value.value == DEVICE:
            return updated
        location = keyword_arg("map_location", expr(DEVICE))
        others = [a for a in updated.args if a is not arg]
        self.ctx.change(original, _("torch.load gets map_location=DEVICE"))
        return updated.with_changes(args=[*others, location])

    def _device_keyword(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        arg = kwarg(updated, "device")
        if arg is None or not names_gpu(arg.value) or isinstance(arg.value, cst.Name):
            return updated
        self.ctx.change(original, _("device={d} -> device=DEVICE").format(d=code(arg.value)))
        new = arg.with_changes(value=expr(DEVICE))
        return updated.with_changes(args=[new if a is arg else a for a in updated.args])
