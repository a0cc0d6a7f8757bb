"""``run_in`` for many snippets in one directory, at the cost of one interpreter: a Python
imports the heavy libraries once, then forks a child per snippet, which runs it as
``python -c`` would (its own process and module state, its stdout and stderr, its exit
code). Each snippet saves the seconds of importing torch and transformers again."""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

# The server: reads one request (JSON) a line, answers each with the child's exit code.
SERVER = """
import json, os, sys, traceback
exec(sys.argv[1], {})  # the imports every snippet shares
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, request["out"]), (2, request["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.argv, code = ["-c"], 0
        try:
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:  # as the interpreter reads it
            if isinstance(stop.code, int) or stop.code is None:
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class Forks:
    """One server in ``directory`` that has run ``preload`` (imports only: the snippets
    share them, and nothing else); ``run(code)`` as run_in."""

    def __init__(self, directory: Path, preload: str) -> None:
        self.directory = directory
        self.outputs = Path(tempfile.mkdtemp(prefix="forks-"))
        self.server = subprocess.Popen(
            [sys.executable, "-c", SERVER, preload], cwd=directory, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip

    def run(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        out, err = self.outputs / "out", self.outputs / "err"
        request = {"code": textwrap.dedent(code), "out": str(out), "err": str(err)}
        assert self.server.stdin and self.server.stdout
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        ready, _, _ = select.select([self.server.stdout], [], [], timeout)
        assert ready, f"no answer within {timeout} s"
        code_line = self.server.stdout.readline()
        assert code_line, "the fork server ended"
        return subprocess.CompletedProcess(
            ["python", "-c", code], int(code_line), out.read_text(), err.read_text()
        )

    def close(self) -> None:
        if self.server.stdin:
            self.server.stdin.close()
        try:
            self.server.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a snippet still running: a test failed
            self.server.kill()
        shutil.rmtree(self.outputs, ignore_errors=True)
