"""Several worker processes on one study, through Optuna's journal file and through PostgreSQL (a server
this test starts: Debian's ``postgresql``, installed with apt-get when missing), with the fake builder
and measurer of search_fakes.py: nothing lost, nothing measured twice, also when a worker is SIGKILLed
and when a whole run is killed and run again."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from glob import glob
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from search_fakes import make_plan, pop_queue, run_fake_study  # tests/ is on sys.path

from ucutlass.search import TuneConfig
from ucutlass.search.report import write_outputs
from ucutlass.search.space import params_key
from ucutlass.search.storage import Heartbeat, fail_dead_workers, fail_stale_trials, open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
CONFIG = TuneConfig(batch=2, seed=1, trials=40, epsilon=0.0, patience=100, sampler="brute")
SLOW = {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative"}  # measured slowly, then killed


# --- a PostgreSQL server of our own ----------------------------------------------------------------------

def _pg_bindir() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def _install_postgresql() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(cmd, env=env, capture_output=True, check=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """A PostgreSQL server in a temporary folder on a free port of 127.0.0.1, run as the ``postgres`` user
    when this is root (PostgreSQL refuses to run as root); stopped and removed at the end."""
    pytest.importorskip("psycopg", reason="the PostgreSQL driver: pip install 'ucutlass[postgres]'")
    bindir = _pg_bindir()
    if bindir is None:
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            pytest.skip("PostgreSQL is not installed, and apt-get (as root) is not available to install it")
        _install_postgresql()
        bindir = _pg_bindir()
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")  # created by Debian's package
        except KeyError:
            pytest.skip("PostgreSQL refuses to run as root, and there is no user postgres to run it as")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="ucutlass-pg-"))
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, port = root / "data", _free_port()

    def run(*cmd):
        done = subprocess.run([*as_user, *map(str, cmd)], capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(map(str, cmd))}: {done.stdout}{done.stderr}"

    try:
        run(bindir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
        run(bindir / "pg_ctl", "-D", data, "-l", root / "server.log", "-w", "-t", "60", "start", "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200")
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute("CREATE DATABASE ucutlass")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/ucutlass"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["journal", "postgresql"])
def storage(request, tmp_path):
    """A fresh storage URL of each kind (one database server for the module, a study name per test)."""
    if request.param == "journal":
        return f"journal://{tmp_path / 'study.log'}"
    return request.getfixturevalue("postgres_url")


# --- helpers -----------------------------------------------------------------------------------------------

LEGAL = {params_key(p) for p in make_plan().legal}


def _measure_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _measured(result) -> list[dict]:
    """Rows of configurations built and measured (complete or failed), not duplicates, not interrupted."""
    return [t for t in result.trials if t["state"] in ("COMPLETE", "FAIL") and not t.get("duplicate")
            and t.get("status") != "INTERRUPTED"]


def _check_study(result, out: Path) -> None:
    """Every legal configuration measured exactly once, the best found, verified and reported."""
    keys = [params_key(t["params"]) for t in _measured(result)]
    assert sorted(keys) == sorted(LEGAL), "each legal configuration once, none lost"
    assert "all 12 legal configurations tried" in result.stop_reason
    assert result.best.params == {"tile": "128x192x64", "cluster": "2x1x1", "schedule": "cooperative"}
    assert result.best_value == pytest.approx(1.2 * 0.9)
    assert len(result.best_outcomes) == len(make_plan().problem.workloads)  # verified on every workload
    paths = write_outputs(result, out)
    doc = json.loads(paths["json"].read_text())
    assert doc["measured_trials"] == 12 and doc["best"]["params"] == result.best.params
    assert paths["csv"].read_text().count("\n") == len(result.trials) + 1


def _kill_when_sleeping(marker_dir: Path, killed: list, timeout_s: float = 90.0) -> threading.Thread:
    """SIGKILL the worker that announces in ``marker_dir/sleeping`` that it is measuring slowly."""
    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            path = marker_dir / "sleeping"
            if path.exists():
                pid = int(path.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


# --- the tests ---------------------------------------------------------------------------------------------

def test_optuna_queue_hands_each_trial_to_one_process(storage, tmp_path, request):
    """Optuna's queue (enqueue_trial / ask) under three processes asking at once: each queued trial is
    popped by exactly one of them, on the journal file and on PostgreSQL."""
    import multiprocessing as mp

    name = request.node.name
    study = optuna.create_study(study_name=name, storage=open_storage(storage))
    for x in range(30):
        study.enqueue_trial({"x": x})
    ctx = mp.get_context("spawn")
    barrier = tmp_path / "ready"
    barrier.mkdir()
    procs = [ctx.Process(target=pop_queue, args=(storage, name, str(tmp_path / f"popped-{i}"), str(barrier), 3))
             for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    popped = [int(n) for i in range(3) for n in (tmp_path / f"popped-{i}").read_text().split()]
    assert sorted(popped) == list(range(30)), "every queued trial popped once"
    assert sum(1 for i in range(3) if (tmp_path / f"popped-{i}").read_text()) == 3, "by all three processes"


def test_workers_share_one_study(storage, tmp_path, request):
    """(a, b) Three workers on one journal file / PostgreSQL study: each legal configuration is popped
    from Optuna's queue by one worker and measured once; the coordinator verifies the best once."""
    log, coord = tmp_path / "measure.log", tmp_path / "coordinator.log"
    tuner, result = run_fake_study(storage, request.node.name, 3, CONFIG, str(tmp_path),
                                   coordinator_log=str(coord), log=str(log), delay_s=0.05,
                                   barrier_dir=str(tmp_path / "barrier"))
    _check_study(result, tmp_path / "out")
    measured = _measure_log(log)
    by_config = {}
    for m in measured:
        by_config.setdefault(params_key(m["params"]), []).append(m["pid"])
    assert all(len(pids) == 1 for pids in by_config.values()), "no configuration measured twice"
    assert len(by_config) == 10  # the two tile-256 ones fail to compile
    assert len({m["pid"] for m in measured}) >= 2, "the work was shared"
    assert len({t["worker"] for t in _measured(result)}) >= 2
    # verification of the best on every workload happens once, in the coordinator
    assert [m["workloads"] for m in _measure_log(coord)] == [len(tuner.problem.workloads)]


