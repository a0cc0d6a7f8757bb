"""Launch commands are computed from the Spec alone; nothing is launched here."""

from __future__ import annotations

import re
import shlex

import pytest

from genie.errors import GenieError
from genie.generate import engine, launch, preemption
from genie.spec import build_spec


def test_single_node_uses_standalone_with_one_process_per_gpu(gpu_machine):
    spec = build_spec({"name": "p"}, gpu_machine)
    [cmd] = launch.commands(spec)
    assert cmd.script == "bash launch/single_node.sh"
    assert list(cmd.argv) == ["torchrun", "--standalone", "--nproc_per_node=8", "train.py"]


def test_c10d_multi_node_runs_the_same_elastic_command_and_node_0_hosts_the_store(gpu_machine):
    spec = build_spec({"name": "p", "nodes": 2, "master_addr": "10.0.0.1"}, gpu_machine)
    cmds = launch.commands(spec)
    assert [c.script for c in cmds] == [
        "bash launch/multi_node.sh 0",
        "bash launch/multi_node.sh 1",
    ]
    assert list(cmds[0].argv) == [
        "torchrun", "--nnodes=2", "--nproc_per_node=8", "--local_addr=$LOCAL_ADDR",
        "--rdzv_backend=c10d", "--rdzv_endpoint=10.0.0.1:29500", "--rdzv_id=p",
        "--rdzv_conf=is_host=1", "--max_restarts=3", "train.py",
    ]  # fmt: skip
    # the same command but for is_host: torch's hostname guess fails on many real nodes
    assert [a.replace("is_host=0", "is_host=1") for a in cmds[1].argv] == list(cmds[0].argv)
    assert "10.0.0.1" in cmds[0].where


def test_the_script_line_reads_address_port_and_sizes_from_shell_variables(gpu_machine):
    spec = build_spec({"name": "p", "nodes": 2, "master_addr": "10.0.0.1"}, gpu_machine)
    line = launch.shell_join(launch.multi_node_args(spec))
    assert line == (
        'torchrun --nnodes="$NNODES" --nproc_per_node="$NPROC_PER_NODE" '
        '--local_addr="$LOCAL_ADDR" --rdzv_backend=c10d '
        '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv_id=p --rdzv_conf="$RDZV_CONF" '
        '--max_restarts=3 "$ENTRYPOINT"'
    )
    assert launch.script_vars(spec) == {
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "NNODES": "2", "NPROC_PER_NODE": "8"
    }  # fmt: skip


def test_static_multi_node_gives_each_node_its_rank(gpu_machine):
    raw = {"name": "p", "nodes": 3, "master_addr": "gpu-01", "rdzv": "static", "master_port": 1234}
    cmds = launch.commands(build_spec(raw, gpu_machine))
    for rank, cmd in enumerate(cmds):
        assert f"--node_rank={rank}" in cmd.argv
        assert "--master_addr=gpu-01" in cmd.argv and "--master_port=1234" in cmd.argv
        assert not any(a.startswith("--rdzv") for a in cmd.argv)


def test_torch_before_2_0_has_no_local_addr_and_the_scripts_say_what_that_means(gpu_machine):
    raw = {"name": "p", "nodes": 2, "master_addr": "h", "torch": "1.13", "python": "3.10"}
    spec = build_spec(raw, gpu_machine)
    assert not any(a.startswith("--local_addr") for a in launch.multi_node_args(spec))
    assert any(a.startswith("--local_addr") for a in launch.multi_node_args(
        build_spec({**raw, "torch": "2.0"}, gpu_machine)))  # fmt: skip


def test_flags_use_underscores_which_every_torch_version_accepts(gpu_machine):
    raw = {"name": "p", "nodes": 2, "master_addr": "h", "rdzv": "static"}
    spec = build_spec(raw, gpu_machine)
    argv = launch.single_node_args(spec) + launch.multi_node_args(spec)
    flags = [a.split("=")[0] for a in argv if a.startswith("--")]
    assert flags and all("-" not in f[2:] for f in flags)


