"""A one-node SLURM cluster on this machine for the tests: the session fixture ``slurm_cluster``.

It starts munged, slurmctld and slurmd in the foreground as its children, from a temporary folder that holds all
they use (config, munge key and socket, free ports, state, spool, logs), so that a SLURM or munge of the machine's
own never meets them; at the end it cancels what still runs and stops exactly those three, by their pids. It needs
slurm-wlm and munge (.ci/run installs them) and root (slurmd starts the jobs); without them the tests that use it
skip, saying why.

The cluster has no accounting database (slurmdbd needs MySQL), so ``sacct``, which submitit asks for the state of
a job that ended without a result, is a stand-in on the cluster's PATH: it answers that one query (job, state,
node) from the jobs slurmctld still holds (``squeue --states=all``, 5 minutes after they end).

``make test`` runs the tests in parallel workers (pytest-xdist, ``--dist loadgroup``): every test that uses the
cluster is put in one group, so one worker runs them all against one cluster."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PARTITION = "tpobench"
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo")
START_S = 30.0  # each daemon is up well within this (about 1 s for all three)
SACCT = """#!/bin/sh
# submitit's query, sacct -o JobID,State,NodeList --parsable2 -j ID ..., from the jobs slurmctld holds
jobs=""
while [ $# -gt 0 ]; do
    case "$1" in -j) jobs="$jobs${jobs:+,}$2"; shift ;; esac
    shift
done
echo "JobID|State|NodeList"
exec squeue --states=all --array --noheader --format='%i|%T|%N' ${jobs:+--jobs=$jobs}
"""


@dataclass
class SlurmCluster:
    env: dict[str, str]  # for SLURM commands and sweeps on this cluster: SLURM_CONF, PATH with the stand-in sacct
    partition: str
    folder: Path  # its config, state and logs

    def run(self, *command: str) -> str:
        """A SLURM command on this cluster; its output."""
        return subprocess.run(command, env=self.env, check=True, capture_output=True, text=True, timeout=30).stdout

    def jobs(self) -> list[str]:
        """The ids of the jobs that are pending or running."""
        return self.run("squeue", "--noheader", "--array", "--format=%i").split()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _config(folder: Path, host: str, munge_socket: Path) -> str:
    """slurm.conf: this machine's CPUs and memory as one node, in one partition; a requeued job (submitit's answer
    to USR2) may start again after cred_expire + 1 s (default 120) and the scheduler looks every second."""
    memory_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    return f"""\
ClusterName=tpobench
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket},cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
KillWait=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={len(os.sched_getaffinity(0))} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(what: str, ready: Callable[[], bool], daemons: dict[str, subprocess.Popen], folder: Path) -> None:
    deadline = time.monotonic() + START_S
    while not ready():
        for name, daemon in daemons.items():
            if daemon.poll() is not None:
                raise RuntimeError(f"SLURM test cluster: {name} exited ({daemon.returncode}); its log: "
                                   f"{(folder / f'{name}.out').read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"SLURM test cluster: {what} not within {START_S:.0f} s; logs in {folder}")
        time.sleep(0.1)


def _stop(cluster: SlurmCluster, daemons: dict[str, subprocess.Popen]) -> None:
    """Cancel the cluster's jobs and wait for them to end (their job steps end with them), then stop the daemons,
    last started first."""
    controller, node = daemons.get("slurmctld"), daemons.get("slurmd")
    try:
        if controller is not None and controller.poll() is None:
            cluster.run("scancel", f"--partition={cluster.partition}")
            deadline = time.monotonic() + 30
            while node is not None and node.poll() is None and cluster.jobs() and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        for daemon in reversed(daemons.values()):
            daemon.terminate()
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("slurm_cluster"))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    search = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin"  # the daemons' folder, not on every PATH
    programs = {name: shutil.which(name, path=search) for name in ("munged", "slurmctld", "slurmd", *CLIENTS)}
    missing = [name for name, path in programs.items() if path is None]
    if missing:
        pytest.skip(f"no SLURM test cluster: {', '.join(missing)} not installed (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("no SLURM test cluster: it needs root (slurmd starts the jobs)")
    folder = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    munge = folder / "munge"
    munge.mkdir()
    key, munge_socket = munge / "munge.key", munge / "munge.socket"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    for name in ("bin", "state", "spool"):
        (folder / name).mkdir()
    (folder / "bin" / "sacct").write_text(SACCT)
    (folder / "bin" / "sacct").chmod(0o755)
    config = folder / "slurm.conf"
    config.write_text(_config(folder, host, munge_socket))
    env = {name: value for name, value in os.environ.items() if not name.startswith(("SLURM_", "SUBMITIT_"))}
    env.update(SLURM_CONF=str(config), PATH=f"{folder / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    cluster = SlurmCluster(env, PARTITION, folder)

    daemons: dict[str, subprocess.Popen] = {}

    def start(name: str, *args: str) -> None:
        with open(folder / f"{name}.out", "wb") as output:  # its stderr: what it says before its log is open
            daemons[name] = subprocess.Popen([programs[name], *args], env=env, stdin=subprocess.DEVNULL,
                                             stdout=output, stderr=subprocess.STDOUT, start_new_session=True)

    try:
        # --force: munged refuses a socket in a folder that not everyone may enter, as the tests' folders are (0700)
        start("munged", "--foreground", "--force", f"--socket={munge_socket}", f"--key-file={key}",
              f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed")
        _wait("munge's socket", munge_socket.exists, daemons, folder)
        start("slurmctld", "-D", "-f", str(config))
        start("slurmd", "-D", "-N", host, "-f", str(config))

        def node_idle() -> bool:
            state = subprocess.run(["sinfo", "--noheader", f"--nodes={host}", "--format=%t"], env=env,
                                   capture_output=True, text=True, timeout=30)
            return state.stdout.strip() == "idle"

        _wait(f"node {host} idle", node_idle, daemons, folder)
        yield cluster
    finally:
        _stop(cluster, daemons)
