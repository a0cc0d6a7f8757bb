"""A corpus of invalid input, through flags, answers files and wizard replies: each one gives
one line naming the field (or file) and what is accepted, exit 2, no traceback, and leaves
the target directory untouched.

Flags and answers files run the real command in-process (``genie.cli.main``), a few also as
a subprocess; wizard replies go through the wizard's own validator and prompt.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from genie import cli, wizard
from genie.spec import FIELD_BY_NAME, build_spec

from .conftest import run_genie

MULTI = ["--nodes", "2", "--master-addr", "gpu-0"]
NAME = "name (--name)"
GPUS = "gpus_per_node (--gpus-per-node)"
TORCH = "torch (--torch)"
PORT = "master_port (--master-port)"
ADDR = "master_addr (--master-addr)"
LOOPBACK = "cannot reach"

# (flags, what the one error line must contain): the field's label and what is accepted
FLAGS = {
    "name with a slash": (["--name", "a/b"], [NAME, "no '/' or '..'"]),
    "name is ..": (["--name", ".."], [NAME, "letters, digits"]),
    "name with ..": (["--name", "x..y"], [NAME, "no '/' or '..'"]),
    "name starts with a dash": (["--name", "-rf"], [NAME, "starting with a letter or digit"]),
    "name starts with a dot": (["--name", ".hidden"], [NAME, "starting with a letter"]),
    "name is jinja expression": (["--name", "{{ 7*7 }}"], [NAME, "letters, digits"]),
    "name is jinja statement": (["--name", "{% raw %}"], [NAME, "letters, digits"]),
    "name is shell substitution": (["--name", "$(touch pwned)"], [NAME, "letters"]),
    "name with backticks": (["--name", "`touch pwned`"], [NAME, "letters"]),
    "name with a newline": (["--name", "a\nb"], [NAME, "letters"]),
    "name with a tab": (["--name", "a\tb"], [NAME, "letters"]),
    "name with escape": (["--name", "a\x1b[31mb"], [NAME, "letters"]),
    "name with a space": (["--name", "my project"], [NAME, "letters"]),
    "name empty": (["--name", ""], [NAME, "letters"]),
    "name blank": (["--name", "   "], [NAME, "letters"]),
    "name too long": (["--name", "a" * 65], [NAME, "at most 64 characters"]),
    "name very long": (["--name", "a" * 5000], [NAME, "at most 64 characters"]),
    "name non-ascii": (["--name", "projét"], [NAME, "letters"]),
    "gpus negative": (["--gpus-per-node", "-1"], [GPUS, "between 0 and 64"]),
    "gpus fractional": (["--gpus-per-node", "1.5"], [GPUS, "a whole number"]),
    "gpus non-numeric": (["--gpus-per-node", "two"], [GPUS, "a whole number"]),
    "gpus absurd": (["--gpus-per-node", "100000"], [GPUS, "between 0 and 64"]),
    "gpus exponent": (["--gpus-per-node", "1e3"], [GPUS, "a whole number"]),
    "gpus empty": (["--gpus-per-node", ""], [GPUS, "a whole number"]),
    "gpu memory text": (["--gpus-per-node", "8", "--gpu-memory", "lots"],
                        ["gpu_memory (--gpu-memory)", "a size such as 80GiB", "H100"]),
    "gpu memory zero": (["--gpus-per-node", "8", "--gpu-memory", "0GiB"],
                        ["gpu_memory (--gpu-memory)", "a size such as 80GiB"]),
    "gpu memory on cpu": (["--gpus-per-node", "0", "--gpu-memory", "H100"],
                          ["gpu_memory (--gpu-memory)", "only applies with GPUs"]),
    "nodes 0": (["--nodes", "0"], ["nodes (--nodes)", "between 1 and 4096"]),
    "nodes negative": (["--nodes", "-3"], ["nodes (--nodes)", "between 1 and 4096"]),
    "nodes text": (["--nodes", "many"], ["nodes (--nodes)", "a whole number"]),
    "port below 1024": ([*MULTI, "--master-port", "80"], [PORT, "between 1024 and 65535"]),
    "port 0": ([*MULTI, "--master-port", "0"], [PORT, "between 1024 and 65535"]),
    "port 65536": ([*MULTI, "--master-port", "65536"], [PORT, "between 1024 and 65535"]),
    "port huge": ([*MULTI, "--master-port", "99999999"], [PORT, "between 1024"]),
    "port text": ([*MULTI, "--master-port", "http"], [PORT, "a whole number"]),
    "addr not a host": (["--nodes", "2", "--master-addr", "not a host"], [ADDR, "hostname"]),
    "addr leading dash": (["--nodes", "2", "--master-addr", "-gpu0"], [ADDR, "hostname"]),
    "addr empty label": (["--nodes", "2", "--master-addr", "a..b"], [ADDR, "hostname"]),
    "addr url": (["--nodes", "2", "--master-addr", "http://gpu0"], [ADDR, "hostname"]),
    "addr with port": (["--nodes", "2", "--master-addr", "gpu0:29500"], [ADDR, "hostname"]),
    "addr shell": (["--nodes", "2", "--master-addr", "$(touch pwned)"], [ADDR, "hostname"]),
    "addr backticks": (["--nodes", "2", "--master-addr", "`id`"], [ADDR, "hostname"]),
    "addr jinja": (["--nodes", "2", "--master-addr", "{{7*7}}"], [ADDR, "hostname"]),
    "addr too long": (["--nodes", "2", "--master-addr", "a" * 300], [ADDR, "hostname"]),
    "addr loopback ip": (["--nodes", "2", "--master-addr", "127.0.0.1"], [ADDR, LOOPBACK]),
    "addr loopback 127/8": (["--nodes", "2", "--master-addr", "127.3.2.1"], [ADDR, LOOPBACK]),
    "addr localhost": (["--nodes", "2", "--master-addr", "localhost"], [ADDR, LOOPBACK]),
    "addr ipv6 loopback": (["--nodes", "2", "--master-addr", "::1"], [ADDR, LOOPBACK]),
    "addr unspecified": (["--nodes", "2", "--master-addr", "0.0.0.0"], [ADDR, LOOPBACK]),
    "torch unknown": (["--torch", "9.9"], [TORCH, "one of: 2.15"]),
    "torch old": (["--torch", "1.2"], [TORCH, "one of: 2.15"]),
    "torch major only": (["--torch", "2"], [TORCH, "one of: 2.15"]),
    "torch extra component": (["--torch", "2.14.1.5"], [TORCH, "one of: 2.15"]),
    "torch letters": (["--torch", "2.14.x"], [TORCH, "one of: 2.15"]),
    "torch prefix v": (["--torch", "v2.14"], [TORCH, "one of: 2.15"]),
    "torch trailing dot": (["--torch", "2.14."], [TORCH, "one of: 2.15"]),
    "torch jinja": (["--torch", "{{ 7*7 }}"], [TORCH, "one of: 2.15"]),
    "python malformed": (["--python", "3.11.4.1"], ["python (--python)", "such as 3.11"]),
    "python too old": (["--python", "2.7"], ["python (--python)", "from 3.7 to 3.15"]),
    "python text": (["--python", "latest"], ["python (--python)", "such as 3.11"]),
    "framework unknown": (["--framework", "tensorflow"], ["framework (--framework)", "one of:"]),
    "framework wrong case": (["--framework", "DDP"], ["framework (--framework)", "one of:"]),
    "task unknown": (["--task", "audio"], ["task (--task)", "one of: "]),
    "precision unknown": (["--precision", "fp8"], ["precision (--precision)", "one of: "]),
    "rdzv unknown": ([*MULTI, "--rdzv", "etcd"], ["rdzv (--rdzv)", "one of: c10d, static"]),
    "nproc 0": (["--nproc-per-node", "0"], ["nproc_per_node", "between 1 and 256"]),
    "batch 0": (["--batch-size", "0"], ["batch_size (--batch-size)", "between 1"]),
    "epochs negative": (["--epochs", "-1"], ["epochs (--epochs)", "between 1"]),
    "lr 0": (["--lr", "0"], ["lr (--lr)", "a number between"]),
    "lr nan": (["--lr", "nan"], ["lr (--lr)", "a number between"]),
    "lr inf": (["--lr", "inf"], ["lr (--lr)", "a number between"]),
    "lr text": (["--lr", "fast"], ["lr (--lr)", "a number"]),
    "seed negative": (["--seed", "-1"], ["seed (--seed)", "between 0"]),
    "seed too big": (["--seed", str(2**32)], ["seed (--seed)", "between 0"]),
    "grad accum 0": (["--grad-accum", "0"], ["grad_accum (--grad-accum)", "between 1"]),
    "dp on two nodes": ([*MULTI, "--framework", "dp"], ["framework (--framework)", "one node"]),
    "fp16 on cpu": (["--precision", "fp16", "--gpus-per-node", "0"], ["precision", "CUDA"]),
    "more procs than gpus": (
        ["--gpus-per-node", "2", "--nproc-per-node", "4"], ["nproc_per_node", "2 or fewer"]
    ),
    "addr on one node": (["--master-addr", "gpu-0"], [ADDR, "only applies to multi-node"]),
    "port on one node": (["--master-port", "29501"], [PORT, "only applies to multi-node"]),
    "strategy with dp": (["--framework", "dp", "--strategy", "ddp"], ["strategy", "dp"]),
    "nproc with dp": (["--framework", "dp", "--nproc-per-node", "2"], ["nproc_per_node", "dp"]),
    "torch too old for python": (["--torch", "1.13", "--python", "3.12"], [TORCH, "Python"]),
}  # fmt: skip

GOOD_YAML = "epochs: 2\n"
# (answers file content as bytes, or a marker for special files; what the error says)
ANSWERS = {
    "empty file": (b"", ["answers file", "is empty"]),
    "only whitespace": (b"  \n\n", ["answers file", "is empty"]),
    "only comments": (b"# nothing here\n", ["answers file", "is empty"]),
    "malformed yaml": (b"nodes: [1,\n", ["answers file", "not valid YAML (line"]),
    "bad indentation": (b"nodes: 1\n  epochs: 2\n", ["answers file", "not valid YAML"]),
    "tab indentation": (b"a:\n\tb: 1\n", ["answers file", "not valid YAML"]),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", ["answers file", "not"]),
    "latin-1 text": ("name: projét\n".encode("latin-1"), ["answers file", "not UTF-8"]),
    "a list": (b"- nodes: 1\n- epochs: 2\n", ["answers file", "must be a mapping"]),
    "a scalar": (b"42\n", ["answers file", "must be a mapping"]),
    "a string": (b"just text\n", ["answers file", "must be a mapping"]),
    "unknown key": (b"gpus: 4\n", ["unknown answer 'gpus'", "known answers: name"]),
    "mistyped key": (b"epoch: 4\n", ["unknown answer 'epoch'", "known answers"]),
    "key with dashes": (b"batch-size: 4\n", ["unknown answer 'batch-size'", "known answers"]),
    "numeric key": (b"1: 2\n", ["unknown answer '1'", "known answers"]),
    "nodes a list": (b"nodes: [1]\n", ["nodes (--nodes)", "a whole number"]),
    "nodes a float": (b"nodes: 1.0\n", ["nodes (--nodes)", "a whole number"]),
    "nodes a bool": (b"nodes: true\n", ["nodes (--nodes)", "a whole number"]),
    "epochs text": (b"epochs: three\n", ["epochs (--epochs)", "a whole number"]),
    "compile not bool": (b"compile: perhaps\n", ["compile (--compile)", "true or false"]),
    "name a mapping": (b"name: {a: 1}\n", [NAME, "text"]),
    "name a list": (b"name: [a]\n", [NAME, "text"]),
    "name null-ish jinja": (b"name: '{{ 7*7 }}'\n", [NAME, "letters"]),
    "lr a date": (b"lr: 2024-01-01\n", ["lr (--lr)", "a number"]),
    "newer genie": (b"genie_version: 99.0.0\nepochs: 2\n", ["newer than this genie", "upgrade"]),
    "bad genie_version": (b"genie_version: soon\n", ["genie_version", "not a version"]),
    "directory": ("DIR", ["cannot read answers file", "directory"]),
    "missing": ("MISSING", ["cannot read answers file", "No such file"]),
    "unreadable": ("UNREADABLE", ["cannot read answers file", "Permission denied"]),
}  # fmt: skip


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (directories as None) with its content."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def genie_in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def assert_one_line_error(code: int, out: str, err: str, expected: list[str]) -> None:
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in out + err
    for text in expected:
        assert text in err, (text, err)


@pytest.fixture
def workdir(tmp_path):
    """A directory with a file of the user's, where the target may not appear."""
    (tmp_path / "keep.txt").write_text("mine")
    return tmp_path


