"""Where a study lives, and how the trials of a worker that died come back: Optuna's storages.

Storage URLs (``ucutlass tune --storage URL``):

- ``sqlite:///path/study.db``: Optuna's ``RDBStorage`` on SQLite; one process (the default with one
  worker).
- ``journal:///abs/path/study.log``, ``journal://rel/path.log`` or a plain path ending in ``.log``:
  Optuna's ``JournalStorage`` with a ``JournalFileBackend``; several processes on one host (the default
  with several workers: SQLite with several writers is fragile).
- any other SQLAlchemy URL (``postgresql+psycopg://user@host:5432/db``, ``mysql+pymysql://…``): Optuna's
  ``RDBStorage``, for workers on many hosts. ``postgresql://`` means ``postgresql+psycopg://`` (psycopg 3:
  ``pip install 'ucutlass[postgres]'``).

A worker that dies (SIGKILL, a crash, a lost host) leaves the trials it held RUNNING. They are failed
and queued again once (Optuna's ``RetryHeartbeatStaleTrialCallback``, as :class:`RetryStaleTrial`):

- On a server database (not SQLite), workers record Optuna heartbeats for every trial they hold
  (``RDBStorage.record_heartbeat``) and Optuna's ``fail_stale_trials`` fails those whose heartbeat is
  older than the grace period; the storage's stale-trial callback queues them again. This covers workers
  on other hosts.
- ``JournalStorage`` and SQLite have no heartbeat in Optuna (5.0): :func:`fail_dead_workers` fails, through
  the public ``study.tell(number, state=FAIL)``, the RUNNING trials whose worker (``host:pid`` in the
  trial's ``worker`` attribute) is a process of this host that no longer runs, and queues them with the
  same callback. The coordinator calls it when one of its workers exits, waiting workers call it, and
  every run calls it at its start (how a run killed as a whole resumes).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import os
import socket
import threading
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from ucutlass.errors import UcutError

#: Seconds between two heartbeats of a held trial (server databases only).
HEARTBEAT_S = 15
#: A trial whose last heartbeat is older than this is failed and queued again.
GRACE_S = 60
#: A RUNNING trial that no worker ever claimed (its worker died inside ``ask()``) is failed after this.
UNCLAIMED_S = 600.0
#: User attributes that belong to the worker holding a trial (not copied into a retried trial).
WORKER_ATTRS = ("worker", "claimed", "duplicate", "status", "reason")



class StorageError(UcutError):
    """A study's storage cannot be read: a corrupt or truncated ``study.db``, a damaged journal ``study.log``.
    The message names the file and what to do (move it aside, or tune with another ``--storage``)."""


def storage_file(url: str | None) -> str:
    """What to name in a message about ``url``: the file of a SQLite or journal URL, else the URL."""
    kind = storage_kind(url) if url else "memory"
    if kind == "journal":
        return str(journal_path(url))  # type: ignore[arg-type]
    if kind == "sqlite":
        return url[len("sqlite:///"):] if url.startswith("sqlite:///") else url  # type: ignore[union-attr]
    return url or "the in-memory storage"


@contextlib.contextmanager
def readable(url: str | None, what: str = "read the study") -> Iterator[None]:
    """Turn the errors of a damaged storage (SQLAlchemy's ``DatabaseError`` on a corrupt or truncated SQLite file,
    a JSON error in a journal log, bytes that are not text) into a :class:`StorageError` naming the file.

    Args:
        url: the storage URL (for the message).
        what: what was being done, for the message.
    """
    import sqlalchemy.exc

    try:
        yield
    except (sqlalchemy.exc.DatabaseError, json.JSONDecodeError, UnicodeDecodeError) as e:
        name = storage_file(url)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        local = storage_kind(url) in ("sqlite", "journal") if url else False
        todo = (f"move it aside (mv {name} {name}.broken) and run again to start a new study, or tune with "
                "another --storage" if local else "repair the database, or tune with another --storage")
        raise StorageError(f"cannot {what} in {name}: the storage is corrupt or truncated "
                           f"({type(e).__name__}: {first[:200]}); {todo}") from None


_retry_base = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) \
    or optuna.storages.RetryFailedTrialCallback  # optuna < 4.9


class RetryStaleTrial(_retry_base):
    """Optuna's retry of a stale trial (a WAITING copy with the same params, ``failed_trial`` and
    ``retry_history`` in its system attributes), without the dead worker's bookkeeping attributes."""

    def __init__(self, max_retry: int | None = 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            super().__init__(max_retry=max_retry)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        trial = copy.copy(trial)
        trial.user_attrs = {k: v for k, v in trial.user_attrs.items() if k not in WORKER_ATTRS}
        super().__call__(study, trial)


def storage_kind(url: str | None) -> str:
    """``memory``, ``journal``, ``sqlite`` or ``rdb`` (a database server)."""
    if url is None:
        return "memory"
    if url.startswith("journal://") or ("://" not in url and url.endswith(".log")):
        return "journal"
    if url.startswith("sqlite:"):
        return "sqlite"
    if "://" in url:
        return "rdb"
    raise UcutError(f"storage {url!r}: expected sqlite:///FILE.db, journal:///FILE.log (or a path ending in .log) "
                    "or a database URL such as postgresql+psycopg://USER@HOST:PORT/DB")


def normalize_url(url: str | None) -> str | None:
    """The canonical form: journal paths made absolute, ``postgresql://`` → ``postgresql+psycopg://``."""
    kind = storage_kind(url)
    if kind == "journal":
        return f"journal://{journal_path(url)}"
    if kind == "rdb":
        for plain in ("postgresql://", "postgres://"):
            if url.startswith(plain):
                return "postgresql+psycopg://" + url[len(plain):]
    return url


def journal_path(url: str) -> Path:
    """The log file of a journal URL (``journal:///abs``, ``journal://rel``) or ``.log`` path."""
    path = url[len("journal://"):] if url.startswith("journal://") else url
    return Path(path).expanduser().resolve()


def default_url(out_dir: Path, workers: int) -> str:
    """The storage in ``out_dir`` that a run resumes: ``study.log`` (journal) when it exists or when
    several workers share the study, else ``study.db`` (SQLite). A single-worker study in ``study.db``
    that is resumed with several workers is copied into ``study.log`` first (``optuna.copy_study``)."""
    log, db = (out_dir / "study.log").resolve(), (out_dir / "study.db").resolve()
    if log.exists() or (workers > 1 and not db.exists()):
        return f"journal://{log}"
    if workers == 1:
        return f"sqlite:///{db}"
    db_url = f"sqlite:///{db}"
    with warnings.catch_warnings(), readable(db_url, "copy the study into a journal log"):
        warnings.simplefilter("ignore")
        for summary in optuna.get_all_study_summaries(db_url, include_best_trial=False):
            optuna.copy_study(from_study_name=summary.study_name, from_storage=db_url,
                              to_storage=open_storage(f"journal://{log}"))
    return f"journal://{log}"


def open_storage(url: str | None, *, heartbeat_s: int | None = HEARTBEAT_S,
                 grace_s: int | None = GRACE_S) -> BaseStorage | None:
    """An Optuna storage for ``url`` (None: in memory). See the module docstring.

    Args:
        heartbeat_s, grace_s: heartbeat interval and grace period on a database server (None: no heartbeat).

    Raises:
        UcutError: a malformed URL, or a database whose Python driver is not installed.
        StorageError: a SQLite file that is not a database, or a journal log with a damaged record (corrupt,
            truncated).
    """
    kind = storage_kind(url)
    if kind == "memory":
        return None
    url = normalize_url(url)
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend

        path = journal_path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        with readable(url, "read the study log"):  # JournalStorage replays the whole log here
            return JournalStorage(JournalFileBackend(str(path)))
    kwargs: dict = {}
    if kind == "sqlite":
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}  # several readers and a writer wait
    elif heartbeat_s:
        callback = "heartbeat_stale_trial_callback" \
            if "heartbeat_stale_trial_callback" in inspect.signature(RDBStorage).parameters else "failed_trial_callback"
        kwargs.update(heartbeat_interval=heartbeat_s, grace_period=grace_s, **{callback: RetryStaleTrial()})
    try:
        with warnings.catch_warnings(), readable(url, "open the study storage"):
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, **kwargs)
    except ImportError as e:
        driver = "psycopg 3: pip install 'ucutlass[postgres]'" if url.startswith("postgresql") else "its driver"
        raise UcutError(f"storage {url}: the database's Python driver is missing ({driver}): {e}") from None


