"""The project spec: every answer declared once, layered, validated into a frozen Spec.

- :mod:`genie.spec.fields`: the field machinery (type, choices, range, checks) and value checks
- :mod:`genie.spec.questions`: the field table, the one declaration of every answer
- :mod:`genie.spec.rules`: the rules that involve several answers
- :mod:`genie.spec.answers`: answers as named layers (flags over answers file over wizard)
- :mod:`genie.spec.build`: the :class:`Spec` and the one way to get one
- :mod:`genie.spec.project`: an existing project's ``.genie.yml`` back into a Spec

Submodules import each other, never this package's names: these re-exports are for callers.
"""

from genie.spec.build import Ask, Spec, build_spec, default, finish, resolve
from genie.spec.questions import FIELD_BY_NAME, FIELDS, META_KEYS

__all__ = [
    "FIELDS",
    "FIELD_BY_NAME",
    "META_KEYS",
    "Ask",
    "Spec",
    "build_spec",
    "default",
    "finish",
    "resolve",
]
