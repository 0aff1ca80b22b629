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


def test_a_stopping_controller_leaves_its_successors_pid_file_alone(tmp_path):
    """A controller stopping removes its run files (the pid file among them)
    and then lets go of the lock: a successor may hold the next pid file by
    then, which the release must not remove."""
    layout = _layout(tmp_path)
    stopping = ControllerLock(layout)
    got: dict = {}
    waiter = threading.Thread(target=lambda: got.setdefault("lock", ControllerLock(layout)))
    waiter.start()
    time.sleep(0.2)
    os.unlink(layout.pid_file)           # remove_run_dir()
    time.sleep(0.1)                      # the successor makes and locks the next file
    stopping.release()
    waiter.join(5)
    successor = got["lock"]
    try:
        assert os.path.exists(layout.pid_file)
        assert running_controller(layout) == os.getpid()
    finally:
        successor.release()


def test_a_controller_of_a_pid_namespace_out_of_view_is_never_named_by_its_own_number(tmp_path):
    """The pid file says which pid namespace numbers the controller: one in
    a container of its own may be pid 1 there, another process here — a
    `linuxfp detach` that signalled that number would stop the host's init.
    Unnamed (-1) when no process in view is it; the pid alone (older
    versions' files) is taken as this namespace's."""
    layout = _layout(tmp_path)
    lock = ControllerLock(layout)
    try:
        ours = os.stat("/proc/self/ns/pid").st_ino
        assert open(layout.pid_file).read().split() == [str(os.getpid()), str(ours)]
        for written, named in ((f"1 {ours + 1}", -1), (f"{os.getpid()}", os.getpid()),
                               (f"{os.getpid()} {ours}", os.getpid())):
            os.pwrite(lock.fd, f"{written}\n".ljust(40).encode(), 0)
            assert running_controller(layout) == named, written
    finally:
        lock.release()
