"""iptables rulesets as the kernel holds them, read with the tools' own
`iptables-nft-save` / `iptables-legacy-save` and parsed into a typed model.

(nft_rules.py decodes iptables-nft's rules into the same model straight from
the kernel where it knows every rule; the tool reads the rest.)

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
from dataclasses import dataclass, field

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
TOOLS = {"ip": "iptables", "ip6": "ip6tables"}      # per family
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
        """The rule as iptables-save prints it, quoting included (parse_rule
        reads it back)."""
        words = ["-A", self.chain]
        for match in self.matches:
            if not match.option:
                words += ["-m", match.module]
                continue
            words += (["!"] if match.negated else []) + [match.option] + [_saved(match.option, v) for v in match.values]
        if self.target:
            words += ["-g" if self.goto else "-j", self.target]
            option = ""
            for value in self.target_options:
                words.append(_saved(option, value))
                option = value
        return " ".join(words)


# options whose value iptables prints with xtables_save_string (free text);
# every other value it prints as it is
_STRING_OPTIONS = frozenset({"--comment", "--log-prefix", "--nflog-prefix"})
_UNQUOTED = frozenset("_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _saved(option: str, value: str) -> str:
    """A value as iptables-save prints it: free text as xtables_save_string
    does (bare when it is all letters, digits, `_` and `-`; else in double
    quotes, `"`, `\\` and `'` escaped), anything else as it is — or in shell
    quotes where a word could not be read back otherwise."""
    if option in _STRING_OPTIONS:
        if value and set(value) <= _UNQUOTED:
            return value
        return '"' + "".join("\\" + c if c in "\"\\'" else c for c in value) + '"'
    return value if value and not any(c in value for c in " \t\"'\\") else shlex.quote(value)


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
    """One backend's tables of one family: iptables' (IPv4) or ip6tables'."""

    # "nft" or "legacy"; a raw/mangle PREROUTING view's: "nft raw", ...; a
    # native chain's: "family table chain"
    backend: str
    tables: tuple[IptTable, ...] = ()
    incompatible: tuple[str, ...] = ()  # tables the tool could not express (native nft)
    family: str = "ip"                 # "ip" (iptables) or "ip6" (ip6tables)
    # "kernel": decoded from the kernel's own answer (nft_rules.py, xt_blob.py);
    # "": the save tool's output, parsed, and `undecoded` says why the
    # decoders left it to the tool. Not part of equality: the same rules read
    # either way are the same rules (a read that fell back once, e.g. while
    # commits kept coming, must not look like a ruleset change)
    source: str = field(default="", compare=False)
    undecoded: str = field(default="", compare=False)
    # A native nf_tables base chain's rules, read into this model
    # (nft_forward.py): its table, "family name", and the base chain they are
    # evaluated from (one such Ruleset per base chain); iptables': "", FORWARD
    native: str = ""
    entry: str = "FORWARD"
    priority: int = 0                  # its hook's (iptables' filter table: 0)
    hook: str = "forward"              # "prerouting" or "forward" (nft_forward.py, scope.py)
    # iptables': the table whose `entry` chain judges the packet (scope.py's
    # prerouting views of raw and mangle: backend "nft raw", "legacy mangle")
    table_name: str = "filter"

    def reading(self) -> str:
        """How these rules were read, for `linuxfp graph`."""
        if self.source == "kernel":
            return f"{self.tool}: rules decoded from the kernel"
        reason = f" (not decoded: {self.undecoded})" if self.undecoded else ""
        return f"{self.tool}: rules read with {self.tool}-save{reason}"

    @property
    def tool(self) -> str:
        """The command that manages these rules: iptables-nft, ip6tables-legacy, ...
        (a native table's: nft, and the table)"""
        if self.native:
            return f"nft {self.native}"
        tool = f"{TOOLS[self.family]}-{self.backend.partition(' ')[0]}"
        return tool if self.table_name == "filter" else f"{tool} -t {self.table_name}"

    @property
    def forward_table(self) -> IptTable | None:
        """The table whose `entry` chain a forwarded packet is judged by."""
        return self.tables[0] if self.native else self.table(self.table_name)

    def table(self, name: str) -> IptTable | None:
        return next((t for t in self.tables if t.name == name), None)


