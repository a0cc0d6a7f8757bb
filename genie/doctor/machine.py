"""Checks of this machine's Python, torch, GPUs and CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

from genie import compat
from genie.doctor.base import Context, Result
from genie.doctor.facts import nvidia_smi, torch_info, visible
from genie.i18n import _, ngettext

INSTALL_CUDA_TORCH = _(
    "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128 "
    "(pick the CUDA version your driver supports: pytorch.org/get-started)"
)


def python(ctx: Context) -> Result:
    info = torch_info(ctx)
    found = info.get("python")
    if found is None:
        return Result(
            "python",
            "fail",
            info.get("error", "?"),
            _("pass --python with an interpreter that runs, with torch installed"),
        )
    if ctx.spec is not None and compat.format_minor(compat.parse_minor(found)) != ctx.spec.python:
        return Result(
            "python",
            "warn",
            _("Python {f}; the project was generated for Python {p}").format(
                f=found, p=ctx.spec.python
            ),
            _("use Python {p} where the project runs, or regenerate it with --python {f}").format(
                p=ctx.spec.python, f=compat.format_minor(compat.parse_minor(found))
            ),
        )
    return Result("python", "pass", _("Python {f} ({py})").format(f=found, py=ctx.python))


def torch(ctx: Context) -> Result:
    info = torch_info(ctx)
    if "error" in info:
        return Result("torch", "fail", info["error"], compat.install_command(ctx.project_dir))
    build = (
        _("CUDA {v}").format(v=info["cuda"])
        if info.get("cuda")
        else _("ROCm {v}").format(v=info["hip"]) if info.get("hip") else _("CPU-only")
    )
    detail = _("torch {v}, {build} build").format(v=info["version"], build=build)
    gpus = nvidia_smi(ctx).gpus
    if gpus and not info.get("cuda") and not info.get("hip"):
        return Result(
            "torch",
            "fail",
            detail
            + ngettext(
                "; nvidia-smi lists {n} GPU this torch cannot use",
                "; nvidia-smi lists {n} GPUs this torch cannot use",
                len(gpus),
            ).format(n=len(gpus)),
            INSTALL_CUDA_TORCH,
        )
    return Result("torch", "pass", detail)


def cuda(ctx: Context) -> Result:
    info = torch_info(ctx)
    if "error" in info:
        return Result("cuda", "fail", _("torch is not importable"), _("see the torch check"))
    smi, seen = nvidia_smi(ctx), visible(ctx)
    expected = len(smi.gpus) if seen.value is None else min(len(seen.devices), len(smi.gpus))
    devices = info.get("devices", 0)
    names = ", ".join(info.get("names", []))
    detail = ngettext(
        "torch.cuda.is_available() = {a}, {n} device",
        "torch.cuda.is_available() = {a}, {n} devices",
        devices,
    ).format(a=info.get("cuda_available"), n=devices) + (f" ({names})" if names else "")
    if not smi.gpus and not devices:
        return Result("cuda", "pass", detail + _("; no GPUs here: CPU training with gloo"))
    if devices != expected:
        return Result(
            "cuda",
            "fail",
            detail
            + _("; nvidia-smi lists {n}, CUDA_VISIBLE_DEVICES allows {e}").format(
                n=len(smi.gpus), e=expected
            )
            + (f" ({info['cuda_error']})" if info.get("cuda_error") else ""),
            _(
                "a driver older than torch's CUDA {v}, or a broken CUDA_VISIBLE_DEVICES: "
                "update the driver or install a torch built for an older CUDA"
            ).format(v=info.get("cuda")),
        )
    return Result("cuda", "pass", detail)


def nccl(ctx: Context) -> Result:
    info = torch_info(ctx)
    if info.get("nccl"):
        return Result("nccl", "pass", _("NCCL {v}").format(v=info["nccl"]))
    if nvidia_smi(ctx).gpus or (ctx.spec is not None and ctx.spec.gpus_per_node):
        return Result(
            "nccl",
            "fail",
            _("this torch has no NCCL: multi-GPU training needs it"),
            INSTALL_CUDA_TORCH,
        )
    return Result("nccl", "pass", _("no NCCL (not needed without GPUs: gloo is used)"))


def gpus(ctx: Context) -> Result:
    smi = nvidia_smi(ctx)
    if not smi.found:
        if ctx.spec is not None and ctx.spec.gpus_per_node > 0:
            return Result(
                "gpus",
                "fail",
                _(
                    "no nvidia-smi: no NVIDIA driver here; "
                    "the project trains on GPUs ({n} per node)"
                ).format(n=ctx.spec.gpus_per_node),
                _("run it (and genie doctor) on a GPU node, or install the NVIDIA driver"),
            )
        return Result(
            "gpus", "pass", _("no nvidia-smi: no NVIDIA driver here (fine for CPU training)")
        )
    if smi.error is not None:
        return Result(
            "gpus",
            "fail",
            _("nvidia-smi failed: {why}").format(why=smi.error),
            _("the driver is not loaded or does not match its tools: reinstall it or reboot"),
        )
    listed = "; ".join(f"{g.index}: {g.name}, {g.memory}" for g in smi.gpus) or _("no GPU listed")
    driver = smi.gpus[0].driver if smi.gpus else "?"
    return Result("gpus", "pass", _("driver {d}; {gpus}").format(d=driver, gpus=listed))


def visible_devices(ctx: Context) -> Result:
    seen = visible(ctx)
    fix = _("export CUDA_VISIBLE_DEVICES=0,1,... (distinct indexes of existing GPUs), or unset it")
    if seen.problems:
        return Result(
            "cuda_visible_devices",
            "fail",
            f"CUDA_VISIBLE_DEVICES={seen.value!r}: " + "; ".join(seen.problems),
            fix,
        )
    if seen.value is None:
        return Result("cuda_visible_devices", "pass", _("unset: every GPU is visible"))
    want = ctx.spec.processes_per_node if ctx.spec and ctx.spec.gpus_per_node else 0
    if want and len(seen.devices) < want:
        return Result(
            "cuda_visible_devices",
            "fail",
            ngettext(
                "CUDA_VISIBLE_DEVICES={v!r} shows {n} GPU; the project runs {w} per node",
                "CUDA_VISIBLE_DEVICES={v!r} shows {n} GPUs; the project runs {w} per node",
                len(seen.devices),
            ).format(v=seen.value, n=len(seen.devices), w=want),
            fix,
        )
    shown = ",".join(seen.devices) or _("none (every GPU hidden)")
    return Result("cuda_visible_devices", "pass", _("GPUs visible: {s}").format(s=shown))
