"""The real `genie new` in a pseudo-terminal, as a person meets it."""

from __future__ import annotations

import os
import re
import sys
import time
import unicodedata

import pexpect
import pytest

ENV = {**os.environ, "NO_COLOR": "1", "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}


def spawn(tmp_path, *args: str, env: dict[str, str] = ENV) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable, ["-m", "genie", "new", *args], cwd=str(tmp_path), env=env,
        encoding="utf-8", timeout=60, dimensions=(40, 120),
    )  # fmt: skip


def test_enter_through_the_wizard_and_confirm_writes_the_project(tmp_path):
    child = spawn(tmp_path, "proj", "--no-smoke")
    child.expect("How many nodes")
    child.sendline("")
    child.expect("Cluster scheduler")
    child.send("\r")
    child.expect("GPUs per node")
    child.sendline("")
    # the essentials, then the summary
    for question in ("PyTorch version", "Task", "Framework"):
        child.expect(question)
        child.send("\r")
    child.expect("Global batch")  # the summary
    child.expect("Generate this project")
    child.expect("Customize training settings")
    child.send("\r")  # Generate
    child.expect("bash launch/single_node.sh")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "proj" / "train.py").is_file()


def test_ctrl_c_exits_130_and_writes_nothing(tmp_path):
    child = spawn(tmp_path, "proj", "--no-smoke")
    child.expect("How many nodes")
    child.sendline("")
    child.expect("Cluster scheduler")
    child.send("\r")
    child.expect("GPUs per node")
    child.sendcontrol("c")
    child.expect("interrupted; nothing written")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert list(tmp_path.iterdir()) == []


def test_declining_the_summary_writes_nothing(tmp_path):
    child = spawn(tmp_path, "proj", "--no-smoke", "--nodes", "1", "--gpus-per-node", "0",
                  "--nproc-per-node", "2", "--torch", "2.14", "--python", "3.11", "--task",
                  "custom", "--framework", "ddp", "--strategy", "ddp", "--precision", "fp32", "--batch-size", "8",
                  "--grad-accum", "1", "--epochs", "1", "--lr", "0.1", "--no-compile", "--tracker", "none",
                  "--seed", "1", "--scheduler", "none")  # fmt: skip
    child.expect("Generate this project")
    child.expect("Cancel: write nothing")
    child.send("n\r")
    child.expect("nothing written")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1  # declined; 130 is Ctrl-C's
    assert list(tmp_path.iterdir()) == []


def test_ctrl_d_at_a_prompt_exits_130_pointing_to_yes(tmp_path):
    child = spawn(tmp_path, "proj", "--no-smoke")
    child.expect("How many nodes")
    child.sendcontrol("u")  # clear the default: Ctrl-D on an empty line ends input
    child.sendcontrol("d")
    child.expect("no more input; answer every question, or pass --yes and flags")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert list(tmp_path.iterdir()) == []


def test_launch_commands_are_one_line_each_in_a_60_column_terminal(tmp_path):
    child = pexpect.spawn(
        sys.executable, ["-m", "genie", "new", "proj", "--yes", "--no-smoke", "--nodes", "2",
                         "--master-addr", "a-rather-long-hostname.example.org",
                         "--gpus-per-node", "4"],
        cwd=str(tmp_path), env={**ENV, "COLUMNS": "60"}, encoding="utf-8", timeout=60,
        dimensions=(40, 60),
    )  # fmt: skip
    output = re.sub(r"\x1b\[[0-9;]*m", "", child.read())  # dim and bold stay under NO_COLOR
    child.close()
    assert child.exitstatus == 0, output
    commands = [x.strip() for x in output.splitlines() if x.strip().startswith("torchrun ")]
    assert len(commands) == 2 and all(len(c) > 60 for c in commands)
    assert all(c.endswith("train.py") for c in commands), commands


ZH_ENV = {**ENV, "LANGUAGE": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "zh_CN.UTF-8"}


