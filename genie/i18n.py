"""Every user-facing string goes through :func:`_` so a translation catalog can be added later
without touching call sites."""


def _(message: str) -> str:
    """Return ``message`` in the user's language (English only, for now)."""
    return message
