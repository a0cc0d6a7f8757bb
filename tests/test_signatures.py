"""Every failure signature, fed by really causing the failure where this machine can (a held
port, a rendezvous nobody answers, a rank that raises, hangs, is killed or lacks a module,
numpy missing under torch) and by captured real output where it cannot (NCCL, CUDA OOM)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from genie.smoke import process as smoke_process
from genie.smoke.plan import FAULTHANDLER_ENV
from genie.smoke.signatures import SIGNATURES, explain

from .conftest import TORCHRUN, free_port, held_port, run_genie

CPU = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

# Captured from a 2-GPU run where rank 1 could not open a socket to its peer (NCCL 2.21.5).
NCCL_OUTPUT = """\
[default1]:[rank1]: Traceback (most recent call last):
[default1]:[rank1]:   File "/home/ana/proj/train.py", line 212, in <module>
[default1]:[rank1]:     main()
[default1]:[rank1]:   File "/home/ana/proj/train.py", line 171, in main
[default1]:[rank1]:     model = DDP(model, device_ids=[local_rank])
[default1]:[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3355, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
[default1]:[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
[default1]:[rank1]: Last error:
[default1]:[rank1]: socketStartConnect: Connect to 10.0.0.2<43527> failed : Software caused connection abort
E1201 10:02:11.093000 5512 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 5531) of binary: /usr/bin/python3
"""
# Captured from an NCCL watchdog timeout (a rank stuck in a collective for 10 minutes).
NCCL_WATCHDOG = """\
[default0]:[rank0]:[E1201 10:12:41.512004 5530 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.
"""
# Captured from a run whose batch did not fit in an 80 GB GPU (torch 2.4).
CUDA_OOM = """\
[default0]:[rank0]: Traceback (most recent call last):
[default0]:[rank0]:   File "/home/ana/proj/train.py", line 96, in train_epoch
[default0]:[rank0]:     loss.backward()
[default0]:[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""
# Captured from torch 2.2 under numpy 2.0.2.
NUMPY_2 = """\
A module that was compiled using NumPy 1.x cannot be run in
NumPy 2.0.2 as it may crash. To support both 1.x and 2.x
versions of NumPy, modules must be compiled with NumPy 2.0.
Some module may need to rebuild instead e.g. with 'pybind11>=2.12'.
[default0]:UserWarning: Failed to initialize NumPy: _ARRAY_API not found (Triggered internally at ../torch/csrc/utils/tensor_numpy.cpp:84.)
"""


def ids(found) -> list[str]:
    return [e.id for e in found]


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return path


def smoke_torchrun(tmp_path: Path, *args: str, timeout: float = 60) -> smoke_process.Outcome:
    """torchrun run as genie smoke runs it (its process runner): the lines the signatures read."""
    env = {**CPU, **FAULTHANDLER_ENV}
    return smoke_process.execute([*TORCHRUN, *args], tmp_path, env, timeout)


def text(outcome: smoke_process.Outcome) -> str:
    return "".join(outcome.lines)


# ------------------------------------------------------------------ captured output


def test_an_nccl_error_suggests_nccl_debug_and_disabling_p2p():
    [found] = explain(NCCL_OUTPUT, 1)
    assert found.id == "nccl" and "NCCL_DEBUG=INFO" in found.fix
    assert "NCCL_P2P_DISABLE=1" in found.fix
    assert found.evidence.startswith("torch.distributed.DistBackendError: NCCL error")
    assert ids(explain(NCCL_WATCHDOG, 1)) == ["nccl"]


def test_cuda_out_of_memory_suggests_a_smaller_batch_and_more_accumulation():
    [found] = explain(CUDA_OOM, 1)
    assert found.id == "cuda_oom"
    assert "--batch-size" in found.fix and "--grad-accum" in found.fix


def test_numpy_2_under_an_old_torch_suggests_the_numpy_pin():
    [found] = explain(NUMPY_2, 1)
    assert found.id == "numpy" and 'pip install "numpy<2"' in found.fix


def test_nothing_is_explained_for_a_clean_exit():
    assert explain("[default0]:step 8 loss 0.31\n", 0) == []


def test_the_hung_signature_needs_a_timeout_and_the_killed_one_needs_none():
    killed = "  exitcode  : -9 (pid: 3821)  (SIGKILL)\n"
    assert ids(explain(killed, 1)) == ["killed"]
    assert ids(explain(killed, None, timed_out=True)) == ["hung"]


# ------------------------------------------------------------------ caused for real


@pytest.mark.e2e
def test_a_port_held_by_a_socket_under_static_rendezvous_is_address_in_use(tmp_path):
    job = script(tmp_path, "import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    with held_port() as port:
        out = smoke_torchrun(tmp_path, "--rdzv-backend=static", "--master-addr=127.0.0.1",
                       f"--master-port={port}", "--nnodes=1", "--node-rank=0",
                       "--nproc-per-node=1", str(job))  # fmt: skip
    assert out.returncode != 0
    [found] = explain(text(out), out.returncode)
    assert found.id == "address_in_use" and f"sport = :{port}" in found.fix
    assert "--master-port" in found.fix


@pytest.mark.e2e
def test_a_master_nobody_answers_is_a_rendezvous_timeout(tmp_path):
    job = script(tmp_path, "import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    port = free_port()  # nobody listens there
    out = smoke_torchrun(tmp_path, "--rdzv-backend=static", "--master-addr=127.0.0.1",
                   f"--master-port={port}", "--nnodes=2", "--node-rank=1", "--nproc-per-node=1",
                   "--rdzv-conf=timeout=2", str(job))  # fmt: skip
    assert out.returncode != 0
    found = explain(text(out), out.returncode)
    assert ids(found) == ["rendezvous_timeout"]
    assert "localhost" in found[0].cause and "firewall" in found[0].cause
    assert "NCCL_SOCKET_IFNAME" in found[0].fix and "genie doctor" in found[0].fix


@pytest.mark.e2e
def test_a_rank_that_raises_is_named_with_its_exception(tmp_path):
    job = script(tmp_path, """\
        import torch.distributed as dist
        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            raise ValueError("injected failure")
        dist.barrier()
        """)  # fmt: skip
    out = smoke_torchrun(tmp_path, "--standalone", "--nproc-per-node=2", "--tee=3", str(job))
    assert out.returncode != 0
    [found] = explain(text(out), out.returncode)
    assert found.id == "rank_raised"
    assert found.cause == "a rank raised ValueError: injected failure"


@pytest.mark.e2e
def test_a_rank_that_hangs_is_shown_where_it_was_at_the_timeout(tmp_path):
    job = script(tmp_path, """\
        import time
        import torch.distributed as dist
        dist.init_process_group("gloo")

        def work():
            if dist.get_rank() == 1:
                time.sleep(3600)
            dist.barrier()

        work()
        """)  # fmt: skip
    out = smoke_torchrun(tmp_path, "--standalone", "--nproc-per-node=2", "--tee=3", str(job),
                   timeout=12)  # fmt: skip
    assert out.timed_out
    [found] = explain(text(out), out.returncode, timed_out=True)
    assert found.id == "hung"
    assert "rank 1 at job.py:7 in work" in found.cause
    assert "rank 0 at job.py:8 in work (inside barrier)" in found.cause


@pytest.mark.e2e
def test_a_rank_killed_by_sigkill_points_to_the_oom_killer(tmp_path):
    job = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out = smoke_torchrun(tmp_path, "--standalone", "--nproc-per-node=1", "--tee=3", str(job))
    assert out.returncode != 0
    assert ids(explain(text(out), out.returncode)) == ["killed"]


@pytest.mark.e2e
def test_an_import_that_fails_names_the_missing_module(tmp_path):
    job = script(tmp_path, "import genie_no_such_module\n")
    out = smoke_torchrun(tmp_path, "--standalone", "--nproc-per-node=1", "--tee=3", str(job))
    [found] = explain(text(out), out.returncode)
    assert found.id == "missing_package" and "'genie_no_such_module'" in found.cause
    assert "pip install -r requirements-torch.txt -r requirements.txt" in found.fix


def test_torch_without_numpy_is_the_numpy_signature(tmp_path):
    blocked = tmp_path / "numpy"
    blocked.mkdir()
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError('No module named numpy', name='numpy')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import torch; torch.zeros(2).numpy()"],
        env={**CPU, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Numpy is not available" in done.stderr  # torch's own words
    assert ids(explain(done.stderr, done.returncode)) == ["numpy"]


@pytest.mark.parametrize("line", [
    # node 1's agent, node 0 killed: as seen (the store's host closed the connection) ...
    "[W1204 10:42:52.786591396 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on "
    "SocketImpl(fd=4, addr=[d018::7290]:54854, remote=[fdff::d900::]:22703): Failed to recv, "
    "got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
    "[W1204 10:42:52.827223891 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=4, "
    "addr=[a81b::0]:54854, remote=[fdff::d900::]:22703): Broken pipe",
    # ... and reset, c10d's socket error in strerror's words (the same format)
    "[W1204 10:42:52.786591396 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on "
    "SocketImpl(fd=4, addr=[d018::7290]:54854, remote=[fdff::d900::]:22703): Connection reset "
    "by peer",
    "torch.distributed.DistNetworkError: Connection reset by peer",
])  # fmt: skip
def test_a_store_that_went_away_is_named_whether_closed_or_reset(line):
    assert ids(explain(line + "\n", 1)) == ["store_closed"]


def test_a_reset_elsewhere_is_not_the_store_but_a_lost_peer():
    assert ids(explain("Read error [10.0.0.2]:4321: Connection reset by peer\n", 1)) == [
        "peer_lost"
    ]


TESTED = {
    "address_in_use", "rendezvous_timeout", "nccl", "cuda_oom", "numpy", "missing_package",
    "killed", "hung",
    # caused for real on separate hosts, in tests/e2e/test_hosts_e2e.py
    "hostname_unresolved", "loopback_peer", "full_mesh", "no_route", "store_closed",
    # recorded on separate hosts: tests/test_explain_corpus.py
    "peer_lost", "not_rejoined",
}  # fmt: skip


def test_every_signature_has_a_test_here():
    assert {s.id for s in SIGNATURES} == TESTED


# ------------------------------------------------------------------ the smoke command


@pytest.mark.e2e
def test_a_failed_smoke_test_explains_itself_and_points_to_doctor(tmp_path):
    made = run_genie("new", "p", "--yes", "--no-smoke", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    train = tmp_path / "p" / "train.py"
    source = train.read_text()
    future = "from __future__ import annotations\n"
    at = source.index(future) + len(future) if future in source else 0
    train.write_text(source[:at] + "import genie_no_such_module\n" + source[at:])
    result = run_genie("smoke", "p", cwd=tmp_path, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 1
    out = result.stdout
    cause = out.index("Likely cause")
    assert "the package providing 'genie_no_such_module' is not installed" in out
    folder = tmp_path / "p"
    install = f"-r {folder / 'requirements-torch.txt'} -r {folder / 'requirements.txt'}"
    assert f"pip install {install} in that environment" in out
    assert (
        cause
        < out.index("Last lines of the output:")
        < out.index("Check this machine: genie doctor --project ")
    )
