"""Spec -> files, and the commands that launch them. Planning is pure; writing is the edge.

- :mod:`~genie.generate.command`: ``genie new`` (doing and printing)
- :mod:`~genie.generate.catalogue`: every file of a project, with what it is for
- :mod:`~genie.generate.context`: everything the templates see, computed once from the spec
- :mod:`~genie.generate.engine`: cookiecutter + black, in memory
- :mod:`~genie.generate.write`: putting the files on disk atomically, never over a user's file
- :mod:`~genie.generate.archive`: the files as genie wrote them, kept for ``genie upgrade``
- :mod:`~genie.generate.launch`: the torchrun, SLURM and per-node commands (pure)
- :mod:`~genie.generate.manifests`: the Kubeflow manifests (pure)

Submodules import each other directly; this package exports nothing.
"""
