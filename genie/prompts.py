"""The wizard's three prompts (text, yes/no, menu): questionary's, adjusted in four ways.

- A refused reply's reason shows on the lines under the prompt. prompt_toolkit's validation
  toolbar sits at the bottom of a layout that fills every row below the cursor: in a fresh
  terminal, some 35 lines under the question it is about.
- The hint is broken at spaces (or between two wide characters) to the terminal's width, its
  later lines indented under the question; the terminal would cut a word wherever its edge falls.
- Esc (or Ctrl-Z) raises :class:`Back`, for the wizard to ask the previous question again.
- In a menu, a choice's shortcut key chooses it (questionary's only moves the cursor there).

``kwargs`` go to prompt_toolkit (``input``/``output``: how tests type into the wizard).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from genie import cjk

if TYPE_CHECKING:
    from prompt_toolkit import Application
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.layout import Window
    from prompt_toolkit.output import Output

BACK_KEYS = ("escape", "c-z")  # Esc is the one documented; Ctrl-Z is where "undo" is
INDENT = "  "  # a hint's later lines, and an error's, start under the question
_DESCRIPTION = "  Description: "  # what questionary puts before a choice's description


class Back(Exception):
    """The user pressed the back key: ask the previous question again."""


def text(
    message: str, hint: str, default: str, validate: Callable[[str], Any], **kwargs: Any
) -> Any:
    """A free-text answer, ``validate`` returning True or why the reply is refused."""
    import questionary

    width = _columns(kwargs)
    head = f"? {message}  "  # questionary: "?", " {message} ", " {instruction} "
    instruction = _wrapped(head, hint, width, room=cjk.cells(default) + 2)  # " 32", the cursor
    question = questionary.text(message, default=default, instruction=instruction, **kwargs)
    app = question.application
    return _run(app, _errors_below(app, validate, width))


def confirm(message: str, hint: str, default: bool, yes_no: str, **kwargs: Any) -> Any:
    """Yes or no: y, n, or Enter for ``default``."""
    import questionary

    # The trailing space: "(y/N) No", not "(y/N)No".
    instruction = _wrapped(f"? {message} ", f"{hint} {yes_no}", _columns(kwargs), room=5) + " "
    question = questionary.confirm(
        message, default=default, instruction=instruction, auto_enter=True, **kwargs
    )
    return _run(question.application)


def select(
    message: str,
    hint: str,
    choices: Sequence[tuple[Any, str, str | None, str | None]],
    default: Any = None,
    **kwargs: Any,
) -> Any:
    """One of ``choices``: (value, title, description, shortcut key). With shortcut keys,
    pressing one chooses its entry."""
    import questionary

    width = _columns(kwargs)
    start = cjk.cells(_DESCRIPTION)
    listed = [
        questionary.Choice(
            title,
            value=value,
            shortcut_key=key,
            description=description and "\n".join(cjk.wrap(description, width, start, " " * start)),
        )
        for value, title, description, key in choices
    ]
    shortcuts = any(key for *_rest, key in choices)
    question = questionary.select(
        message,
        choices=listed,
        default=default,
        instruction=_wrapped(f"? {message} ", hint, width) if hint.strip() else hint,
        use_shortcuts=shortcuts,
        **kwargs,
    )
    app = question.application
    return _run(app, _shortcuts_choose(app)) if shortcuts else _run(app)


def say(message: str, style: str, **kwargs: Any) -> None:
    """A line between two prompts (a warning, a note), wrapped at words like a hint."""
    import questionary

    output = _output(kwargs)
    indent = " " * (len(message) - len(message.lstrip()) + 2)  # "  ! " or "": under the text
    lines = cjk.wrap(message, _columns({"output": output}), indent=indent)
    questionary.print("\n".join(lines), style=style, output=output)


def _output(kwargs: dict[str, Any]) -> Output:
    """The prompts' output: the tests' one, else the terminal's (sys.stdout, as it is now)."""
    from prompt_toolkit.output import create_output

    return kwargs.get("output") or create_output()


def _columns(kwargs: dict[str, Any]) -> int:
    """The terminal's width, as prompt_toolkit sees it."""
    return max(_output(kwargs).get_size().columns, 20)


def _wrapped(head: str, hint: str, width: int, room: int = 0) -> str:
    """``hint``, shown after ``head`` on the question's line, broken to fit ``width``."""
    return "\n".join(cjk.wrap(hint, width, cjk.cells(head), INDENT, room))


def _run(app: Application[Any], *bindings: KeyBindings) -> Any:
    """Run the prompt with the back keys and ``bindings`` over questionary's own keys."""
    from prompt_toolkit.key_binding import KeyBindings, merge_key_bindings

    keys = KeyBindings()
    for key in BACK_KEYS:
        keys.add(key)(_back)
    app.key_bindings = merge_key_bindings([app.key_bindings or KeyBindings(), keys, *bindings])
    app.timeoutlen = 0.3  # how long a lone Esc waits for a key that makes it Alt+key (1 s)
    return app.run()


def _back(event: KeyPressEvent) -> None:
    event.app.erase_when_done = True  # the question left behind is not shown as answered
    event.app.exit(exception=Back(), style="class:aborting")


def _buffer_window(app: Application[Any]) -> Window:
    from prompt_toolkit.enums import DEFAULT_BUFFER
    from prompt_toolkit.layout.controls import BufferControl

    return next(
        w
        for w in app.layout.find_all_windows()
        if isinstance(w.content, BufferControl) and w.content.buffer.name == DEFAULT_BUFFER
    )


def _errors_below(app: Application[Any], validate: Callable[[str], Any], width: int) -> KeyBindings:
    """Enter accepts a valid reply; a refused one's reason shows under the prompt until the
    reply changes. (No validator is handed to prompt_toolkit: its toolbar is at the bottom.)"""
    from prompt_toolkit.filters import Condition, is_done, to_filter
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.layout import ConditionalContainer, HSplit, Window
    from prompt_toolkit.layout.controls import FormattedTextControl

    window = _buffer_window(app)
    window.dont_extend_height = to_filter(True)  # else it fills the rows below the cursor
    error: list[str] = []
    window.content.buffer.on_text_changed += lambda _buffer: error.clear()  # type: ignore[attr-defined]
    shown = Window(
        FormattedTextControl(lambda: [("fg:ansired", "\n".join(error))]), dont_extend_height=True
    )
    root = app.layout.container
    assert isinstance(root, HSplit)
    root.children.insert(1, ConditionalContainer(shown, Condition(lambda: bool(error)) & ~is_done))
    keys = KeyBindings()

    @keys.add("enter")
    def _accept(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        verdict = validate(buffer.text)
        if verdict is True:
            buffer.validate_and_handle()
        else:
            error[:] = cjk.wrap(f"{INDENT}! {verdict}", width, indent=INDENT + "  ")

    return keys


def _shortcuts_choose(app: Application[Any]) -> KeyBindings:
    """Each shortcut key chooses its entry at once."""
    from prompt_toolkit.key_binding import KeyBindings
    from questionary.prompts.common import InquirerControl, Separator

    control = next(
        w.content for w in app.layout.find_all_windows() if isinstance(w.content, InquirerControl)
    )
    keys = KeyBindings()
    for index, choice in enumerate(control.choices):
        key = choice.shortcut_key
        if isinstance(key, str) and not choice.disabled and not isinstance(choice, Separator):
            keys.add(key, eager=True)(partial(_choose, control, index))
    return keys


def _choose(control: Any, index: int, event: KeyPressEvent) -> None:
    control.pointed_at = index
    control.is_answered = True
    event.app.exit(result=control.get_pointed_at().value)
