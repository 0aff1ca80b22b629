"""Results of pure functions of a snapshot, reused while every snapshot
field they read is the same object.

The state layer hands an unchanged field on to the next snapshot as the
same object, so "the same object" means "unchanged". What a computation
depends on is not declared but recorded: it runs against a view of the
snapshot that notes each field it reads, so a key cannot miss a snapshot
field. (A computation must read nothing that changes but the snapshot and
its arguments: a node's contract.) A remembered computation that asks
another one inherits what that one read, whether it was computed or
reused, because the inner check reads its fields through the outer view."""
from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

# name -> {args: (the fields read, as (name, object) pairs, the result)}.
# One name's results are dropped together when any of them is found stale:
# a snapshot changed, and the arguments asked about before (interfaces, say)
# may be gone for good.
_results: dict[str, dict[Hashable, tuple[tuple[tuple[str, Any], ...], Any]]] = {}


class _Reads:
    """A snapshot as a computation sees it, noting the fields it reads.
    Methods and properties of the snapshot's class run against the view, so
    the fields they read are noted too. Each name is looked up once: later
    reads find it in the view's own attributes. (A method is bound to a
    weak reference to the view: bound to the view itself and kept there, it
    would hold the view, and with it an old snapshot, in a cycle only the
    collector frees.)"""

    def __init__(self, snapshot):
        cls = snapshot._snapshot_class if isinstance(snapshot, _Reads) else type(snapshot)
        self.__dict__.update(_snapshot=snapshot, _snapshot_class=cls, _read={})

    def __getattr__(self, name: str):
        declared = _code_of(self._snapshot_class, name)
        if isinstance(declared, property):
            value = declared.fget(self)
        elif declared is not None:
            value = types.MethodType(declared, weakref.proxy(self))
        else:
            value = getattr(self._snapshot, name)
            self._read[name] = value
        self.__dict__[name] = value
        return value

    def __setattr__(self, name, value):
        raise AttributeError(f"a snapshot is immutable ({name})")


# (class, name) -> the property or function the class declares by that name,
# None for a field: looked up once (inspect.getattr_static is slow).
_declared: dict[tuple[type, str], Any] = {}


def _code_of(cls: type, name: str):
    key = (cls, name)
    if key not in _declared:
        declared = inspect.getattr_static(cls, name, None)
        _declared[key] = declared if isinstance(declared, property) or inspect.isfunction(declared) else None
    return _declared[key]


def remembered(name: str, snapshot, compute: Callable[..., T], *args: Hashable) -> T:
    """compute(snapshot, *args), reused while every field it read from the
    snapshot is the same object. `args` must determine the rest of what
    compute reads (an interface's index, not its Link, is the argument when
    the Link comes from the snapshot's links)."""
    known = _results.get(name)
    entry = known.get(args) if known is not None else None
    if entry is not None:
        for field, value in entry[0]:
            if getattr(snapshot, field) is not value:
                _results.pop(name, None)
                break
        else:
            return entry[1]
    view = _Reads(snapshot)
    result = compute(view, *args)
    _results.setdefault(name, {})[args] = (tuple(view._read.items()), result)
    return result


def fields_read(name: str, *args: Hashable) -> frozenset[str] | None:
    """The snapshot fields the remembered result for (`name`, `args`) read
    (None: nothing remembered). For tests."""
    entry = _results.get(name, {}).get(args)
    return None if entry is None else frozenset(field for field, _ in entry[0])


def forget_stale(snapshot) -> None:
    """Drop what `snapshot` made stale, so that nothing keeps an old
    snapshot's fields alive once no one asks for it again (a deleted
    bridge's blocker, the address types once no rule reads them)."""
    for name, known in list(_results.items()):
        for reads, _ in list(known.values()):
            if any(getattr(snapshot, field) is not value for field, value in reads):
                _results.pop(name, None)
                break


def forget() -> None:
    """Drop every remembered result (each test starts without any)."""
    _results.clear()
