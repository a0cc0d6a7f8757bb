"""The real command line, run as a subprocess with no terminal."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from genie import errors

from .conftest import GOOD_REPORT, run_genie, tree, wizard_raises


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
    assert re.search(r"torchrun --nnodes=2 --nproc_per_node=2 .*--node_rank=1 .*train.py", out)


def test_smoke_on_a_directory_that_is_not_a_project_fails_cleanly(tmp_path):
    result = run_genie("smoke", ".", cwd=tmp_path)
    assert result.returncode == 2 and ".genie.yml not found" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"], ["new", "--help"], ["smoke", "--help"], ["convert", "--help"],
        ["--lang", "zh", "--help"], ["--lang", "zh", "new", "--help"],  # the catalog is light
    ],
)  # fmt: skip
def test_help_imports_neither_torch_nor_cookiecutter_nor_black(args):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "genie", *args], capture_output=True, text=True
    )
    assert proc.returncode == 0 and ("Usage:" in proc.stdout or "用法" in proc.stdout)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    heavy = {"torch", "cookiecutter", "black", "questionary", "prompt_toolkit", "yaml", "rich"}
    heavy |= {"libcst"}  # genie convert imports it only when it runs
    heavy |= {"babel"}  # only scripts/i18n.py and the tests: gettext reads the .mo files
    assert heavy.isdisjoint(imported), heavy & imported


def test_end_of_input_in_the_wizard_exits_130_with_a_pointer_to_yes(tmp_path, monkeypatch, capsys):
    from genie import cli

    wizard_raises(monkeypatch, EOFError)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["new", "proj", "--no-smoke"])
    assert exit_.value.code == 130
    assert (
        "no more input; answer every question, or pass --yes and flags" in capsys.readouterr().err
    )
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the first hour (issue 13)


def _new(tmp_path, *args: str):
    return run_genie("new", "proj", "--yes", "--no-smoke", *args, cwd=tmp_path)


def test_launch_commands_and_file_list_are_never_broken_at_60_columns(tmp_path):
    from genie.detect import Machine
    from genie.generate import catalogue, launch
    from genie.spec import build_spec

    args = ["--nodes", "2", "--master-addr", "a-rather-long-hostname.example.org",
            "--gpus-per-node", "4", "--master-port", "29555"]  # fmt: skip
    result = run_genie("new", "proj", "--yes", "--no-smoke", *args, cwd=tmp_path, COLUMNS="60")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    machine = Machine(gpus=0, torch=None, python="3.11", hostname="h")
    raw = dict(zip([a[2:].replace("-", "_") for a in args[::2]], args[1::2], strict=True))
    project = build_spec({"name": "proj", **raw}, machine)
    for command in launch.commands(project):
        whole = launch.shell_join(command.argv)
        assert len(whole) > 60 and any(line.strip() == whole for line in lines)
    for path, what in catalogue.project_files(project):
        assert any(path in line and what in line for line in lines), path


def test_declined_is_1_and_ctrl_c_during_the_smoke_says_the_project_was_written(
    tmp_path, monkeypatch, capsys
):
    from genie import cli, errors
    from genie.smoke import command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run_smoke", interrupted)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["new", str(tmp_path / "proj"), "--yes"])
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert "smoke test interrupted; the project was written to" in err
    assert "genie smoke" in err and "nothing written" not in err
    assert (tmp_path / "proj" / "train.py").is_file()
    assert errors.Declined.exit_code == 1


def test_smoke_says_packages_are_missing_before_announcing_a_run(tmp_path, monkeypatch, capsys):
    from genie import cli
    from genie.smoke import runner

    assert _new(tmp_path).returncode == 0
    monkeypatch.setattr(runner, "missing_packages", lambda spec, python: ["tqdm"])
    monkeypatch.setattr(runner, "unavailable", lambda spec, machine: None)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["smoke", str(tmp_path / "proj")])
    out, err = capsys.readouterr()
    assert exit_.value.code == 1 and "lacks tqdm" in err
    # torch is there: the rest only, the torch installed stays
    assert f"pip install -r {tmp_path / 'proj' / 'requirements.txt'} there" in err
    assert "Smoke test" not in out


def test_the_verdict_lists_what_the_smoke_did_not_test(cpu_machine):
    from pathlib import Path

    from genie.smoke import local
    from genie.spec import build_spec

    project = build_spec(
        {"name": "p", "torch": "1.13", "python": "3.10", "gpus_per_node": 2,
         "precision": "fp16"}, cpu_machine,
    )  # fmt: skip
    notes = "\n".join(local.plan(project, cpu_machine, Path("/tmp/x")).notes)
    assert "ran on torch 2.14.1; the project targets torch 1.13" in notes
    assert "ran on Python 3.11; the project targets Python 3.10" in notes
    assert "genie smoke --python" in notes
    assert "NCCL" in notes and "run `genie smoke` on a GPU node" in notes
    same = build_spec({"name": "p"}, cpu_machine)
    assert local.plan(same, cpu_machine, Path("/tmp/x")).notes == ()


def test_a_defaulted_master_address_is_pointed_out_in_the_summary(cpu_machine, capsys):
    from genie import ui
    from genie.spec import build_spec

    ui.summary(build_spec({"name": "p", "nodes": 2}, cpu_machine), cpu_machine)
    assert "master address is this machine's hostname (node0.cluster)" in capsys.readouterr().out
    ui.summary(build_spec({"name": "p", "nodes": 2, "master_addr": "10.0.0.1"}, cpu_machine),
               cpu_machine)  # fmt: skip
    assert "master address" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "addresses, said",
    [(None, "does not resolve here: genie cannot tell"), (("10.0.0.7",), "must reach it by")],
)
def test_a_defaulted_master_address_says_what_genie_knows_of_it(
    cpu_machine, capsys, addresses, said
):
    import dataclasses

    from genie import ui
    from genie.spec import build_spec

    machine = dataclasses.replace(cpu_machine, hostname_addresses=addresses)
    ui.summary(build_spec({"name": "p", "nodes": 2}, machine), machine)
    assert said in capsys.readouterr().out


def test_a_default_master_address_resolving_to_loopback_is_refused(tmp_path, monkeypatch, capsys):
    """Debian maps a machine's own name to 127.0.1.1: the other nodes would be sent there."""
    from genie import cli, detect

    loopback = detect.Machine(0, "2.14.1", "3.11", "vm", hostname_addresses=("127.0.1.1",))
    monkeypatch.setattr(detect, "machine", lambda: loopback)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["new", str(tmp_path / "p"), "--yes", "--no-smoke", "--nodes", "2"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "'vm' is not valid: the default, this machine's hostname, resolves here to " in err
    assert "127.0.1.1 (loopback)" in err and "pass --master-addr with node 0's IP" in err
    assert not (tmp_path / "p").exists()
    # given explicitly, an address is the user's to choose (genie doctor checks it on node 0)
    cli.main(["new", str(tmp_path / "p"), "--yes", "--no-smoke", "--nodes", "2",
              "--master-addr", "10.0.0.1"])  # fmt: skip
    assert (tmp_path / "p" / "train.py").is_file()


def test_kubernetes_asks_no_master_address_the_operator_sets(tmp_path, monkeypatch, capsys):
    """On the machine above, --scheduler kubernetes needs no address: the project is written,
    with the pods' manifests and no launch/multi_node.sh to send nodes to one; an address given
    anyway is refused in one line, and an answers file of an older genie that held one still
    reads."""
    from genie import cli, detect

    loopback = detect.Machine(0, "2.14.1", "3.11", "vm", hostname_addresses=("127.0.1.1",))
    monkeypatch.setattr(detect, "machine", lambda: loopback)
    flags = ["--yes", "--no-smoke", "--nodes", "2", "--scheduler", "kubernetes"]
    cli.main(["new", str(tmp_path / "p"), *flags])
    written = tmp_path / "p"
    assert (written / "launch" / "pytorchjob.yaml").is_file()
    assert not (written / "launch" / "multi_node.sh").exists()
    answers = (written / ".genie.yml").read_text()
    assert "master_addr" not in answers and "master_port" not in answers
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["new", str(tmp_path / "q"), *flags, "--master-addr", "10.0.0.1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "outside Kubernetes, where the operator sets the master's address" in err
    assert not (tmp_path / "q").exists()
    older = tmp_path / "older.yml"
    older.write_text(answers + 'master_addr: "gpu-01"\nmaster_port: 29500\n')
    cli.main(["new", str(tmp_path / "r"), "--yes", "--no-smoke", "--answers", str(older)])
    assert (tmp_path / "r" / ".genie.yml").read_text().split("files:")[0] == answers.split(
        "files:"
    )[0]


def test_an_unverified_torch_is_named_in_the_summary(cpu_machine, capsys):
    from genie import compat, ui
    from genie.spec import build_spec

    [unverified] = compat.UNVERIFIED
    ui.summary(build_spec({"name": "p", "torch": unverified}, cpu_machine), cpu_machine)
    out = capsys.readouterr().out
    assert f"torch {unverified} is not verified by genie yet" in out
    assert "run the smoke test on that version" in out
    ui.summary(build_spec({"name": "p", "torch": compat.NEWEST}, cpu_machine), cpu_machine)
    assert "not verified" not in capsys.readouterr().out


def test_a_second_genie_new_into_a_project_names_a_command_that_works(tmp_path):
    assert run_genie("new", "p", "--yes", "--no-smoke", cwd=tmp_path).returncode == 0
    again = run_genie("new", "p", "--yes", "--no-smoke", cwd=tmp_path)
    assert again.returncode != 0 and "is a genie project already" in again.stderr
    suggested = again.stderr.split("its answers: ", 1)[1].split(" (", 1)[0].split()
    assert suggested[:2] == ["genie", "new"]
    rerun = run_genie(*suggested[1:], "--no-smoke", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr


def test_help_shows_defaults_examples_and_unverified_versions(tmp_path):
    out = run_genie("new", "--help", cwd=tmp_path).stdout
    assert "Examples:" in out and "genie new ../demo --yes" in out
    assert "default: 29500" in out and "default: ddp" in out
    assert "2.15 (unverified)" in out


def test_an_unknown_flag_suggests_the_nearest(tmp_path):
    result = run_genie("new", "proj", "--gpus", "2", cwd=tmp_path)
    assert result.returncode == 2 and "No such option '--gpus'" in result.stderr
    # click lists the close ones, in alphabetical order
    offered = re.search(r"Did you mean (?:one of: )?(.*)\?\)", result.stderr)
    assert offered and "'--gpus-per-node'" in offered.group(1).split(", ")


def _complete(shell: str, words: str, tmp_path) -> str:
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    out = run_genie(
        cwd=tmp_path, _GENIE_COMPLETE=f"{shell}_complete", COMP_WORDS=words, COMP_CWORD=cword
    ).stdout
    return " ".join(line.split(",", 1)[-1] for line in out.splitlines())  # bash: "plain,new"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_scripts_exist(tmp_path, shell):
    script = run_genie(cwd=tmp_path, _GENIE_COMPLETE=f"{shell}_source").stdout
    assert "_GENIE_COMPLETE" in script and f"{shell}_complete" in script


def test_completion_of_subcommands_flags_and_choices(tmp_path):
    assert {"new", "smoke", "doctor"} <= set(_complete("bash", "genie ", tmp_path).split())
    assert "--gpus-per-node" in _complete("bash", "genie new x --gpus", tmp_path).split()
    assert _complete("bash", "genie new x --framework l", tmp_path).split() == ["lightning"]
    assert _complete("bash", "genie new x --torch 2.1", tmp_path).split()[:2] == ["2.15", "2.14"]


def test_the_verdict_prints_brackets_from_the_run_as_they_are(cpu_machine, capsys):
    """A gloo error names its source as [/path/pair.cc:561]: rich must not read it as markup."""
    from pathlib import Path

    from genie import ui
    from genie.smoke import local
    from genie.smoke.plan import SmokeResult
    from genie.spec import build_spec

    plan = local.plan(build_spec({"name": "p"}, cpu_machine), cpu_machine, Path("/tmp/x"))
    problem = "rank 3 failed: [/gloo/transport/tcp/pair.cc:561] Connection closed by peer"
    ui.verdict(SmokeResult(plan, 1, 1.0, problems=[problem]))
    out = " ".join(capsys.readouterr().out.split())
    assert "[/gloo/transport/tcp/pair.cc:561] Connection closed" in out.replace("│ ", "")


def test_a_passed_smoke_run_says_what_looked_bad_in_it_did_no_harm(cpu_machine, tmp_path, capsys):
    """A multi-node run that went well still printed torch's hostname warning and node 1's
    TCPStore error at its end: genie smoke says once, after its verdict, why each is
    harmless; a failed run gets its explanation instead."""
    from genie.smoke import command, local
    from genie.smoke.plan import SmokeResult
    from genie.spec import build_spec

    plan = local.plan(build_spec({"name": "p"}, cpu_machine), cpu_machine, tmp_path)
    output = (
        "[W1207 04:56:14.662585549 socket.cpp:207] [c10d] The hostname of the client socket "
        "cannot be retrieved. err=-3\n" * 4
        + "torch.distributed.DistNetworkError: ... recvValueWithTimeout failed\n"
    )
    command.report(SmokeResult(plan, 0, 1.0, report=GOOD_REPORT, output=output), tmp_path)
    out = capsys.readouterr().out
    assert out.count("is harmless: torch looks up a name for each peer's address") == 1
    assert out.count("a TCPStore error at the end of a run that exited 0 is harmless") == 1
    command.report(SmokeResult(plan, 0, 1.0, report=GOOD_REPORT, output="all well"), tmp_path)
    assert "harmless" not in capsys.readouterr().out
    with pytest.raises(errors.SmokeFailed):
        command.report(SmokeResult(plan, 1, 1.0, problems=["exit 1"], output=output), tmp_path)
    assert "harmless" not in capsys.readouterr().out
