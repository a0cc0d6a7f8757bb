"""User text never runs as a template or as shell: it is refused, or written literally."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from genie import cli
from genie.errors import GenieError
from genie.spec import FIELDS, build_spec

from .conftest import tree

PAYLOADS = ["{{ 7*7 }}", "{% raw %}", "$(touch pwned)", "`touch pwned`", "{{ cookiecutter }}"]
TEXT_FIELDS = [f.name for f in FIELDS if f.kind is str]
MULTI = {"nodes": 2, "master_addr": "gpu-0"}


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("field", TEXT_FIELDS)
def test_template_or_shell_syntax_in_any_text_answer_is_refused(cpu_machine, field, payload):
    raw = {"name": "p", **MULTI, field: payload}
    with pytest.raises(GenieError) as err:
        build_spec(raw, cpu_machine)
    assert field in str(err.value) and "\n" not in str(err.value)


HOSTILE_DIR = "{{ 7*7 }} {% raw %} $(touch pwned) `touch pwned2` ; touch pwned3 [/]"


def _shims(bin_dir: Path, log: Path) -> dict[str, str]:
    """torchrun and python that record their arguments, one per line, instead of running."""
    bin_dir.mkdir()
    for name in ("torchrun", "python"):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "{log}"\n')
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("extra", [[], ["--nodes", "2", "--master-addr", "gpu-0"]])
def test_a_hostile_directory_is_written_literally_and_launch_scripts_quote(tmp_path, capsys, extra):
    target = tmp_path / HOSTILE_DIR / "proj"
    plain = tmp_path / "plain"
    for where in (target, plain):
        cli.main(["new", str(where), "--yes", "--no-smoke", "--name", "proj", *extra])
    out = capsys.readouterr().out
    words = " ".join(f"(cd {shlex.quote(str(target))})".split())
    assert words in " ".join(out.split())  # quoted for pasting into a shell, however wrapped
    # The path reached no file: the project is the same as one generated in a plain directory.
    assert tree(target) == tree(plain)
    log = tmp_path / "argv.log"
    env = {**_shims(tmp_path / "bin", log), "MASTER_ADDR": "127.0.0.1"}  # resolvable here
    hostile_args = ["--smoke", "$(touch pwned4)", "`touch pwned5`", "{{ 7*7 }}"]
    script = ["launch/multi_node.sh", "1"] if extra else ["launch/single_node.sh"]
    subprocess.run(["bash", *script, *hostile_args], cwd=target, env=env, check=True)
    assert log.read_text().splitlines()[-4:] == hostile_args  # passed through literally
    assert not list(tmp_path.rglob("pwned*"))
    assert "49" not in "".join(p.name for p in tmp_path.rglob("*"))
