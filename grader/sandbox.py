"""What the operating system offers to confine a candidate's process, and the process-tree tools.

Everything here is standard library only: the supervisor (:mod:`.supervisor`) imports it without torch.

**Landlock** (Linux ≥ 5.13, an unprivileged LSM; ``Documentation/userspace-api/landlock.rst``): a process
restricts itself, and every process it starts, for good. :func:`confine` handles every write-like
filesystem right, so files and folders can be written, made, removed, renamed or truncated only beneath
the folders it is given; reading stays open (the candidate imports torch, CUTLASS headers, its own
files). A Landlock domain also confines ptrace (and with it ``/proc/PID/mem`` and ``process_vm_readv``)
to processes inside the domain. From ABI 6 (Linux 6.12) :func:`confine` also *scopes* signals and abstract
UNIX sockets: the candidate cannot signal (SIGKILL) or connect to any process outside its domain — the
grader, its supervisor, the tuner.

**Not used: PID namespaces.** CUDA's (legacy) IPC handles do not open across PID namespaces (UCX,
``uct_cuda_ipc``: "Legacy CUDA IPC handles cannot be exchanged across PID namespaces"; NVIDIA/nccl#360),
and the grader shares inputs and outputs with the worker through CUDA IPC. A subreaper supervisor stands
in: every orphan of the worker's tree is re-parented to it, so :func:`descendants` finds every process
the candidate started, detached ones (``start_new_session``, double forks) included, and
:func:`kill_tree` stops and kills them all.

Constants are the kernel's UAPI values (``include/uapi/linux/landlock.h``, ``prctl.h``) and the generic
syscall numbers 444–446, the same on x86-64 and arm64.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import struct
import sys
import time
from dataclasses import dataclass, field

# --- Landlock UAPI -------------------------------------------------------------------------------------

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13      # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14   # ABI 3
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1                # ABI 6

#: Every write-like right of ABI 1 (ABI 2 adds REFER, ABI 3 TRUNCATE).
_WRITE_RIGHTS_V1 = (ACCESS_FS_WRITE_FILE | ACCESS_FS_REMOVE_DIR | ACCESS_FS_REMOVE_FILE | ACCESS_FS_MAKE_CHAR
                    | ACCESS_FS_MAKE_DIR | ACCESS_FS_MAKE_REG | ACCESS_FS_MAKE_SOCK | ACCESS_FS_MAKE_FIFO
                    | ACCESS_FS_MAKE_BLOCK | ACCESS_FS_MAKE_SYM)
#: Rights that apply to a file (not a folder) in a rule.
_FILE_RIGHTS = ACCESS_FS_EXECUTE | ACCESS_FS_WRITE_FILE | ACCESS_FS_READ_FILE | ACCESS_FS_TRUNCATE

def _load_libc():
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        lib.prctl.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):  # not a glibc/musl system: every layer reports itself missing
        return None


#: Loaded at import (the grader's integrity guard snapshots this module's globals before candidate code).
_LIBC = _load_libc()


def _syscall():
    if _LIBC is None:
        raise OSError("no C library to call the kernel with")
    return _LIBC


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: unavailable — not Linux, too old, or the LSM is off)."""
    if not sys.platform.startswith("linux") or _LIBC is None:
        return 0
    try:
        v = _syscall().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return int(v) if v > 0 else 0


def _write_rights(abi: int) -> int:
    rights = _WRITE_RIGHTS_V1
    if abi >= 2:
        rights |= ACCESS_FS_REFER
    if abi >= 3:
        rights |= ACCESS_FS_TRUNCATE
    return rights


@dataclass(frozen=True)
class Confinement:
    """What :func:`confine` put in place (recorded in results and ``Grader.worker_info``).

    Attributes:
        landlock_abi: the kernel's ABI (0: none).
        filesystem: writes confined to ``writable`` (False: unconfined, e.g. no Landlock).
        ptrace: the process cannot ptrace or read the memory of processes outside its domain.
        signals: it cannot signal processes outside its domain (Landlock ABI ≥ 6).
        writable: the folders beneath which writes stay allowed.
        reason: why a layer is missing, when one is.
    """

    landlock_abi: int = 0
    filesystem: bool = False
    ptrace: bool = False
    signals: bool = False
    writable: tuple[str, ...] = ()
    reason: str = ""

    def to_json(self) -> dict:
        return {"landlock_abi": self.landlock_abi, "filesystem": self.filesystem, "ptrace": self.ptrace,
                "signals": self.signals, "writable": list(self.writable), "reason": self.reason}


def confine(writable: list[str] | tuple[str, ...]) -> Confinement:
    """Restrict this process and its future children with Landlock: writes only beneath ``writable``,
    no ptrace out of the domain, and (ABI ≥ 6) no signals or abstract-socket connections out of it.

    Folders in ``writable`` that do not exist are skipped. Irreversible; call it before any untrusted code.

    Returns:
        The :class:`Confinement` in force (``filesystem=False`` with a reason where Landlock is missing).
    """
    abi = landlock_abi()
    if abi <= 0:
        return Confinement(reason="the kernel offers no Landlock (Linux < 5.13, or the LSM is not enabled)")
    libc = _syscall()
    handled = _write_rights(abi)
    scoped = (SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0
    # struct landlock_ruleset_attr {u64 handled_access_fs; u64 handled_access_net; u64 scoped;}: pass the
    # size the ABI knows (ABI 4 added the net field, ABI 6 the scope field).
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, 0, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, 0)
    else:
        attr = struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(_SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return Confinement(landlock_abi=abi, reason=f"landlock_create_ruleset failed: "
                                                     f"{os.strerror(ctypes.get_errno())}")
    kept = []
    try:
        for path in dict.fromkeys(os.path.realpath(p) for p in writable):
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(path)
                allowed = handled if is_dir else handled & _FILE_RIGHTS
                # struct landlock_path_beneath_attr {u64 allowed_access; s32 parent_fd;} __attribute__((packed))
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, pfd), 12)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH), rule,
                                ctypes.c_uint32(0)) == 0:
                    kept.append(path)
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return Confinement(landlock_abi=abi, reason=f"PR_SET_NO_NEW_PRIVS failed: "
                                                         f"{os.strerror(ctypes.get_errno())}")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return Confinement(landlock_abi=abi, reason=f"landlock_restrict_self failed: "
                                                         f"{os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    return Confinement(landlock_abi=abi, filesystem=True, ptrace=True, signals=abi >= 6, writable=tuple(kept),
                       reason="" if abi >= 6 else f"Landlock ABI {abi} < 6 cannot scope signals: the candidate "
                                                  "can signal the grader's processes")


