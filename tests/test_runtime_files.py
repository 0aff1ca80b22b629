"""The namespace's pid file as the lock that says a controller runs."""
from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

from controller.runtime_files import ControllerLock, ReclaimLock, lock_pid_file, running_controller


def _layout(tmp_path):
    return SimpleNamespace(run_dir=str(tmp_path / "ns-1"), pid_file=str(tmp_path / "ns-1" / "controller.pid"))


def test_a_lock_won_on_an_unlinked_pid_file_is_taken_again(tmp_path):
    """A stopping controller, a reclaim and `linuxfp detach` unlink the pid
    file while they hold its lock: a controller that was waiting for it must
    end up holding the file at the path, or the next `running_controller()`
    would say none runs (and a second one could start)."""
    layout = _layout(tmp_path)
    holder = lock_pid_file(layout)
    assert holder is not None and ReclaimLock.take(layout) is None
    got: dict = {}
    waiter = threading.Thread(target=lambda: got.setdefault("lock", ControllerLock(layout)))
    waiter.start()
    time.sleep(0.2)
    os.unlink(layout.pid_file)      # as the holder removes the run files ...
    os.close(holder)                # ... and lets go
    waiter.join(5)
    lock = got["lock"]
    try:
        assert os.fstat(lock.fd).st_ino == os.stat(layout.pid_file).st_ino
        assert running_controller(layout) == os.getpid()
    finally:
        lock.release()
    assert running_controller(layout) is None