def spawn_zh(tmp_path, *args: str) -> pexpect.spawn:
    return spawn(tmp_path, *args, env=ZH_ENV)


def test_the_whole_wizard_in_chinese_with_arrow_keys_and_a_rejected_value(tmp_path):
    child = spawn_zh(tmp_path, "proj", "--no-smoke")
    child.expect("节点（机器）数量？")
    child.sendcontrol("u")
    child.sendline("0")  # rejected: said in Chinese, then asked again
    child.expect("1 到 4096 之间的整数")
    child.sendcontrol("u")
    child.sendline("1")
    child.expect("集群调度系统？")
    child.send("\r")
    child.expect("每个节点的 GPU 数？")
    child.sendline("")
    child.expect("PyTorch 版本？")
    # the cursor starts on the default, 2.14: down twice, up once picks 2.13
    child.send("\x1b[B")
    child.send("\x1b[B")
    child.send("\x1b[A")
    child.send("\r")
    child.expect("任务？")
    child.send("\r")
    child.expect("框架？")
    child.send("\r")
    child.expect("全局批大小")  # the summary, in Chinese
    child.expect("生成此项目？")
    child.expect("自定义训练设置")
    child.send("\r")  # 生成
    child.expect("启动（cd proj）：")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    project = tmp_path / "proj"
    assert 'torch: "2.13"' in (project / ".genie.yml").read_text()
    assert (project / "README.zh-CN.md").is_file()


def test_ctrl_c_at_a_chinese_prompt_exits_130_and_writes_nothing(tmp_path):
    child = spawn_zh(tmp_path, "proj", "--no-smoke")
    child.expect("节点（机器）数量？")
    child.sendline("")
    child.expect("集群调度系统？")
    child.send("\r")
    child.expect("每个节点的 GPU 数？")
    child.sendcontrol("c")
    child.expect("已中断；未写入任何文件")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- on a screen, as it looks

_TOKEN = re.compile(
    r"\x1b\[(?P<private>[?>=]?)(?P<args>[0-9;]*)[ -/]*(?P<final>[@-~])"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: a title
    r"|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
    r"|(?P<control>[\x00-\x1f])"
    r"|(?P<char>[^\x00-\x1f\x1b])"
)
_INCOMPLETE = re.compile(r"\x1b(\[[?>=]?[0-9;]*[ -/]*|\][^\x07]*|[()])?$")


