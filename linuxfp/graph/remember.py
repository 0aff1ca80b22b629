"""Results of pure functions of a snapshot, reused while every snapshot
field they read is the same object.

The state layer hands an unchanged field on to the next snapshot as the
same object, so "the same object" means "unchanged". What a computation
depends on is not declared but recorded: it runs against a view of the
snapshot that notes each field it reads, so a key cannot miss a snapshot
field. (A computation must read nothing that changes but the snapshot and
its arguments: a node's contract.) A remembered computation that asks
another one inherits what that one read, whether it was computed or
reused — unless the inner one is remembered `by_answer`: then the outer
depends on the inner's answer (the same object: a new answer equal to
the one before is handed on as that object), not on what the inner read.
That is how one interface's decision depends on the one link it looks up
(`link_at`), or on the compiled rules, rather than on every link: the
inner is asked again when what it read changed, and its dependents are
reused while its answer is equal. Equality must then be complete: a
field left out of a result's or an item's `==` (compare=False) would let
an answer stand for one that differs in it."""
from __future__ import annotations

import inspect
import threading
import types
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

# What an answer depends on: the fields read, as (name, object) pairs, and
# the by-answer computations asked, as ((name, compute, args), answer) pairs.
_FieldsRead = tuple[tuple[str, Any], ...]
_Used = tuple[tuple[tuple[str, Callable, tuple], Any], ...]

# name -> {args: (fields read, by-answer computations asked, the result)}.
# One name's results are dropped together when any of them is found stale:
# a snapshot changed, and the arguments asked about before (interfaces, say)
# may be gone for good. Not so for by-answer names (the old answer for the
# other arguments is what an equal new one is handed on as, when they are
# asked again: forget_stale drops the stale ones) nor for remembered_each's
# (it keeps one per item).
_results: dict[str, dict[Hashable, tuple[_FieldsRead, _Used, Any]]] = {}
# Names remembered_each keeps: one entry per item, pruned by it, not by
# forget_stale (whose scan of every interface's answer at each tidy-up
# would cost what remembering them saves).
_each: set[str] = set()


class _Reads:
    """A snapshot as a computation sees it, noting the fields it reads.
    Methods and properties of the snapshot's class run against the view, so
    the fields they read are noted too. Each name is looked up once: later
    reads find it in the view's own attributes. (A method is bound to a
    weak reference to the view: bound to the view itself and kept there, it
    would hold the view, and with it an old snapshot, in a cycle only the
    collector frees.)"""

    def __init__(self, snapshot):
        self.__dict__.update(_snapshot=snapshot, _snapshot_class=type(snapshot), _read={}, _used={})

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


def remembered(name: str, snapshot, compute: Callable[..., T], *args: Hashable, by_answer: bool = False) -> T:
    """compute(snapshot, *args), reused while every field it read from the
    snapshot is the same object (and every by-answer computation it asked
    answers the same object). `args` must determine the rest of what
    compute reads: an interface's index when compute looks its Link up, or
    the Link itself (compared by value) when compute reads it from there.

    by_answer: a remembered computation that asks this one depends on its
    answer, not on what it read; a new answer equal to the one before is
    handed on as that same object, so its dependents are reused."""
    return _asked(name, snapshot, compute, args, by_answer)


def remembered_each(name: str, snapshot, compute: Callable[..., T], items: Iterable[Hashable],
                    *args: Hashable, key: Callable[[Any], Hashable] | None = None) -> list[T]:
    """[remembered(name, snapshot, compute, item, *args) for item in items],
    where one answer going stale drops only itself, and the answers for
    items no longer among `items` are forgotten (per interface: a new
    interface costs its own answer, not everyone's). `key`: what tells
    items apart (an interface's index), hashed instead of the item; an
    answer is reused for an item equal to the one it was worked out for
    (compute saw that one).

    Asked from inside a remembered computation, that one depends on what
    every item's answer depends on (a few fields and answers, shared by
    most items: checked once, not once per item)."""
    _each.add(name)
    root = snapshot._snapshot if isinstance(snapshot, _Reads) else snapshot
    asked = _asked_of(root)
    if key is None:
        unwrapped = compute
    else:
        def unwrapped(view, item, *rest):
            return compute(view, item.item, *rest)
    known = _results.setdefault(name, {})
    out, keys, reads, used = [], [], {}, {}
    for item in items:
        k = (_Item(key(item), item) if key is not None else item, *args)
        keys.append(k)
        entry = known.get(k)
        if entry is None or not _fresh(entry, root, asked):
            known.pop(k, None)
            entry = _answer(name, root, unwrapped, k, False)[1]
        out.append(entry[2])
        reads.update(entry[0])
        used.update(entry[1])
    if len(known) > len(keys):
        _results[name] = {k: entry for k in keys if (entry := known.get(k)) is not None}
    if isinstance(snapshot, _Reads):
        snapshot._read.update(reads)
        snapshot._used.update(used)
    return out


class _Item:
    """An item of remembered_each, hashed by its key, equal to another for
    the same key and an equal item (the same object, usually)."""
    __slots__ = ("key", "item")

    def __init__(self, key, item):
        self.key, self.item = key, item

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Item) and self.key == other.key and (self.item is other.item or
                                                                       self.item == other.item)


