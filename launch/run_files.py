"""The file names EasyR1 and the reward write into a run, :class:`RunError` and the run lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from core.io import open_regular

CHECKPOINT_TRACKER = "checkpoint_tracker.json"  # EasyR1's, in trainer.save_checkpoint_path
STEP_DIR_RE = re.compile(r"global_step_(0|[1-9][0-9]{0,17})$")  # as EasyR1 names it: global_step_003 is not step 3
SHARD_RE = re.compile(r"(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
INCOMPLETE_DIR = "incomplete"
LOGGED_FILES = ("experiment_log.jsonl", "generations.log")  # EasyR1's file logger truncates them at every start
REWARD_COUNTERS = "reward_counters.jsonl"  # a segment's reward counters (env QUOTECITE_METRICS_DIR)
REWARD_BATCHES = "reward_batches.jsonl"  # reward.pipeline.TrainBatchTracker's: record n is step resume_step + n
SERVER_OUTAGE = "server_outage.json"  # the reward gave up on a judge/embedder outage (judge_outage_s)
NO_GROUP_KEPT = "no_group_kept.json"  # an attempt of EasyR1's online filter kept no group
RESTART_KINDS = ("judge", "embed", "trainer")


class RunError(Exception):
    """A run folder or setting that the launch cannot work with; the message names it and what is wrong."""


NO_FLOCK_ERRNOS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)  # Lustre without -o flock, some NFS
EXCL_LOCK_STALE_S = 3600.0  # an O_EXCL lock file older than this is a crashed job's (the lock is held for seconds)
_warned_no_flock: set[str] = set()


def _excl_lock_stale(path: Path) -> bool:
    """Whether the lock file's holder (``host pid`` inside) was on this host and is gone, or the file is old."""
    try:
        host, pid = [*path.read_text(errors="replace").split(), "", ""][:2]
        if time.time() - path.stat().st_mtime > EXCL_LOCK_STALE_S:
            return True
        if host == socket.gethostname() and pid.isdigit():
            os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


@contextlib.contextmanager
def run_lock(run_dir: Path, wait_s: float = 600.0) -> Iterator[None]:
    """Exclusive lock on the run's bookkeeping: ``flock`` on ``.runlog.lock``, or, where the file system refuses
    ``flock``, the O_EXCL lock file ``.runlog.lock.excl`` (docs/cluster.md, "Run lock without flock")."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".runlog.lock", "w") as f:  # closing the file releases the flock
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in NO_FLOCK_ERRNOS:
                raise
            why = errno.errorcode.get(e.errno, str(e.errno))
        else:
            yield
            return
    excl = run_dir / ".runlog.lock.excl"
    if str(run_dir) not in _warned_no_flock:
        _warned_no_flock.add(str(run_dir))
        print(
            f"warning: flock is not supported on {run_dir} ({why}: Lustre mounted without -o flock?); "
            f"locking the run with the O_EXCL lock file {excl} instead",
            file=sys.stderr,
            flush=True,
        )
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(excl, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            if _excl_lock_stale(excl):
                excl.unlink(missing_ok=True)
            elif time.monotonic() < deadline:
                time.sleep(0.2)
            else:
                msg = f"another job of this run has held this lock for over {wait_s:g}s"
                raise RunError(f"{excl}: {msg}; if no job of the run is running, delete the file") from None
    try:
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        os.close(fd)
        yield
    finally:
        excl.unlink(missing_ok=True)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def sha256_file(path: Path) -> str:
    with open_regular(path) as f:  # a regular file only: a FIFO named as the recipe is never waited on
        return hashlib.file_digest(f, "sha256").hexdigest()