def heartbeat_enabled(storage: BaseStorage | None) -> bool:
    """True for a storage with Optuna's heartbeat (an ``RDBStorage`` with ``heartbeat_interval``)."""
    return isinstance(storage, RDBStorage) and storage.get_heartbeat_interval() is not None


def fail_stale_trials(study: optuna.Study) -> None:
    """Optuna's ``fail_stale_trials`` (heartbeat storages; a no-op elsewhere), without its warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


# --- workers and their trials ---------------------------------------------------------------------------

def _host() -> str:
    """This host's name, with the inode of this process's PID namespace where Linux shows it (two
    containers of one host may share a host name, never a PID namespace)."""
    try:
        ns = os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}/{ns}"


def worker_id(pid: int | None = None) -> str:
    """``host:pid`` of a worker process (recorded in the ``worker`` attribute of the trials it claims)."""
    return f"{_host()}:{pid or os.getpid()}"


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """State letter and start time (epoch seconds) of process ``pid`` from Linux ``/proc``; None when
    unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def worker_gone(wid: str, since: datetime | None = None) -> bool:
    """True when ``wid`` names a process of this host that no longer runs: it does not exist, is a zombie
    nobody reaped (an orphan where PID 1 does not reap), or its pid now belongs to a process started after
    ``since`` (the start of the trial it held). Workers of other hosts: False."""
    host, _, pid_text = wid.rpartition(":")
    if host != _host() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    stat = _proc_stat(pid)
    if stat is None:
        return False
    state, started = stat
    return state in ("Z", "X") or (since is not None and started > since.timestamp() + 1.0)