def remembered_rule(chain: str, position: int, content: object, known: dict, used: dict | None,
                    decode) -> IptRule:
    """A decoded rule by its content (nft_rules.py, xt_blob.py): what an
    earlier read decoded of the same content, at this chain and position,
    else decode(). `used` collects this read's rules for the next, decoded
    or known (one known but not handed on would be decoded again). A rule that
    matches a set names it by index, resolved when decoded: such rules are
    decoded every time."""
    remembered = known.get(content)
    if remembered is not None:
        if used is not None:
            used[content] = remembered      # (for the read after next too)
        matches, target, options, goto, words = remembered
        return IptRule(chain, position, matches, target, options, goto, f"-A {chain}{words}")
    rule = decode()
    if used is not None and not any(m.module == "set" for m in rule.matches):
        used[content] = (rule.matches, rule.target, rule.target_options, rule.goto, rule.text[len(f"-A {chain}"):])
    return rule


class ParseError(ValueError):
    pass


_BENIGN_COMMENTS = ("# Generated by ", "# Completed on ")
# iptables-nft-save pointing at the other backend, which is read on its own
_BENIGN_WARNINGS = ("# Warning: iptables-legacy tables present", "# Warning: ip6tables-legacy tables present")


def parse_save(text: str, backend: str, family: str = "ip") -> Ruleset:
    """iptables-save (or ip6tables-save) output → Ruleset."""
    tables: list[IptTable] = []
    incompatible: list[str] = []
    table: str | None = None
    chains: dict[str, tuple[str | None, list[IptRule]]] = {}
    for number, raw in enumerate(text.split("\n"), 1):      # (splitlines() would split a name at \x1c)
        line = raw.strip(" \t\r")
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith(_BENIGN_COMMENTS):
                continue
            # iptables-nft-save: "# Table `filter' is incompatible, use 'nft'
            # tool." or "# Table `filter' contains incompatible base-chains,
            # use 'nft' tool to list them." (it then lists the table without
            # them). Any other remark is taken as one too: what the tool
            # left out is unknown.
            if "`" in line and "'" in line.split("`", 1)[1]:
                incompatible.append(line.split("`", 1)[1].split("'", 1)[0])
            else:
                incompatible.append(line.lstrip("# "))
            continue
        if line.startswith("*"):
            table, chains = line[1:], {}
        elif table is None:
            raise ParseError(f"line {number}: {line!r} outside a table")
        elif line.startswith(":"):
            name, policy = ([word for word in line[1:].replace("\t", " ").split(" ") if word] + ["-"])[:2]
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
        else:
            raise ParseError(f"line {number}: cannot read {line!r}")
    if table is not None:
        raise ParseError(f"table {table!r} has no COMMIT")
    return Ruleset(backend, tuple(tables), tuple(incompatible), family)


def _at_position(rule: IptRule, position: int) -> IptRule:
    return IptRule(rule.chain, position, rule.matches, rule.target, rule.target_options, rule.goto, rule.text)


_BUILTIN_OPTIONS = {"-s": "-s", "--source": "-s", "-d": "-d", "--destination": "-d",
                    "-i": "-i", "--in-interface": "-i", "-o": "-o", "--out-interface": "-o",
                    "-p": "-p", "--protocol": "-p", "-f": "-f", "--fragment": "-f"}


def parse_rule(line: str) -> IptRule:
    """One `-A CHAIN ...` line."""
    words = split_words(line)
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
        arity = ARITY.get(word)
        if arity is not None:
            # a value may look like an option or "!" (`--comment -f`)
            values, i = words[i:i + arity], i + arity
            if len(values) != arity:
                raise ParseError(f"{line!r}: {word} needs {arity} value(s)")
        else:
            while i < len(words) and not _is_option(words[i]):
                values.append(words[i])
                i += 1
        if word in _BUILTIN_OPTIONS:
            matches.append(Match("", _BUILTIN_OPTIONS[word], tuple(values), negate))
        else:
            matches.append(Match(module, word, tuple(values), negate))
        negate = False
    return IptRule(chain, 0, tuple(matches), target, tuple(target_options), goto, line)


