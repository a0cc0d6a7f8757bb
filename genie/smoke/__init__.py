"""The smoke test: a generated project really trains for a few steps, and genie judges what
it reports.

- :mod:`~genie.smoke.command`: ``genie smoke`` and ``genie explain``, and the smoke test
  after ``genie new`` and ``genie upgrade`` (doing and printing)
- :mod:`~genie.smoke.plan`: the plan and result types every runner shares (a leaf)
- :mod:`~genie.smoke.runner`: which runner a project needs, and what it must have installed
- :mod:`~genie.smoke.local`, :mod:`~genie.smoke.nodes`, :mod:`~genie.smoke.slurm`: the
  runners (this machine, simulated nodes, a SLURM job), one signature
- :mod:`~genie.smoke.process`: process trees with a timeout that kills all of them
- :mod:`~genie.smoke.torchrun_output`: the one reader of torchrun's output
- :mod:`~genie.smoke.verdict`: the report line found and judged against the plan
- :mod:`~genie.smoke.signatures`: known failures, their causes and fixes

The report line the templates print is :mod:`genie.contract`'s, beside the registry.

Submodules import each other directly; this package exports nothing.
"""
