"""The real `genie new` in a pseudo-terminal, as a person meets it."""

from __future__ import annotations

import os
import re
import sys

import pexpect

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
    child.expect("每个节点的 GPU 数？")
    child.sendcontrol("c")
    child.expect("已中断；未写入任何文件")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert list(tmp_path.iterdir()) == []
