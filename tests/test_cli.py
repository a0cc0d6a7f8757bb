"""The real command line, run as a subprocess with no terminal."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import run_genie, tree


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus-per-node", "-1"], "gpus_per_node (--gpus-per-node): '-1' is not valid: a whole number between 0 and 64"),
        (["--gpus-per-node", "abc"], "gpus_per_node (--gpus-per-node): 'abc' is not valid"),
        (["--nodes", "2", "--master-addr", "h", "--master-port", "70000"], "'70000' is not valid: a whole number between 1024 and 65535"),
        (["--torch", "1.2"], "torch (--torch): '1.2' is not valid: one of: 2.15"),
        (["--name", "../escape"], "name (--name): '../escape' is not valid"),
        (["--name", "a/b"], "name (--name): 'a/b' is not valid"),
        (["--precision", "fp16", "--gpus-per-node", "0"], "fp16 mixed precision needs CUDA GPUs"),
        (["--answers", "missing.yml"], "cannot read answers file missing.yml"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    result = run_genie("new", "proj", "--yes", "--no-smoke", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("gpus: 4\n", "unknown answer 'gpus'"),
        ("nodes: [1,\n", "is not valid YAML"),
        ("just text\n", "must be a mapping"),
        ("nodes: 0\n", "nodes (--nodes): 0 is not valid: a whole number between 1 and 4096"),
    ],
)
def test_bad_answers_file_is_one_line_exit_2(tmp_path, content, message):
    (tmp_path / "answers.yml").write_text(content)
    result = run_genie("new", "proj", "--yes", "--answers", "answers.yml", cwd=tmp_path)
    assert (result.returncode, result.stderr.count("\n")) == (2, 1)
    assert message in result.stderr
    assert not (tmp_path / "proj").exists()


def test_without_a_terminal_the_wizard_points_to_yes(tmp_path):
    result = run_genie("new", "proj", cwd=tmp_path)
    assert result.returncode == 2 and "pass --yes" in result.stderr
    assert not (tmp_path / "proj").exists()


def test_a_non_empty_directory_is_refused_and_left_alone(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("mine")
    result = run_genie("new", "proj", "--yes", "--no-smoke", cwd=tmp_path)
    assert result.returncode == 2 and "pass --force" in result.stderr
    assert tree(tmp_path / "proj") == {"train.py": b"mine"}
    forced = run_genie("new", "proj", "--yes", "--no-smoke", "--force", cwd=tmp_path)
    assert forced.returncode == 2 and "will not overwrite" in forced.stderr
    assert tree(tmp_path / "proj") == {"train.py": b"mine"}


def test_answers_file_reproduces_the_project_byte_for_byte(tmp_path):
    first = run_genie(
        "new", "one", "--yes", "--no-smoke", "--nodes", "2", "--gpus-per-node", "4",
        "--master-addr", "10.0.0.5", "--lr", "3e-4", "--grad-accum", "2", cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = run_genie(
        "new", "two", "--answers", "one/.genie.yml", "--yes", "--no-smoke", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert tree(tmp_path / "one") == tree(tmp_path / "two")


def test_flags_override_the_answers_file(tmp_path):
    (tmp_path / "a.yml").write_text("epochs: 7\nseed: 3\n")
    result = run_genie(
        "new", "p", "--answers", "a.yml", "--seed", "5", "--yes", "--no-smoke", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    answers = (tmp_path / "p" / ".genie.yml").read_text()
    assert "epochs: 7\n" in answers and "seed: 5\n" in answers and 'name: "p"\n' in answers


def test_new_prints_files_and_launch_commands(tmp_path):
    result = run_genie(
        "new", "p", "--yes", "--no-smoke", "--nodes", "2", "--master-addr", "gpu-0",
        "--rdzv", "static", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "launch/multi_node.sh" in out and "torch 2." in out
    assert "node 0 (gpu-0):  bash launch/multi_node.sh 0" in out
    assert re.search(r"torchrun --nnodes=2 --nproc_per_node=2 --node_rank=1 .*train.py", out)


def test_smoke_on_a_directory_that_is_not_a_project_fails_cleanly(tmp_path):
    result = run_genie("smoke", ".", cwd=tmp_path)
    assert result.returncode == 2 and ".genie.yml not found" in result.stderr


@pytest.mark.parametrize(
    "args", [["--help"], ["new", "--help"], ["smoke", "--help"], ["convert", "--help"]]
)
def test_help_imports_neither_torch_nor_cookiecutter_nor_black(args):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "genie", *args], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "Usage:" in proc.stdout
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    heavy = {"torch", "cookiecutter", "black", "questionary", "prompt_toolkit", "yaml", "rich"}
    heavy |= {"libcst"}  # genie convert imports it only when it runs
    assert heavy.isdisjoint(imported), heavy & imported


def test_end_of_input_in_the_wizard_exits_130_with_a_pointer_to_yes(tmp_path, monkeypatch, capsys):
    from genie import cli, wizard

    def ask_nothing(machine, **kwargs):
        def ask(field, default, answers):
            raise EOFError

        return ask

    monkeypatch.setattr(wizard, "make_ask", ask_nothing)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["new", "proj", "--no-smoke"])
    assert exit_.value.code == 130
    assert (
        "no more input; answer every question, or pass --yes and flags" in capsys.readouterr().err
    )
    assert list(tmp_path.iterdir()) == []