# --- process attributes --------------------------------------------------------------------------------

def set_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (``PR_SET_CHILD_SUBREAPER``)."""
    if not sys.platform.startswith("linux") or _LIBC is None:
        return False
    return _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Receive ``sig`` when the parent ends (``PR_SET_PDEATHSIG``; strictly: when the parent *thread* that
    started this process ends, so use it only below a single-threaded parent such as the supervisor)."""
    if not sys.platform.startswith("linux") or _LIBC is None:
        return False
    return _LIBC.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def limit_file_size(max_bytes: int) -> None:
    """``RLIMIT_FSIZE``: no file this process (and its children) writes grows past ``max_bytes``; a write
    beyond it fails with EFBIG (SIGXFSZ is ignored). Keeps a candidate that prints without end from
    filling the disk with its log."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    except (ValueError, OSError):
        pass
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files of a crashed candidate
    except (ValueError, OSError):
        pass


# --- the process tree ----------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()  # the name may hold spaces and parentheses
    try:
        return int(rest[1]), rest[0].decode()
    except (IndexError, ValueError):
        return None


def descendants(root: int, include_zombies: bool = False) -> list[int]:
    """Every process below ``root`` (children, grandchildren, …), from one scan of /proc.

    Zombies (exited, not yet reaped) are left out unless ``include_zombies``: they run nothing.
    """
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    parent: dict[int, int] = {}
    state: dict[int, str] = {}
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            parent[pid], state[pid] = st
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return [p for p in out if include_zombies or state.get(p) not in ("Z", "X")]


def kill_tree(root: int, include_root: bool = False, timeout_s: float = 5.0) -> list[int]:
    """Stop, then kill, every process below ``root`` (and ``root`` itself with ``include_root``).

    SIGSTOP first, pass after pass until no new process appears (a stopped process cannot fork), so a
    fork loop cannot outrun the kill; then SIGKILL to all; then wait up to ``timeout_s`` until none of
    them runs (they are reaped by their parents or the subreaper).

    Returns:
        The pids that were signalled.
    """
    seen: set[int] = set()
    for _ in range(200):
        found = [p for p in descendants(root) if p not in seen]
        if include_root and root not in seen:
            found.append(root)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
            seen.add(pid)
    for pid in seen:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in seen if (st := _stat(p)) is not None and st[1] not in ("Z", "X")]
        if not alive:
            break
        time.sleep(0.005)
    return sorted(seen)


def reap_children() -> list[tuple[int, int]]:
    """Reap every exited child of this process without blocking; ``[(pid, status), ...]``."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            break
        if pid == 0:
            break
        out.append((pid, status))
    return out


def process_cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, all threads) that process ``pid`` has used, in seconds, from the kernel's
    per-process CPU clock (nanosecond resolution, unlike /proc's clock ticks); None when unreadable.

    The clock id of process ``pid`` is ``((~pid) << 3) | CPUCLOCK_SCHED`` (Linux ``posix-timers.h``:
    ``MAKE_PROCESS_CPUCLOCK``), what glibc's ``clock_getcpuclockid`` returns.
    """
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, OverflowError, ValueError):
        return None


def run_delay_seconds(pid: int, all_threads: bool = False) -> float | None:
    """How long process ``pid`` was runnable but waiting for a CPU (the scheduler's run delay,
    ``/proc/PID/schedstat`` field 2, in ns: ``Documentation/scheduler/sched-stats.rst``), in seconds: its
    main thread's, or summed over its threads with ``all_threads``. None where schedstat is missing.

    Time a process spent preempted by others is host noise, not work: the grader's wall-clock check
    subtracts it from what its own clock measured.
    """
    paths = [f"/proc/{pid}/schedstat"]
    if all_threads:
        try:
            paths = [f"/proc/{pid}/task/{t}/schedstat" for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return None
    total, seen = 0, False
    for path in paths:
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
                seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9 if seen else None


def own_run_delay_seconds() -> float | None:
    """The calling thread's run delay (``/proc/thread-self/schedstat`` field 2), in seconds; None where
    schedstat is missing.

    A thread that waits on a reply is woken when it arrives and then waits for a CPU: on a loaded host, a
    whole time slice (measured: up to 4 ms with 2 spinning processes per core). The grader's wall-clock
    check subtracts this delay of its own thread as it does the worker's.
    """
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


__all__ = ["Confinement", "confine", "landlock_abi", "set_subreaper", "die_with_parent", "limit_file_size",
           "descendants", "kill_tree", "reap_children", "process_cpu_seconds", "run_delay_seconds",
           "own_run_delay_seconds"]