def test_shell_script_line_expands_node_rank_and_quotes_the_rest(gpu_machine):
    raw = {"name": "p", "nodes": 2, "master_addr": "h", "rdzv": "static"}
    line = launch.shell_join(launch.multi_node_args(build_spec(raw, gpu_machine)))
    assert '--node_rank="$NODE_RANK"' in line
    assert shlex.split(line.replace('"$NODE_RANK"', "1"))[4] == "--node_rank=1"


def test_dataparallel_launches_one_plain_python_process(gpu_machine):
    [cmd] = launch.commands(build_spec({"name": "p", "framework": "dp"}, gpu_machine))
    assert list(cmd.argv) == ["python", "train.py"]


# ---------------------------------------------------------------- SLURM


def slurm_spec(machine, **answers):
    return build_spec({"name": "p", "scheduler": "slurm", **answers}, machine)


def test_slurm_runs_torchrun_once_per_node_with_c10d_on_the_head_node(gpu_machine):
    spec = slurm_spec(gpu_machine, nodes=4, master_addr="gpu-01")
    assert launch.sbatch_directives(spec) == [
        "--job-name=p", "--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8",
        "--cpus-per-task=32", "--output=logs/%x-%j.out",
        "--signal=B:USR1@120", "--requeue", "--open-mode=append",
    ]  # fmt: skip
    # launch/network.sh finds each node's own address and interface, then runs torchrun
    assert launch.shell_join(launch.slurm_args(spec)) == (
        'srun --kill-on-bad-exit=1 bash launch/network.sh "$head_node" torchrun --nnodes="$SLURM_NNODES" '
        "--nproc_per_node=8 --rdzv_backend=c10d "
        '--rdzv_endpoint="$head_node:$rdzv_port" --rdzv_id="$SLURM_JOB_ID" train.py'
    )


def test_lightning_on_slurm_runs_one_srun_task_per_device(gpu_machine):
    spec = slurm_spec(gpu_machine, framework="lightning", nodes=2, master_addr="gpu-01")
    assert "--ntasks-per-node=8" in launch.sbatch_directives(spec)
    assert launch.slurm_args(spec) == ["srun", "--kill-on-bad-exit=1", "python", "train.py"]


@pytest.mark.parametrize("framework", ["ddp", "lightning", "hf", "dp"])
def test_every_sbatch_passes_its_cpus_on_to_the_job_step(cpu_machine, framework):
    """srun (Slurm 22.05+) does not pass --cpus-per-task on to the step by itself: each task
    would get one CPU. The e2e test on the test SLURM shows what a step sees."""
    spec = build_spec({"name": "p", "scheduler": "slurm", "framework": framework}, cpu_machine)
    script = engine.render(spec)["launch/slurm.sbatch"].decode()
    export = 'export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-1}"'
    assert script.index(export) < script.index("srun --kill-on-bad-exit=1 ")


