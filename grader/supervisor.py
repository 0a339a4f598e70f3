"""The supervisor: the process between the grader and a worker, which owns the worker's process tree.

Started by :class:`ucutlass.grader.worker_handle.Worker` as ``python supervisor.py --ctl FD --chan FD --log PATH
--cwd DIR -- WORKER ARGV…`` (by path: it needs only the standard library and :mod:`sandbox` beside it, so
it starts in milliseconds and never imports torch). It

- makes itself the *subreaper* of its descendants (``PR_SET_CHILD_SUBREAPER``): a process the candidate
  starts and detaches (``start_new_session``, a double fork) is re-parented here, not to init, so the
  grader finds every one of them below this process (:func:`sandbox.descendants`);
- starts the worker in a session of its own, with stdin from /dev/null, stdout and stderr into the log,
  the working folder ``--cwd``, exactly one inherited descriptor (the channel, ``--chan``), a cap on the
  size of every file it writes (``RLIMIT_FSIZE``: a candidate printing without end cannot fill the disk),
  SIGKILL when this process ends (``PR_SET_PDEATHSIG``), and — where the kernel allows it — a user
  namespace of its own with the same uid and gid (no capability outside it: it cannot raise its limits,
  change clocks, mount or load modules);
- tells the grader on ``--ctl`` (one JSON line each): ``{"pid": …, "userns": …}`` once the worker runs,
  ``{"exit": code}`` when the worker has ended (negative: killed by that signal);
- on ``kill`` from the grader, on end of file on ``--ctl`` or a new parent pid (the grader is gone), or on
  SIGTERM, stops and kills every process below it, reaps them and exits.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sandbox  # noqa: E402  (the module beside this file; the package is not imported here)

CLONE_NEWUSER = 0x10000000


def _enter_user_namespace() -> None:
    """In the child before exec: a user namespace mapping our uid and gid to themselves."""
    uid, gid = os.geteuid(), os.getegid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER) != 0:
        return  # not allowed here (a sysctl, an LSM, a container): go on without; the supervisor sees it
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError:
            pass


def _preexec(fsize: int, userns: bool):
    def run() -> None:
        sandbox.die_with_parent(signal.SIGKILL)
        sandbox.limit_file_size(fsize)
        if userns:
            _enter_user_namespace()
    return run


def _ns(pid: int | str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ucutlass-grader-supervisor")
    ap.add_argument("--ctl", type=int, required=True)
    ap.add_argument("--chan", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--fsize", type=int, default=1 << 30)
    ap.add_argument("--userns", type=int, default=1)
    ap.add_argument("worker", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    worker_argv = args.worker[1:] if args.worker[:1] == ["--"] else args.worker

    ctl = socket.socket(fileno=args.ctl)
    me = os.getpid()
    sandbox.set_subreaper()

    def finish(*_):
        sandbox.kill_tree(me)
        sandbox.reap_children()
        os._exit(0)

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGHUP, finish)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the grader, which stops us
    # No PR_SET_PDEATHSIG here: it fires when the *thread* that started us ends, and a grader may live on
    # after the thread that made it. The grader's end is seen instead as end of file on --ctl, and by the
    # parent pid changing (checked every loop below).
    grader = os.getppid()
    if grader == 1:  # the grader is already gone
        return 0

    log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    env = dict(os.environ)
    env["UCUTLASS_GRADER_FD"] = str(args.chan)
    try:
        proc = subprocess.Popen(worker_argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=args.cwd,
                                env=env, pass_fds=(args.chan,), close_fds=True, start_new_session=True,
                                preexec_fn=_preexec(args.fsize, bool(args.userns)))
    except OSError as e:
        ctl.sendall((json.dumps({"error": f"cannot start the worker: {e}"}) + "\n").encode())
        return 1
    os.close(log)
    os.close(args.chan)
    userns = bool(_ns(proc.pid)) and _ns(proc.pid) != _ns(me)
    ctl.sendall((json.dumps({"pid": proc.pid, "userns": userns}) + "\n").encode())

    worker_done = False
    buf = b""
    while True:
        try:
            ready, _, _ = select.select([ctl], [], [], 0.25)
        except InterruptedError:
            ready = []
        if os.getppid() != grader:  # the grader died (we were re-parented)
            finish()
        for pid, status in sandbox.reap_children():
            if pid == proc.pid and not worker_done:
                worker_done = True
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                try:
                    ctl.sendall((json.dumps({"exit": code}) + "\n").encode())
                except OSError:
                    finish()
        if ready:
            try:
                data = ctl.recv(4096)
            except OSError:
                data = b""
            if not data:
                finish()  # the grader closed its end (or died)
            buf += data
            if b"kill" in buf:
                sandbox.kill_tree(me)
                sandbox.reap_children()
                try:
                    ctl.sendall(b'{"killed": true}\n')
                except OSError:
                    pass
                return 0


if __name__ == "__main__":
    sys.exit(main())