def fail_trials(study: optuna.Study, trials: Iterable[FrozenTrial], retry: bool = True) -> list[int]:
    """Fail RUNNING trials (``study.tell(number, state=FAIL)``) and queue each again once
    (:class:`RetryStaleTrial`); a trial that another process finished meanwhile is left alone.

    Returns:
        The numbers of the trials failed here.
    """
    callback = RetryStaleTrial() if retry else None
    failed = []
    for t in trials:
        # The copy is queued before the trial fails, so that its configuration is never neither running nor
        # queued (a sampler would propose it afresh then); the copy's claim passes over the trial it retries.
        # If the trial finished meanwhile, the copy's claim finds it measured and gives way.
        if callback is not None:
            callback(study, t)
        try:
            study.tell(t.number, state=TrialState.FAIL)
        except (ValueError, RuntimeError):  # finished meanwhile (UpdateFinishedTrialError is a RuntimeError)
            continue
        failed.append(t.number)
    return failed


def fail_dead_workers(study: optuna.Study, *, workers: Iterable[str] | None = None,
                      unclaimed_s: float | None = UNCLAIMED_S) -> list[int]:
    """Fail (and queue again) the RUNNING trials whose worker is gone (see :func:`worker_gone`).

    Args:
        workers: only the trials of these worker ids (``host:pid``) are candidates; default all.
        unclaimed_s: also fail RUNNING trials that carry no ``worker`` and started longer ago than this
            (a worker that died inside ``ask()``); None: leave them.

    Returns:
        The numbers of the trials failed here.
    """
    wanted = set(workers) if workers is not None else None
    now = time.time()
    stale = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        wid = t.user_attrs.get("worker")
        if wid is None:
            if (unclaimed_s is not None and t.datetime_start is not None
                    and now - t.datetime_start.timestamp() > unclaimed_s):
                stale.append(t)
        elif (wanted is None or wid in wanted) and worker_gone(wid, t.datetime_start):
            stale.append(t)
    return fail_trials(study, stale) if stale else []


class Heartbeat:
    """Records an Optuna heartbeat every ``interval`` seconds for each trial a worker holds (a batch is
    held for the whole of its compile and measurement). Does nothing on storages without heartbeat.

    Example:
        >>> with Heartbeat(storage, study_name) as hb:             # doctest: +SKIP
        ...     hb.hold(trial.number); ...; hb.release(trial.number)
    """

    def __init__(self, storage: BaseStorage | None, study_name: str):
        self.storage = storage if heartbeat_enabled(storage) else None
        self._ids: dict[int, int] = {}  # trial number -> trial id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.storage is not None:
            self._study_id = self.storage.get_study_id_from_name(study_name)

    def __enter__(self) -> "Heartbeat":
        if self.storage is not None:
            self._thread = threading.Thread(target=self._run, name="ucutlass-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def hold(self, number: int) -> None:
        if self.storage is None:
            return
        tid = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
        with self._lock:
            self._ids[number] = tid
        self.storage.record_heartbeat(tid)

    def release(self, number: int) -> None:
        with self._lock:
            self._ids.pop(number, None)

    def _run(self) -> None:
        interval = self.storage.get_heartbeat_interval()
        while not self._stop.wait(interval):
            with self._lock:
                ids = list(self._ids.values())
            for tid in ids:
                try:
                    self.storage.record_heartbeat(tid)
                except Exception:  # a finished trial or a lost connection: the next beat retries
                    pass