class Screen:
    """A small terminal: draws a child's output on rows x columns cells (a wide character
    takes two) and answers its cursor-position requests, as xterm does; prompt_toolkit then
    knows the rows below the cursor, as in a real terminal."""

    def __init__(self, child: pexpect.spawn, rows: int, columns: int) -> None:
        self.child, self.rows, self.columns = child, rows, columns
        self.cells = [[" "] * columns for _ in range(rows)]
        self.y = self.x = 0
        self.autowrap, self.rest = True, ""

    def lines(self) -> list[str]:
        return ["".join(row).rstrip() for row in self.cells]

    def text(self) -> str:
        return "\n".join(self.lines())

    def row_of(self, text: str, start: int = 0) -> int:
        return next(i for i, line in enumerate(self.lines()) if text in line and i >= start)

    def wait_for(self, text: str, timeout: float = 10) -> None:
        """Read the child's output until ``text`` is on the screen."""
        deadline = time.monotonic() + timeout
        while text not in self.text():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on the screen:\n{self.text()}")
            try:
                self.feed(self.child.read_nonblocking(4096, timeout=0.05))
            except pexpect.TIMEOUT:
                pass

    def feed(self, data: str) -> None:
        data, self.rest = self.rest + data, ""
        cut = _INCOMPLETE.search(data)
        if cut:  # an escape sequence split between two reads
            data, self.rest = data[: cut.start()], data[cut.start() :]
        for token in _TOKEN.finditer(data):
            if token["char"]:
                self._put(token["char"])
            elif token["control"]:
                self._control(token["control"])
            elif token["final"]:
                self._csi(token["private"], token["args"], token["final"])

    def _put(self, char: str) -> None:
        width = 2 if unicodedata.east_asian_width(char) in "WF" else 1
        if self.x + width > self.columns:
            if not self.autowrap:
                self.x = self.columns - width
            else:
                self.x = 0
                self._line_feed()
        self.cells[self.y][self.x] = char
        if width == 2:
            self.cells[self.y][self.x + 1] = ""
        self.x += width

    def _line_feed(self) -> None:
        if self.y == self.rows - 1:
            self.cells = self.cells[1:] + [[" "] * self.columns]
        else:
            self.y += 1

    def _control(self, char: str) -> None:
        if char == "\r":
            self.x = 0
        elif char == "\n":
            self._line_feed()
        elif char == "\b":
            self.x = max(self.x - 1, 0)

    def _csi(self, private: str, args: str, final: str) -> None:
        n = int(args.split(";")[0] or 1) if final in "ABCD" else 0
        if final == "A":
            self.y = max(self.y - n, 0)
        elif final == "B":
            self.y = min(self.y + n, self.rows - 1)
        elif final == "C":
            self.x = min(self.x + n, self.columns - 1)
        elif final == "D":
            self.x = max(min(self.x, self.columns - 1) - n, 0)
        elif final in "Hf":
            row, _, column = args.partition(";")
            self.y, self.x = int(row or 1) - 1, int(column or 1) - 1
        elif final == "J":
            self.cells[self.y][self.x :] = [" "] * (self.columns - self.x)
            self.cells[self.y + 1 :] = [[" "] * self.columns for _ in self.cells[self.y + 1 :]]
        elif final == "K":
            self.cells[self.y][self.x :] = [" "] * (self.columns - self.x)
        elif final in "hl" and private == "?" and "7" in args.split(";"):
            self.autowrap = final == "h"
        elif final == "n" and args == "6":
            self.child.send(f"\x1b[{self.y + 1};{self.x + 1}R")


def on_screen(tmp_path, *args: str, columns: int = 80, env=ENV) -> Screen:
    child = pexpect.spawn(
        sys.executable, ["-m", "genie", *args], cwd=str(tmp_path),
        env={**env, "COLUMNS": str(columns)}, encoding="utf-8", timeout=30,
        dimensions=(40, columns),
    )  # fmt: skip
    return Screen(child, 40, columns)


def zh(message: str) -> str:
    from genie.i18n import load

    return load("zh").gettext(message)


def assert_broken_at_words(lines: list[str], text: str) -> None:
    """``lines`` hold ``text``, broken only at a space or next to a wide character, and no
    line opens with closing punctuation."""
    at = 0
    for line in (x.strip() for x in lines):
        assert line[:1] not in set("，。；：）)") or at == 0, lines
        if at and text[at] == " ":
            at += 1  # broken at a space
        else:
            wide = [c for c in text[at - 1 : at + 1] if unicodedata.east_asian_width(c) in "WF"]
            assert at == 0 or wide, f"a word cut at {text[at - 8 : at]}|{text[at : at + 8]}"
        assert text.startswith(line, at), (line, text[at:])
        at += len(line)
    assert at == len(text), text[at:]


FULL_FLAGS = ("--nodes", "1", "--gpus-per-node", "0", "--nproc-per-node", "2", "--torch", "2.14",
              "--python", "3.11", "--task", "custom", "--framework", "ddp", "--strategy", "ddp",
              "--precision", "fp32", "--batch-size", "8", "--grad-accum", "1", "--epochs", "1",
              "--lr", "0.1", "--no-compile", "--tracker", "none", "--seed", "1", "--scheduler",
              "none")  # fmt: skip