def test_tpe_workers_measure_no_configuration_twice(tmp_path):
    """TPE proposals of several workers: a configuration measured or running elsewhere is a duplicate."""
    log = tmp_path / "measure.log"
    cfg = TuneConfig(batch=2, seed=0, trials=40, epsilon=0.0, patience=100, sampler="tpe")
    _, result = run_fake_study(f"journal://{tmp_path / 'study.log'}", "tpe", 3, cfg, str(tmp_path),
                               log=str(log), delay_s=0.02, barrier_dir=str(tmp_path / "barrier"))
    keys = [params_key(m["params"]) for m in _measure_log(log)]
    assert len(keys) == len(set(keys)) == 10
    _check_study(result, tmp_path / "out")


def test_killed_worker_trial_fails_and_is_retried(storage, tmp_path, request):
    """(c) A worker SIGKILLed while it measures: the others go on, its trials end FAIL (interrupted) and
    their configurations are queued again and measured by another worker; no duplicates."""
    log, markers, killed = tmp_path / "measure.log", tmp_path / "markers", []
    markers.mkdir()
    watcher = _kill_when_sleeping(markers, killed)
    _, result = run_fake_study(storage, request.node.name, 2, CONFIG, str(tmp_path), log=str(log), delay_s=0.05,
                               sleep_on=SLOW, sleep_s=120.0, marker_dir=str(markers))
    watcher.join(timeout=1)
    assert len(killed) == 1
    interrupted = [t for t in result.trials if t.get("status") == "INTERRUPTED"]
    assert interrupted and all(t["state"] == "FAIL" for t in interrupted)
    assert SLOW in [t["params"] for t in interrupted]
    assert all(t.get("worker", "").endswith(f":{killed[0]}") for t in interrupted)
    retried = [t for t in _measured(result) if t["params"] == SLOW]
    assert len(retried) == 1 and retried[0]["state"] == "COMPLETE"
    assert retried[0]["retry_of"] in {t["number"] for t in interrupted}
    _check_study(result, tmp_path / "out")
    counts = {}
    for m in _measure_log(log):
        counts[params_key(m["params"])] = counts.get(params_key(m["params"]), 0) + 1
    assert counts.pop(params_key(SLOW)) == 2  # the killed measurement and its retry
    assert set(counts.values()) == {1}


