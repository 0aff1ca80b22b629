"""iptables rulesets as the kernel holds them, read with the tools' own
`iptables-nft-save` / `iptables-legacy-save` and parsed into a typed model.

The save format is the one both backends print the same way (the nft
backend translates its expressions back into matches), so one parser reads
both. The model keeps every match as printed, with its module and negation:
what a node can evaluate is its own business, and a match it cannot is
reported with the rule's text, never dropped.

Reading is cheap to repeat: a backend is re-read only when its fingerprint
changed (the nf_tables generation id; the x_tables blob), so the 1 s poll of
legacy rules costs a getsockopt, not a process.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass

from .model import _JsonMixin

# Built-in chains of each x_tables table, IPv4.
BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}
BACKENDS = ("nft", "legacy")
PACKAGE = "iptables"


@dataclass(frozen=True, slots=True)
class Match(_JsonMixin):
    """One option of a rule: `module` is "" for the built-in part
    (-s -d -i -o -p -f), else the -m module it belongs to."""

    module: str
    option: str                        # "" for the `-m module` word itself
    values: tuple[str, ...] = ()
    negated: bool = False

    def __str__(self) -> str:
        if not self.option:
            return f"-m {self.module}"
        words = (["!"] if self.negated else []) + [self.option] + [shlex.quote(v) for v in self.values]
        if self.module:
            words = ["-m", self.module] + words
        return " ".join(words)


@dataclass(frozen=True, slots=True)
class IptRule(_JsonMixin):
    chain: str
    position: int                      # 1-based, as `iptables -L --line-numbers`
    matches: tuple[Match, ...]
    target: str                        # ACCEPT, DROP, RETURN, a chain, LOG, ...; "" for none
    target_options: tuple[str, ...] = ()
    goto: bool = False                 # -g CHAIN rather than -j CHAIN
    text: str = ""                     # the save line, for messages

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.module for m in self.matches if m.module))

    def save_line(self) -> str:
        """The rule as iptables-save prints it (parse_rule reads it back)."""
        words = ["-A", self.chain]
        for match in self.matches:
            if not match.option:
                words += ["-m", match.module]
                continue
            words += (["!"] if match.negated else []) + [match.option] + [shlex.quote(v) for v in match.values]
        if self.target:
            words += ["-g" if self.goto else "-j", self.target] + [shlex.quote(v) for v in self.target_options]
        return " ".join(words)


@dataclass(frozen=True, slots=True)
class Chain(_JsonMixin):
    name: str
    policy: str | None                 # None for user-defined chains
    rules: tuple[IptRule, ...] = ()


@dataclass(frozen=True, slots=True)
class IptTable(_JsonMixin):
    name: str
    chains: tuple[Chain, ...]

    def chain(self, name: str) -> Chain | None:
        return next((c for c in self.chains if c.name == name), None)


@dataclass(frozen=True, slots=True)
class Ruleset(_JsonMixin):
    """One backend's IPv4 tables."""

    backend: str                       # "nft" or "legacy"
    tables: tuple[IptTable, ...] = ()
    incompatible: tuple[str, ...] = ()  # tables the tool could not express (native nft)

    def table(self, name: str) -> IptTable | None:
        return next((t for t in self.tables if t.name == name), None)


class ParseError(ValueError):
    pass


def parse_save(text: str, backend: str) -> Ruleset:
    """iptables-save output → Ruleset."""
    tables: list[IptTable] = []
    incompatible: list[str] = []
    table: str | None = None
    chains: dict[str, tuple[str | None, list[IptRule]]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            # iptables-nft-save: "# Table `filter' is incompatible, use 'nft' tool."
            if "is incompatible" in line and "`" in line:
                incompatible.append(line.split("`", 1)[1].split("'", 1)[0])
            continue
        if line.startswith("*"):
            table, chains = line[1:], {}
        elif table is None:
            raise ParseError(f"line {number}: {line!r} outside a table")
        elif line.startswith(":"):
            name, policy = (line[1:].split() + ["-"])[:2]
            chains[name] = (None if policy == "-" else policy, [])
        elif line == "COMMIT":
            tables.append(IptTable(table, tuple(Chain(n, p, tuple(r)) for n, (p, r) in chains.items())))
            table = None
        elif line.startswith("-A "):
            rule = parse_rule(line)
            if rule.chain not in chains:
                raise ParseError(f"line {number}: rule for undeclared chain {rule.chain!r}")
            rules = chains[rule.chain][1]
            rules.append(_at_position(rule, len(rules) + 1))
        elif line.startswith("["):
            continue   # counters of a following rule (-c)
        else:
            raise ParseError(f"line {number}: cannot read {line!r}")
    if table is not None:
        raise ParseError(f"table {table!r} has no COMMIT")
    return Ruleset(backend, tuple(tables), tuple(incompatible))


def _at_position(rule: IptRule, position: int) -> IptRule:
    return IptRule(rule.chain, position, rule.matches, rule.target, rule.target_options, rule.goto, rule.text)


_BUILTIN_OPTIONS = {"-s": "-s", "--source": "-s", "-d": "-d", "--destination": "-d",
                    "-i": "-i", "--in-interface": "-i", "-o": "-o", "--out-interface": "-o",
                    "-p": "-p", "--protocol": "-p", "-f": "-f", "--fragment": "-f"}


def parse_rule(line: str) -> IptRule:
    """One `-A CHAIN ...` line."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ParseError(f"{line!r}: {exc}") from None
    if len(words) < 2 or words[0] != "-A":
        raise ParseError(f"{line!r}: not a rule")
    chain = words[1]
    matches: list[Match] = []
    module = ""
    negate = False
    target, goto, target_options = "", False, []
    i = 2
    while i < len(words):
        word = words[i]
        if word == "!":
            negate = True
            i += 1
            continue
        if word in ("-j", "--jump", "-g", "--goto"):
            if i + 1 >= len(words):
                raise ParseError(f"{line!r}: {word} without a target")
            target, goto = words[i + 1], word in ("-g", "--goto")
            target_options = words[i + 2:]
            break
        if word in ("-m", "--match"):
            module = words[i + 1]
            matches.append(Match(module, ""))   # the module itself, options or not
            i += 2
            continue
        if word in ("-c", "--set-counters"):
            i += 3
            continue
        if not word.startswith("-"):
            raise ParseError(f"{line!r}: unexpected {word!r}")
        values = []
        i += 1
        while i < len(words) and not _is_option(words[i]):
            values.append(words[i])
            i += 1
        if word in _BUILTIN_OPTIONS:
            matches.append(Match("", _BUILTIN_OPTIONS[word], tuple(values), negate))
        else:
            matches.append(Match(module, word, tuple(values), negate))
        negate = False
    return IptRule(chain, 0, tuple(matches), target, tuple(target_options), goto, line)


def _is_option(word: str) -> bool:
    return word == "!" or (word.startswith("-") and len(word) > 1 and not word[1].isdigit())


def save_command(backend: str) -> str:
    return f"iptables-{backend}-save"


def read_ruleset(backend: str) -> Ruleset:
    """The backend's tables, read in the calling thread's network namespace
    (a forked child inherits it). Raises FileNotFoundError naming the package
    when the tool is missing."""
    command = save_command(backend)
    path = shutil.which(command) or shutil.which(command, path="/usr/sbin:/sbin")
    if path is None:
        raise FileNotFoundError(f"{command} not found (Debian package {PACKAGE})")
    done = subprocess.run([path], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"{command} failed ({done.returncode}): {done.stderr.strip()}")
    return parse_save(done.stdout, backend)