@pytest.mark.parametrize(("args", "expected"), FLAGS.values(), ids=FLAGS.keys())
def test_an_invalid_flag_is_one_line_exit_2_and_writes_nothing(workdir, capsys, args, expected):
    before = snapshot(workdir)
    code, out, err = genie_in_process(
        ["new", str(workdir / "proj"), "--yes", "--no-smoke", *args], capsys
    )
    assert_one_line_error(code, out, err, expected)
    assert snapshot(workdir) == before


@pytest.mark.parametrize(("content", "expected"), ANSWERS.values(), ids=ANSWERS.keys())
def test_an_invalid_answers_file_is_one_line_exit_2_and_writes_nothing(
    workdir, capsys, monkeypatch, content, expected
):
    answers = workdir / "answers.yml"
    if content == "DIR":
        answers.mkdir()
    elif content == "UNREADABLE":
        answers.write_text(GOOD_YAML)
        real = Path.read_text

        def denied(self, *args, **kwargs):  # chmod 000 does not stop root
            if self == answers:
                raise PermissionError(13, "Permission denied")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", denied)
    elif content != "MISSING":
        answers.write_bytes(content)
    before = snapshot(workdir)
    code, out, err = genie_in_process(
        ["new", str(workdir / "proj"), "--yes", "--no-smoke", "--answers", str(answers)], capsys
    )
    assert_one_line_error(code, out, err, expected)
    assert snapshot(workdir) == before