def test_run_killed_as_a_whole_resumes(storage, tmp_path, request):
    """(d) The coordinator and its workers are SIGKILLed together mid-study; the same run started again
    fails the trials they left RUNNING, queues them again and completes the study without measuring
    again what was measured."""
    name, markers = request.node.name, tmp_path / "markers"
    markers.mkdir()
    log1, log2 = tmp_path / "measure1.log", tmp_path / "measure2.log"
    code = ("import sys; from search_fakes import run_fake_study; from ucutlass.search import TuneConfig\n"
            f"cfg = TuneConfig(**{dataclasses.asdict(CONFIG)!r})\n"
            "if __name__ == '__main__':\n"
            f"    run_fake_study({storage!r}, {name!r}, 2, cfg, {str(tmp_path / 'run1')!r}, log={str(log1)!r},"
            f" delay_s=0.05, sleep_on={SLOW!r}, sleep_s=120.0, marker_dir={str(markers)!r})\n")
    script = tmp_path / "run1.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "run1.err", "w"))
    try:
        deadline = time.monotonic() + 90
        while not (markers / "sleeping").exists():  # one worker measures slowly ...
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "run1.err").read_text()
            time.sleep(0.1)
        size = -1
        while size != (size := log1.stat().st_size):  # ... and the other has done what it could
            time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    first = {params_key(m["params"]) for m in _measure_log(log1)} - {params_key(SLOW)}
    assert first, "the first run measured something before it was killed"

    _, result = run_fake_study(storage, name, 2, CONFIG, str(tmp_path / "run2"), log=str(log2), delay_s=0.05)
    _check_study(result, tmp_path / "out")
    second = [params_key(m["params"]) for m in _measure_log(log2)]
    assert not first & set(second), "nothing measured in the first run is measured again"
    assert params_key(SLOW) in second
    assert any(t.get("status") == "INTERRUPTED" and t["params"] == SLOW for t in result.trials)


def test_one_process_resumes_what_a_killed_run_left_running(tmp_path):
    """The default, one worker on SQLite: a trial left RUNNING by a killed run (its process is gone) is
    failed when the study is run again, and its configuration measured then."""
    from search_fakes import FakeBuild, FakeMeasure, make_tuner

    from ucutlass.search.storage import worker_id

    storage, plan = f"sqlite:///{tmp_path / 'study.db'}", make_plan()
    first = make_tuner(plan, FakeBuild(), FakeMeasure(), config=CONFIG, storage=storage, study_name="s")
    first.prepare()
    left = first.study.ask(plan.space.distributions())  # popped from the queue by a run then killed
    dead = subprocess.Popen(["true"])
    dead.wait()
    left.set_user_attr("worker", worker_id(dead.pid))
    left.set_user_attr("config", "whatever")
    measure = FakeMeasure()
    result = make_tuner(plan, FakeBuild(), measure, config=CONFIG, storage=storage, study_name="s").run()
    rows = {t["number"]: t for t in result.trials}
    assert rows[left.number]["state"] == "FAIL" and rows[left.number]["status"] == "INTERRUPTED"
    assert [t["retry_of"] for t in _measured(result) if t["params"] == left.params] == [left.number]
    _check_study(result, tmp_path / "out")
    assert len(measure.measured) == 10 + 1  # the ten that compile, and the verification of the best


def test_a_dead_workers_trial_is_queued_again_before_it_fails(tmp_path):
    """While a dead worker's trial is being failed its configuration is already queued, so a worker asking then
    pops the copy (whose claim passes over the trial it retries) rather than a sampler proposing it afresh,
    outside the retry (the flake of test_killed_worker_trial_fails_and_is_retried)."""
    from ucutlass.search.storage import worker_id

    study = optuna.create_study(storage=open_storage(f"journal://{tmp_path / 'study.log'}"), study_name="s")
    trial = study.ask({"x": CategoricalDistribution(["a", "b"])})
    dead = subprocess.Popen(["true"])
    dead.wait()
    trial.set_user_attr("worker", worker_id(dead.pid))
    queued_at_tell = []
    tell = study.tell

    def spy(number, *args, **kwargs):
        queued_at_tell.append([t.params for t in study.get_trials(states=(TrialState.WAITING,))])
        return tell(number, *args, **kwargs)

    study.tell = spy
    assert fail_dead_workers(study) == [trial.number]
    assert queued_at_tell == [[trial.params]]
    (copy,) = study.get_trials(states=(TrialState.WAITING,))
    assert copy.system_attrs["failed_trial"] == trial.number


