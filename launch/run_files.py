"""Files and small helpers every part of the run bookkeeping shares: the names EasyR1 and the reward write,
:class:`RunError`, atomic JSON, the run lock."""

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
from typing import Any

from core.io import atomic_write_json as _atomic_write_json
from core.io import open_regular

CHECKPOINT_TRACKER = "checkpoint_tracker.json"
"""EasyR1's tracker file name in ``trainer.save_checkpoint_path`` (``verl/utils/checkpoint``)."""
STEP_DIR_RE = re.compile(r"global_step_(0|[1-9][0-9]{0,17})$")
"""EasyR1's step folder ``global_step_N`` as it writes it (``f"global_step_{step}"``: no leading zero, so
``global_step_003`` is not step 3's folder: EasyR1 would look for ``global_step_3`` and start from 0)."""
SHARD_RE = re.compile(r"(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
LOGGED_FILES = ("experiment_log.jsonl", "generations.log")
"""Files EasyR1's ``file`` logger truncates at every start; each job segment gets its own copy."""
REWARD_COUNTERS = "reward_counters.jsonl"
"""Per-segment file the reward may append counters to (env ``QUOTECITE_METRICS_DIR`` names the folder)."""
REWARD_BATCHES = "reward_batches.jsonl"
"""Per-segment file of the reward's training-batch records (``reward.pipeline.TrainBatchTracker``): the n-th
record of a segment is the batch of step ``resume_step + n``."""
SERVER_OUTAGE = "server_outage.json"
"""Written into the segment by the reward when a judge/embedder outage outlasted ``judge_outage_s``."""
NO_GROUP_KEPT = "no_group_kept.json"
"""Written into the segment by the reward when an attempt of EasyR1's online filter kept no group (EasyR1 then
raises ``No sample is kept after filtering``): the run stops with one line instead of requeueing."""
RESTART_KINDS = ("judge", "embed", "trainer")
"""What the launch restarts within a job: a server process that died, or the trainer (with both servers) after
it stopped on a server outage."""
INCOMPLETE_DIR = "incomplete"


class RunError(Exception):
    """A run folder or setting that the launch cannot work with; the message names it and what is wrong."""


# --------------------------------------------------------------------------------------------- small helpers
def atomic_write_json(path: Path, obj: Any) -> None:
    _atomic_write_json(path, obj, indent=2)


NO_FLOCK_ERRNOS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)
"""What ``flock`` raises where the file system has no such locks (Lustre mounted without ``-o flock``, some NFS)."""
EXCL_LOCK_WAIT_S = 600.0
"""How long :func:`run_lock` waits for an O_EXCL lock file held by another job before it gives up."""
EXCL_LOCK_STALE_S = 3600.0
"""An O_EXCL lock file older than this is a crashed holder's (the bookkeeping holds the lock for seconds)."""


def _excl_lock_stale(path: Path) -> bool:
    """Whether the O_EXCL lock file ``path`` is left over: its holder (``host pid`` inside) was on this host and is
    gone, or the file is older than :data:`EXCL_LOCK_STALE_S`."""
    try:
        text = path.read_text(errors="replace").split()
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    if age > EXCL_LOCK_STALE_S:
        return True
    if len(text) >= 2 and text[0] == socket.gethostname() and text[1].isdigit():
        try:
            os.kill(int(text[1]), 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
    return False


@contextlib.contextmanager
def _excl_lock(path: Path, wait_s: float) -> Iterator[None]:
    """A lock file created with ``O_CREAT | O_EXCL`` (atomic on every shared file system), removed on exit."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            if _excl_lock_stale(path):
                path.unlink(missing_ok=True)
                continue
            if time.monotonic() >= deadline:
                raise RunError(f"{path}: another job of this run has held this lock for over {wait_s:g}s; if no job "
                               "of the run is running, delete the file") from None  # fmt: skip
            time.sleep(0.2)
    try:
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        os.close(fd)
        yield
    finally:
        path.unlink(missing_ok=True)


_warned_no_flock: set[str] = set()


@contextlib.contextmanager
def run_lock(run_dir: Path, wait_s: float = EXCL_LOCK_WAIT_S) -> Iterator[None]:
    """Exclusive lock on the run folder (two jobs of one run never update its bookkeeping at once): ``flock`` on
    ``.runlog.lock``; where the file system refuses ``flock`` (:data:`NO_FLOCK_ERRNOS`: Lustre mounted without
    ``-o flock``), an O_EXCL lock file ``.runlog.lock.excl`` instead, saying so once on stderr."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".runlog.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
            why = None
        except OSError as e:
            if e.errno not in NO_FLOCK_ERRNOS:
                raise
            why = errno.errorcode.get(e.errno, str(e.errno))
        if why is None:
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
            return
    excl = run_dir / ".runlog.lock.excl"
    if str(run_dir) not in _warned_no_flock:
        _warned_no_flock.add(str(run_dir))
        print(f"warning: flock is not supported on {run_dir} ({why}: Lustre mounted without -o flock?); locking the "
              f"run with the O_EXCL lock file {excl} instead", file=sys.stderr, flush=True)  # fmt: skip
    with _excl_lock(excl, wait_s):
        yield


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:  # a regular file only: a FIFO named as the recipe is never waited on
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def deep_merge(base: dict, extra: dict) -> dict:
    """``extra`` merged into a copy of ``base``; nested dicts merge key by key, other values are replaced."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out
