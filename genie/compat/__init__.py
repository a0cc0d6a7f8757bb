"""What genie knows about PyTorch versions and the libraries beside them, as data.

- :mod:`genie.compat.torch`: torch releases, their Pythons, API gates, impossible combinations
- :mod:`genie.compat.libraries`: library release lines and a project's pinned requirements

Callers read both through this package; the submodules never import it.
"""

from genie.compat.libraries import (
    LIBRARY_FEATURES,
    LIBRARY_LINES,
    PROGRESS_PACKAGE,
    REQUIREMENTS,
    TEST_LINES,
    TEST_REQUIREMENTS,
    TORCH_FAMILY,
    TORCH_REQUIREMENTS,
    TRACKER_PACKAGES,
    LibraryLine,
    install_command,
    library_features,
    library_line,
    packages,
    requirements,
    split_torch,
)
from genie.compat.torch import (
    FEATURES,
    FSDP_CPU_FROM,
    NEWEST,
    RELEASES,
    SUPPORTED,
    UNVERIFIED,
    TorchRelease,
    Version,
    compile_problem,
    features,
    format_minor,
    fsdp_needs_gpus,
    fsdp_problem,
    parse_minor,
    python_problem,
    release,
)

__all__ = [
    "FEATURES", "FSDP_CPU_FROM", "LIBRARY_FEATURES", "LIBRARY_LINES", "NEWEST", "PROGRESS_PACKAGE",
    "RELEASES", "REQUIREMENTS", "SUPPORTED", "TEST_LINES", "TEST_REQUIREMENTS", "TORCH_FAMILY",
    "TORCH_REQUIREMENTS",
    "TRACKER_PACKAGES", "UNVERIFIED", "LibraryLine", "TorchRelease", "Version", "compile_problem",
    "features", "format_minor", "fsdp_needs_gpus", "fsdp_problem", "install_command",
    "library_features", "library_line", "packages", "parse_minor", "python_problem",
    "release", "requirements", "split_torch",
]  # fmt: skip