def test_heartbeat_fails_a_stale_trial_of_another_host(postgres_url):
    """On a database server, a trial whose worker (on another host) stops beating is failed by Optuna's
    fail_stale_trials after the grace period, and queued again without the dead worker's attributes."""
    storage = open_storage(postgres_url, heartbeat_s=1, grace_s=2)
    study = optuna.create_study(study_name="heartbeat", storage=storage)
    with pytest.warns(UserWarning, match="Heartbeat"):
        trial = study.ask({"x": CategoricalDistribution(["a", "b"])})
    trial.set_user_attr("worker", "another-host:4242")
    with Heartbeat(storage, "heartbeat") as hb:
        hb.hold(trial.number)
        time.sleep(3.5)
        fail_stale_trials(study)
        assert study.trials[trial.number].state is TrialState.RUNNING, "a beating trial is not stale"
    assert fail_dead_workers(study) == [], "a worker of another host is not judged from here"
    time.sleep(3.5)
    fail_stale_trials(study)
    trials = study.get_trials()
    assert trials[trial.number].state is TrialState.FAIL
    retry = [t for t in trials if t.state is TrialState.WAITING]
    assert len(retry) == 1 and retry[0].params == trial.params
    assert retry[0].system_attrs["failed_trial"] == trial.number and "worker" not in retry[0].user_attrs


# --- storage URLs and the command line ---------------------------------------------------------------------

def test_storage_urls(tmp_path):
    from optuna.storages import JournalStorage, RDBStorage

    from ucutlass.errors import UcutError
    from ucutlass.search.storage import default_url, normalize_url, storage_kind

    assert storage_kind(str(tmp_path / "s.log")) == storage_kind("journal:///x/s.log") == "journal"
    assert normalize_url(str(tmp_path / "s.log")) == f"journal://{tmp_path / 's.log'}"
    assert normalize_url("postgresql://u@h:5432/db") == "postgresql+psycopg://u@h:5432/db"
    assert storage_kind("sqlite:///x.db") == "sqlite" and storage_kind(None) == "memory"
    assert isinstance(open_storage(f"journal://{tmp_path / 'a' / 's.log'}"), JournalStorage)
    assert isinstance(open_storage(f"sqlite:///{tmp_path / 's.db'}"), RDBStorage)
    with pytest.raises(UcutError, match="expected sqlite"):
        open_storage("study.txt")
    # one worker: SQLite; several: the journal file; a single-worker study resumed by several is copied
    assert default_url(tmp_path, 1) == f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=default_url(tmp_path, 1))
    study.enqueue_trial({"x": 1})
    url = default_url(tmp_path, 4)
    assert url == f"journal://{tmp_path / 'study.log'}"
    assert len(optuna.load_study(study_name="s", storage=open_storage(url)).trials) == 1
    assert default_url(tmp_path, 1) == url  # from now on the journal is the study


def test_gpu_worker_is_picklable():
    """What `ucutlass tune --workers N` sends to each spawned process."""
    import pickle

    from ucutlass.search.distributed import GpuWorker

    p = make_plan()
    w = GpuWorker(p.problem, p.program.source, "spec.ucut", None, TuneConfig(), "journal:///tmp/x.log", "s", 8, "h200")
    assert pickle.loads(pickle.dumps(w)) == w


def test_cli_tune_workers(capsys, monkeypatch):
    import torch

    from ucutlass.cli import build_parser, main

    help_text = build_parser()._subparsers._group_actions[0].choices["tune"].format_help()
    assert "--workers N" in help_text and "postgresql+psycopg://" in help_text
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["tune", "o_proj_residual_llama3_1_8b", "--workers", "2"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