# (field, reply typed in the wizard, what the prompt says is accepted)
WIZARD = [
    ("name", "../up", "no '/' or '..'"),
    ("name", "{{ 7*7 }}", "letters, digits"),
    ("name", "$(touch pwned)", "letters, digits"),
    ("name", "", "letters, digits"),
    ("nodes", "0", "between 1 and 4096"),
    ("nodes", "1.5", "a whole number"),
    ("gpus_per_node", "-2", "between 0 and 64"),
    ("gpus_per_node", "lots", "a whole number"),
    ("master_addr", "localhost", "cannot reach localhost"),
    ("master_addr", "a b", "hostname or IP"),
    ("master_port", "1023", "between 1024 and 65535"),
    ("master_port", "70000", "between 1024 and 65535"),
    ("python", "3.11.4.1", "such as 3.11"),
    ("batch_size", "0", "between 1"),
    ("lr", "-1", "a number between"),
    ("seed", "x", "a whole number"),
]


@pytest.mark.parametrize(("name", "reply", "accepted"), WIZARD)
def test_the_wizard_refuses_an_invalid_reply_saying_what_is_accepted(name, reply, accepted):
    verdict = wizard._validator(FIELD_BY_NAME[name], {"nodes": 2})(reply)
    assert verdict is not True and accepted in verdict, verdict