def split_words(line: str) -> list[str]:
    """The words of a rule line, quoted as iptables-save quotes them
    (xtables_save_string: double quotes, inside which a backslash escapes
    `"`, `\\` and `'`; iptables-restore takes a backslash as escaping any
    character) or as save_line does (shlex.quote's single quotes)."""
    if not any(c in line for c in "\"'\\"):
        # (not str.split(): \x1c is no space here)
        return [word for word in line.replace("\t", " ").split(" ") if word]
    words: list[str] = []
    word: list[str] = []
    started, quote, escaped = False, "", False
    for char in line:
        if escaped:
            word.append(char)
            escaped = False
        elif quote == "'":
            if char == "'":
                quote = ""
            else:
                word.append(char)
        elif char == "\\":
            escaped = started = True
        elif char == '"' or (char == "'" and not quote):
            quote = "" if quote else char
            started = True
        elif char in " \t" and not quote:
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(char)
            started = True
    if quote or escaped:
        raise ParseError(f"{line!r}: no closing quotation")
    if started:
        words.append("".join(word))
    return words


# How many values options take (iptables-save prints one word per value,
# quoted only where it has spaces): read exactly that many, whatever they
# look like. Options not listed take the words up to the next option.
ARITY = {"-s": 1, "--source": 1, "-d": 1, "--destination": 1, "-i": 1, "--in-interface": 1,
         "-o": 1, "--out-interface": 1, "-p": 1, "--protocol": 1, "-f": 0, "--fragment": 0,
         "--comment": 1, "--sport": 1, "--dport": 1, "--source-port": 1, "--destination-port": 1,
         "--sports": 1, "--dports": 1, "--ports": 1, "--source-ports": 1, "--destination-ports": 1,
         "--icmp-type": 1, "--mark": 1, "--ctstate": 1, "--state": 1, "--match-set": 2, "--tcp-flags": 2,
         "--syn": 0, "--tcp-option": 1, "--limit": 1, "--limit-burst": 1, "--length": 1, "--ttl-gt": 1,
         "--ttl-lt": 1, "--ttl-eq": 1, "--src-type": 1, "--dst-type": 1, "--pkt-type": 1, "--mode": 1,
         "--probability": 1, "--every": 1, "--packet": 1}


def _is_option(word: str) -> bool:
    return word == "!" or (word.startswith("-") and len(word) > 1 and not word[1].isdigit())


def save_command(backend: str, family: str = "ip") -> str:
    return f"{TOOLS[family]}-{backend}-save"


def read_ruleset(backend: str, family: str = "ip") -> Ruleset:
    """The backend's tables of `family` ("ip": iptables, "ip6": ip6tables),
    read in the calling thread's network namespace (a forked child inherits
    it). Raises FileNotFoundError naming the package when the tool is
    missing."""
    command = save_command(backend, family)
    path = shutil.which(command) or shutil.which(command, path="/usr/sbin:/sbin")
    if path is None:
        raise FileNotFoundError(f"{command} not found (Debian package {PACKAGE})")
    # bytes, decoded here: text mode's universal newlines would end a line
    # at a \r inside a chain's name or a comment
    raw = subprocess.run([path], capture_output=True, timeout=30)
    done = subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode("utf-8", "surrogateescape"),
                                       raw.stderr.decode("utf-8", "replace"))
    complaints = [line for line in done.stderr.splitlines()
                  if line.strip() and not line.startswith(_BENIGN_WARNINGS)]
    if done.returncode != 0 or complaints:
        # e.g. a rule it cannot translate back: the rest would be a lie
        raise OSError(f"{command} failed ({done.returncode}): {done.stderr.strip()}")
    version = _tool_version(done.stdout)
    if backend == "nft" and version is not None and version < MIN_NFT_VERSION:
        raise OSError(f"{command} is version {'.'.join(map(str, version))}: before "
                      f"{'.'.join(map(str, MIN_NFT_VERSION))} it prints matches it cannot decode as broader "
                      "rules, without a word")
    return parse_save(done.stdout, backend, family)


# iptables-nft-save from 1.8.9 on refuses what it cannot translate back
# (and says when it leaves base chains out); older ones dropped it silently.
MIN_NFT_VERSION = (1, 8, 9)


def _tool_version(text: str) -> tuple[int, ...] | None:
    """The version in "# Generated by iptables-nft-save v1.8.9 (nf_tables) ..."."""
    for line in text.splitlines():
        if line.startswith("# Generated by ") and " v" in line:
            word = line.split(" v", 1)[1].split()[0]
            try:
                return tuple(int(part) for part in word.split("."))
            except ValueError:
                return None
    return None
