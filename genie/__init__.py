"""genie: answer a few questions, get a distributed PyTorch training project that runs."""

__version__ = "0.1.0"