@pytest.mark.parametrize("framework", ["ddp", "lightning", "hf", "dp"])
def test_every_sbatch_stops_in_one_line_where_its_python_environment_is_missing(
    cpu_machine, framework, tmp_path
):
    """The job's Python environment is a line of the script: run from the script's start to
    its first srun (the data step), on a PATH without torch it stops at once with one line;
    with the environment active (as at submission) it goes on to the steps."""
    import subprocess
    import sys
    from pathlib import Path

    spec = build_spec({"name": "p", "scheduler": "slurm", "framework": framework}, cpu_machine)
    script = engine.render(spec)["launch/slurm.sbatch"].decode()
    env_line = script.index('python -c "import torch"')
    assert script.index("# The Python environment every node runs") < env_line
    first_step = script.index("\nsrun ")
    assert env_line < first_step < script.index("srun --kill-on-bad-exit=1 ")
    assert script[first_step:].startswith(
        "\nsrun --nodes=1 --ntasks=1 python train.py --prepare-only"
    )
    # everything up to the first step, then a marker instead of it
    head = script[:first_step]
    runnable = tmp_path / "head.sh"
    runnable.write_text(head + "\necho REACHED-THE-STEP\n")
    slurm = {"SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_CPUS_PER_TASK": "2",
             "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "7"}  # fmt: skip
    scontrol = tmp_path / "bin" / "scontrol"  # the head of a torchrun job asks for the nodes
    scontrol.parent.mkdir()
    scontrol.write_text("#!/bin/sh\necho n1\n")
    scontrol.chmod(0o755)
    bare = f"{scontrol.parent}:/usr/bin:/bin"  # no venv: no python with torch
    missing = subprocess.run(["bash", str(runnable)], capture_output=True, text=True,
                             env={**slurm, "PATH": bare}, timeout=60)  # fmt: skip
    assert missing.returncode == 1 and "REACHED" not in missing.stdout
    [line] = missing.stderr.strip().splitlines()
    assert line.startswith("launch/slurm.sbatch: no python with torch on ")
    assert "activate the project's environment before sbatch" in line
    active = f"{Path(sys.executable).parent}:{bare}"
    found = subprocess.run(["bash", str(runnable)], capture_output=True, text=True,
                           env={**slurm, "PATH": active}, timeout=60)  # fmt: skip
    assert found.returncode == 0 and "REACHED-THE-STEP" in found.stdout, found.stderr


@pytest.mark.parametrize(("torch", "exported"), [("2.1", True), ("2.2", False), ("2.14", False)])
def test_lightning_under_srun_ends_a_rank_stuck_in_nccl_on_old_torch(cpu_machine, torch, exported):
    """torch 2.1 and older end a rank stuck in a NCCL collective only with
    NCCL_ASYNC_ERROR_HANDLING=1, which torchrun sets and srun does not; 2.2 does by default."""
    answers = {"name": "p", "scheduler": "slurm", "framework": "lightning", "torch": torch}
    script = engine.render(build_spec(answers, cpu_machine))["launch/slurm.sbatch"].decode()
    assert ("export NCCL_ASYNC_ERROR_HANDLING=1\n" in script) is exported


@pytest.mark.parametrize(
    ("framework", "torch", "relays"),
    [("ddp", "2.14", True), ("ddp", "2.10", True), ("ddp", "2.9", False),
     ("lightning", "2.14", True), ("hf", "2.14", True), ("hf", "2.9", False),
     ("dp", "2.14", False)],
)  # fmt: skip
def test_the_launch_script_passes_ctrl_c_on_where_torchrun_leaves_it(
    cpu_machine, framework, torch, relays
):
    """torchrun 2.10+ can leave SIGINT alone (--signals_to_handle): the script then passes
    Ctrl-C on to the workers, which stop at a step in every framework (e2e: the restarts
    test); elsewhere (and for dp, which has no torchrun) the script execs its command."""
    spec = build_spec({"name": "p", "framework": framework, "torch": torch}, cpu_machine)
    script = engine.render(spec)["launch/single_node.sh"].decode()
    assert (launch.CTRL_C_FLAG in script) is relays
    assert ("trap 'interrupted=130;" in script) is relays
    assert ("\nexec " in script) is not relays


@pytest.mark.parametrize(
    ("framework", "torch", "seconds"),
    [("ddp", "2.14", 100), ("ddp", "2.12", 100), ("ddp", "2.11", None), ("hf", "2.14", 100),
     ("lightning", "2.14", 100), ("dp", "2.14", None)],
)  # fmt: skip
def test_torchrun_gives_a_preemption_checkpoint_most_of_the_notice(
    cpu_machine, framework, torch, seconds
):
    """torch 2.12+ reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT: after a SIGTERM the workers get 100 s
    of the scheduler's 120 s notice to checkpoint, not torchrun's 30 s, wherever torchrun
    starts them (e2e: test_long_runs_e2e); before 2.12 the README says 30 s."""
    answers = {"name": "p", "framework": framework, "torch": torch, "scheduler": "slurm"}
    if framework != "dp":  # one node only
        answers.update(nodes=2, master_addr="10.0.0.1")
    files = engine.render(build_spec(answers, cpu_machine))
    line = f'export TORCH_ELASTIC_SHUTDOWN_TIMEOUT="${{TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-{seconds}}}"'
    assert (line in files["launch/single_node.sh"].decode()) is (seconds is not None)
    if framework != "dp":
        assert (line in files["launch/multi_node.sh"].decode()) is (seconds is not None)
    # Lightning's SLURM tasks are started by srun, not torchrun
    in_sbatch = seconds is not None and framework != "lightning"
    assert (line in files["launch/slurm.sbatch"].decode()) is in_sbatch
    readme = files["README.md"].decode()
    said = f"torchrun gives its workers {seconds or 30} s after a SIGTERM" in readme
    assert said is (framework != "dp")  # DataParallel: no torchrun
    if seconds:
        assert seconds < preemption.PREEMPTION_NOTICE
    if framework != "dp":  # the manifests launch torchrun
        k8s = {**answers, "scheduler": "kubernetes"}
        del k8s["master_addr"]
        job = engine.render(build_spec(k8s, cpu_machine))["launch/pytorchjob.yaml"].decode()
        assert ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT" in job) is (seconds is not None)


@pytest.mark.parametrize(
    ("framework", "signal"),
    [("ddp", "--signal=B:USR1@120"), ("dp", "--signal=B:USR1@120"),
     ("lightning", "--signal=B:USR1@120"), ("hf", "--signal=B:USR1@120")],
)  # fmt: skip
def test_slurm_warns_before_the_time_limit_whoever_catches_it(cpu_machine, framework, signal):
    """Every framework's handler (genie's loops, the Lightning and HF callbacks) gets the
    notice through the batch script, which stops the step and requeues; Lightning's own
    SLURM handler, which saved inside the signal handler, is off. Every job is requeued
    and appends to its log."""
    spec = slurm_spec(cpu_machine, framework=framework)
    directives = launch.sbatch_directives(spec)
    assert [d for d in directives if d.startswith("--signal")] == [signal]
    assert "--requeue" in directives and "--open-mode=append" in directives
    script = engine.render(spec)["launch/slurm.sbatch"].decode()
    assert ("trap requeue USR1" in script) == signal.startswith("--signal=B:")


def test_partition_account_and_time_become_directives_only_when_given(cpu_machine):
    bare = launch.sbatch_directives(slurm_spec(cpu_machine))
    assert not any(d.startswith(("--partition", "--account", "--time")) for d in bare)
    given = slurm_spec(cpu_machine, partition="gpu", account="proj-1", time="1-00:00:00")
    assert launch.sbatch_directives(given)[-3:] == [
        "--partition=gpu", "--account=proj-1", "--time=1-00:00:00"
    ]  # fmt: skip


def test_the_printed_commands_of_a_slurm_project_start_with_the_sbatch_line(cpu_machine):
    cmds = launch.commands(slurm_spec(cpu_machine))
    assert cmds[0].script == "mkdir -p logs && sbatch launch/slurm.sbatch"
    assert cmds[0].argv[:6] == (
        "srun", "--kill-on-bad-exit=1", "bash", "launch/network.sh", "$head_node", "torchrun"
    )  # fmt: skip
    assert launch.sbatch_args(["--smoke"], wait=True) == [
        "sbatch", "--wait", "--parsable", "launch/slurm.sbatch", "--smoke"
    ]  # fmt: skip


def test_scheduler_defaults_to_slurm_only_where_sbatch_or_an_allocation_is(cpu_machine):
    from dataclasses import replace

    from genie import detect

    assert build_spec({"name": "p"}, cpu_machine).scheduler == "none"
    assert build_spec({"name": "p"}, replace(cpu_machine, slurm=True)).scheduler == "slurm"
    assert detect.slurm_available({"SLURM_JOB_ID": "7"}) is True


@pytest.mark.parametrize(
    ("raw", "says"),
    [({"scheduler": "pbs"}, "one of: none, slurm, kubernetes"),
     ({"scheduler": "slurm", "time": "tomorrow"}, "a SLURM time limit"),
     ({"scheduler": "slurm", "partition": "a b"}, "as SLURM names them"),
     ({"partition": "gpu"}, "only applies to --scheduler slurm"),
     ({"image": "x"}, "only applies to --scheduler kubernetes"),
     ({"scheduler": "kubernetes", "image": "Bad Image"}, "a container image reference"),
     ({"scheduler": "kubernetes", "framework": "dp"}, "the Kubeflow manifests launch torchrun")],
)  # fmt: skip
def test_scheduler_answers_are_checked_with_a_reason(cpu_machine, raw, says):
    with pytest.raises(GenieError, match=re.escape(says)):
        build_spec({"name": "p", **raw}, cpu_machine)


def test_an_empty_optional_slurm_answer_means_not_set(cpu_machine):
    assert slurm_spec(cpu_machine, partition="", time=" ").partition is None
