from __future__ import annotations

import pytest

from genie import compat


def test_versions_are_newest_first_and_span_1_13_to_2_15():
    versions = [r.version for r in compat.RELEASES]
    assert versions == sorted(versions, reverse=True)
    assert compat.SUPPORTED[0] == "2.15" and compat.SUPPORTED[-1] == "1.13"


@pytest.mark.parametrize(
    ("torch", "feature", "expected"),
    [
        ("1.13", "compile", False),
        ("2.0", "compile", True),
        ("2.2", "amp_grad_scaler", False),
        ("2.3", "amp_grad_scaler", True),
        ("2.2", "init_device_id", False),
        ("2.3", "init_device_id", True),
        ("2.2", "numpy2", False),
        ("2.3", "numpy2", True),
    ],
)
def test_feature_gates_follow_the_reference(torch, feature, expected):
    assert compat.features(torch)[feature] is expected


def test_requirements_pin_the_minor_and_numpy_below_2_3():
    # ddp with no tracker: torch, tqdm for the progress bar, pytest for the project's tests
    assert compat.requirements("2.14") == ["torch>=2.14,<2.15", "tqdm>=4.64"]
    assert compat.requirements("2.2")[-1] == "numpy<2"
    assert compat.requirements("1.13", "3.10", "dp", "custom", "tensorboard") == [
        "torch>=1.13,<1.14", "tqdm>=4.64", "tensorboard>=2.10", "six", "numpy<2",
    ]  # fmt: skip
    lightning = compat.requirements("2.14", "3.11", "lightning", "custom", "mlflow")
    # tqdm in every project: log lines go above the framework's own bar via tqdm.write
    assert "mlflow>=2.0" in lightning and "tqdm>=4.64" in lightning


def test_fsdp_runs_on_cpu_only_where_measured():
    assert compat.fsdp_needs_gpus("ddp", "2.14") is None
    assert "torch 2.6 needs GPUs" in compat.fsdp_needs_gpus("ddp", "2.6")
    assert "only on GPUs" in compat.fsdp_needs_gpus("lightning", "2.14")
    assert "only on GPUs" in compat.fsdp_needs_gpus("hf", "2.14")


def test_python_and_compile_limits_explain_what_would_work():
    assert compat.python_problem("2.14", "3.11") is None
    assert "torch 2.0-2.15 run on Python 3.11" in compat.python_problem("1.13", "3.11")
    assert compat.compile_problem("2.6", "3.13") is None
    assert "up to Python 3.12" in compat.compile_problem("2.4", "3.13")