def _asked(name: str, snapshot, compute, args: tuple, by_answer: bool):
    """The answer; asked through a view (from inside another remembered
    computation), what it depends on is noted there too."""
    if not isinstance(snapshot, _Reads):
        return _answer(name, snapshot, compute, args, by_answer)[0]
    if by_answer:
        # (asked again by the same computation — once per link, by a node's
        # notes — the answer it already depends on)
        key = (name, compute, args)
        known = snapshot._used.get(key, _NOTHING)
        if known is not _NOTHING:
            return known
    result, entry = _answer(name, snapshot._snapshot, compute, args, by_answer)
    if by_answer:
        snapshot._used[key] = result
    else:
        snapshot._read.update(entry[0])
        snapshot._used.update(entry[1])
    return result


def _answer(name: str, snapshot, compute, args: tuple, by_answer: bool):
    asked = _asked_of(snapshot)
    entry = asked.get((name, args))
    if entry is not None:
        return entry[2], entry
    known = _results.get(name)
    old = known.get(args) if known is not None else None
    if old is not None:
        if _fresh(old, snapshot, asked):
            asked[(name, args)] = old
            return old[2], old
        if by_answer:
            known.pop(args, None)     # (its siblings keep theirs: see _results; another thread may have)
        else:
            _results.pop(name, None)
    view = _Reads(snapshot)
    result = compute(view, *args)
    if by_answer and old is not None and result is not old[2] and result == old[2]:
        result = old[2]
    entry = (tuple(view._read.items()), tuple(view._used.items()), result)
    _results.setdefault(name, {})[args] = entry
    asked[(name, args)] = entry
    return result, entry


def _fresh(entry, snapshot, asked: dict) -> bool:
    reads, used, _ = entry
    for field, value in reads:
        if getattr(snapshot, field) is not value:
            return False
    for (name, compute, args), answer in used:
        inner = asked.get((name, args))
        if (inner[2] if inner is not None else _answer(name, snapshot, compute, args, True)[0]) is not answer:
            return False
    return True


# Per thread, the answers given for the snapshot asked about last: checked
# once per snapshot, not once per interface that asks (a metrics scrape may
# ask from another thread, about another snapshot).
_per_thread = threading.local()


def _asked_of(snapshot) -> dict:
    last = getattr(_per_thread, "snapshot", None)
    if last is None or last() is not snapshot:
        _per_thread.snapshot = weakref.ref(snapshot)
        _per_thread.answers = {}
    return _per_thread.answers


def link_at(snapshot, index: int):
    """snapshot.link(index), depended on by answer: a computation that looks
    up one link this way is reused while that link is the same, whatever
    happens to the others (`snapshot.link` reads them all)."""
    return remembered("snapshot.link", snapshot, _link, index, by_answer=True)


def _link(snapshot, index: int):
    return snapshot.link(index)


def fields_read(name: str, *args: Hashable) -> frozenset[str] | None:
    """The snapshot fields the remembered result for (`name`, `args`) read,
    with those the by-answer computations it asked read (None: nothing
    remembered). For tests."""
    entry = _results.get(name, {}).get(args)
    if entry is None:
        return None
    fields = {field for field, _ in entry[0]}
    for (inner, _compute, inner_args), _answer_ in entry[1]:
        fields |= fields_read(inner, *inner_args) or set()
    return frozenset(fields)


def forget_stale(snapshot) -> None:
    """Drop what `snapshot` made stale, so that nothing keeps an old
    snapshot's fields alive once no one asks for it again (a deleted
    bridge's blocker, the address types once no rule reads them): what read
    a field that changed, and then what asked for an answer dropped or
    changed (nothing is computed here). remembered_each's answers are its
    own to prune."""
    _per_thread.snapshot, _per_thread.answers = None, {}    # (its answers hold fields too)
    while True:
        dropped = False
        # (copies: a metrics scrape may ask from another thread meanwhile)
        for name in [name for name in list(_results) if name not in _each]:
            known = _results.get(name, {})
            for args, (reads, used, _) in list(known.items()):
                if any(getattr(snapshot, field) is not value for field, value in reads) or \
                        any(_answered(inner, inner_args) is not answer for (inner, _c, inner_args), answer in used):
                    known.pop(args, None)      # (another thread may have)
                    dropped = True
            if not known:
                _results.pop(name, None)
        if not dropped:
            return


def _answered(name: str, args: tuple):
    """The answer remembered for (`name`, `args`), or _NOTHING."""
    entry = _results.get(name, {}).get(args)
    return _NOTHING if entry is None else entry[2]


_NOTHING = object()     # (None is an answer: a blocker's "nothing blocks")


def forget() -> None:
    """Drop every remembered result, and what memos kept by hand hold
    (each test, and a build meant to start from nothing, starts without
    any)."""
    _results.clear()
    _each.clear()
    _per_thread.snapshot, _per_thread.answers = None, {}
    for reset in _resets:
        reset()


def forgotten_too(reset: Callable[[], None]) -> Callable[[], None]:
    """Register `reset`, which empties a memo kept by hand (one keyed by a
    netfilter state, not a snapshot), for forget() to run too."""
    _resets.append(reset)
    return reset


_resets: list[Callable[[], None]] = []