def test_the_wizard_asks_again_after_an_invalid_reply(cpu_machine):
    keys = "\x15" + "0" + "\r" + "\x15" + "3" + "\r" + "\r" * 40  # nodes: 0 refused, then 3
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        ask = wizard.make_ask(cpu_machine, input=pipe, output=DummyOutput())
        spec = build_spec({"name": "p"}, cpu_machine, ask=ask)
    assert spec.nodes == 3


def test_total_corpus_has_at_least_60_inputs():
    assert len(FLAGS) + len(ANSWERS) + len(WIZARD) >= 60


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--torch", "2.14.1.5"], [TORCH, "one of: 2.15"]),
        (["--name", "{% raw %}"], [NAME, "letters"]),
        (["--nodes", "2", "--master-addr", "127.0.0.1"], [ADDR, LOOPBACK]),
    ],
)
def test_invalid_input_through_the_real_process_is_one_line(workdir, args, expected):
    before = snapshot(workdir)
    result = run_genie("new", "proj", "--yes", "--no-smoke", *args, cwd=workdir)
    assert_one_line_error(result.returncode, result.stdout, result.stderr, expected)
    assert snapshot(workdir) == before


def test_an_empty_answers_file_is_refused_by_the_real_process(workdir):
    (workdir / "a.yml").write_bytes(b"")
    result = run_genie("new", "proj", "--yes", "--no-smoke", "--answers", "a.yml", cwd=workdir)
    assert_one_line_error(result.returncode, result.stdout, result.stderr, ["is empty"])
    assert not (workdir / "proj").exists()