@pytest.mark.parametrize(
    ("env", "question", "refusal"),
    [(ENV, "How many nodes", "a whole number between 1 and 4096"),
     (ZH_ENV, "节点（机器）数量？", "1 到 4096 之间的整数")],
)  # fmt: skip
def test_a_refused_reply_is_explained_under_its_prompt(tmp_path, env, question, refusal):
    screen = on_screen(tmp_path, "new", "proj", "--no-smoke", env=env)
    try:
        screen.wait_for(question)
        screen.child.send("\x15" "0\r")  # Ctrl-U clears the default
        screen.wait_for(refusal)
        # under the prompt (two lines with its hint), not on the terminal's bottom row
        assert screen.row_of(refusal) <= screen.row_of(question) + 3, screen.text()
        screen.child.send("\x151\r")  # accepted: the reason goes, the next question comes
        screen.wait_for("kubernetes")  # the next question: where it runs
        assert refusal not in screen.text()
    finally:
        screen.child.terminate(force=True)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_long_hint_breaks_at_words_in_60_columns(tmp_path, language):
    from genie.spec import FIELD_BY_NAME

    field = FIELD_BY_NAME["rdzv"]
    tr = zh if language == "zh" else str
    prompt = f"? {tr(field.question)} " + tr("({help})").format(help=tr(field.help))
    args = ("new", "proj", "--no-smoke", "--nodes", "2", "--scheduler", "none",
            "--master-addr", "10.0.0.7", "--master-port", "29500")  # fmt: skip
    screen = on_screen(tmp_path, *args, columns=60, env=ZH_ENV if language == "zh" else ENV)
    try:
        screen.wait_for("static")  # the second choice: the whole question is drawn
        lines = screen.lines()
        first = screen.row_of(tr(field.question))
        shown = lines[first : screen.row_of("c10d", start=first + 1)]
        assert_broken_at_words(shown, prompt)
        assert len(shown) > 1 and all(x.startswith("  ") for x in shown[1:]), shown  # indented
    finally:
        screen.child.terminate(force=True)


def test_esc_goes_back_one_question_with_its_answer_as_the_default(tmp_path):
    screen = on_screen(tmp_path, "new", "proj", "--no-smoke")
    screen.wait_for("How many nodes")
    screen.child.send("\x1b")  # at the first question: nothing to go back to
    screen.wait_for("No earlier question to go back to.")
    screen.child.send("\r")
    screen.wait_for("Cluster scheduler")
    screen.child.send("\r")
    screen.wait_for("GPUs per node")
    screen.child.send("\r")
    screen.wait_for("» 2.14")  # PyTorch version: the default
    screen.child.send("\x1b[B\r")  # one down: 2.13
    screen.wait_for("Task?")
    screen.child.send("\x1b")  # back to the PyTorch version, on the answer given
    screen.wait_for("» 2.13")
    screen.child.send("\r")
    for question in ("Task?", "Framework?", "Cancel: write nothing"):
        screen.wait_for(question)
        screen.child.send("\r")
    screen.child.expect(pexpect.EOF)
    screen.child.close()
    assert screen.child.exitstatus == 0
    assert 'torch: "2.13"' in (tmp_path / "proj" / ".genie.yml").read_text()


def test_a_menu_shortcut_chooses_its_entry(tmp_path):
    screen = on_screen(tmp_path, "new", "proj", "--no-smoke", *FULL_FLAGS)
    screen.wait_for("Cancel: write nothing")
    screen.child.send("c")  # no Enter: the letter chooses "Change a setting"
    screen.wait_for("Which setting?", timeout=5)
    screen.child.send("\x1b")  # back to the summary's menu
    screen.wait_for("Cancel: write nothing")
    screen.child.send("n")
    screen.child.expect("nothing written", timeout=5)
    screen.child.expect(pexpect.EOF)
    screen.child.close()
    assert screen.child.exitstatus == 1  # declined
    assert list(tmp_path.iterdir()) == []
