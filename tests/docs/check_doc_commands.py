#!/usr/bin/python3
"""The commands of README.md and docs/*.md, checked against our binaries.

Every shell command in a code block of README.md or docs/*.md (and every
inline code span that starts with one of our binaries) that runs one of our
binaries, a loadtest/ Python script or `make` is checked against the tool's
own help, read once per tool:

  - every `--flag`, `--flag=value` and `--noflag` must be a flag the binary
    lists in `--helpfull` (Abseil's list; `--help` for the Google Benchmark
    binaries, argparse's `--help` for the scripts); `--noflag` only for a
    bool flag, without a value; a non-bool flag needs a value;
  - a `build/...` path must be where the build puts that binary (and a
    `build/...` path to a binary the build does not make is an error);
  - for a tool whose help lists "Commands:" (zoomctl), the command and any
    sub-command (`snapshot create`) must be listed;
  - a value of a flag whose usage line lists its choices (zoombench's
    `--benchmarks=a|b|...`, zoomload's `--workload search|mixed|topk`) must
    be one of them (comma-separated lists item by item);
  - `make TARGET` must name a rule of the Makefile;
  - a code span of flags alone (`--sync always`) must name flags that some
    binary or loadtest/ script has.

The binaries come from a manifest CMake writes (tests/CMakeLists.txt:
BUILD/tests/doc_binaries.txt: the build directory, the build subdirectories
this configuration makes, and each binary's $<TARGET_FILE> with the sources
that define its flags). A binary that is configured but not built (under
CI=true `make test` builds only the zoom_tests target, not the benchmarks)
is checked against the ABSL_FLAG definitions of its sources instead; one in
a directory this configuration does not make (ZOOM_BUILD_BENCHMARKS=OFF) is
not checked. Both are printed as notes.

    check_doc_commands.py --manifest BUILD/tests/doc_binaries.txt [--source_dir DIR] [-v]
    check_doc_commands.py --build_dir BUILD       (the manifest under it)
    check_doc_commands.py --self-test [--build_dir BUILD | --manifest FILE]

Exits 0 when every command checks, 1 listing each stale one (file:line, what
is wrong, the command), 2 on a usage error. The self-test plants bad flags,
commands, paths and values (against a fake binary, and in the real docs'
commands against the real binaries when given the manifest) and exits 1
unless each is caught.
"""
import argparse
import difflib
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE_DIR = os.path.normpath(os.path.join(HERE, "..", ".."))

# Info strings of the fenced blocks that hold shell commands ('' = none given).
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console", "zsh"}
# Words that run the command after them.
WRAPPERS = {"sudo", "exec", "time", "env", "nohup", "nice"}
# Abseil's own flags, which --helpfull does not list.
ABSL_BUILTIN = {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
                "version", "only_check_args"}
# Scripts outside loadtest/ whose commands and flags the docs give (run
# with --help like loadtest/'s).
TEST_SCRIPTS = ("tests/cluster/fault_runner.py",)
DEBIAN_PYTHON = "/usr/bin/python3"
# Flag names the docs use as placeholders (`--flag=value`, `--noflag`).
PLACEHOLDER_FLAGS = {"flag", "noflag"}
SHELL_OPS = {";", "&&", "||", "|", "&", "(", ")", "$", "|&", ";;", "`"}
REDIRECTS = re.compile(r"^\d*(>|>>|<|<<|>&|<&|&>)$")


class Tool:
    """What one binary (or script) accepts, read from its help."""

    def __init__(self, name, kind, origin):
        self.name = name
        self.kind = kind          # "absl", "gbench", "argparse", "unchecked"
        self.origin = origin      # where the flags came from, for messages
        self.flags = {}           # name -> is_bool
        self.commands = None      # None, or {command: set(sub-commands)}
        self.choices = {}         # flag -> set of allowed values
        self.path = None          # the built binary
        self.rel_path = None      # its path under the build directory

    def bool_flag(self, name):
        return self.flags.get(name, False)


# ---------------------------------------------------------------- help output

ABSL_ENTRY = re.compile(r"^\s{2,}--([A-Za-z0-9_]+) \(")
ABSL_DEFAULT = re.compile(r"default: (.*?);\s*$")
CHOICE = re.compile(r"--([A-Za-z0-9_]+)[= ]([A-Za-z0-9_.]+(?:\|[A-Za-z0-9_.]+)+)")


_HELP = {}  # (argv) -> (output, exit code): each tool's help is read once a process


def run_help(argv, cwd):
    key = tuple(argv)
    if key not in _HELP:
        _HELP[key] = _run_help(argv, cwd)
    return _HELP[key]


def _run_help(argv, cwd):
    try:
        p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=30,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    return p.stdout.decode("utf-8", "replace"), p.returncode


def parse_absl(tool, text):
    """Abseil's --helpfull: an entry per flag, '    --name (help); default: v;'."""
    current = None
    entry = []

    def close():
        if current is not None:
            m = ABSL_DEFAULT.search(" ".join(entry))
            tool.flags[current] = bool(m) and m.group(1) in ("true", "false")

    for line in text.splitlines():
        m = ABSL_ENTRY.match(line)
        if m:
            close()
            current, entry = m.group(1), [line]
        elif current is not None and line.strip():
            entry.append(line)
        else:
            close()
            current, entry = None, []
    close()
    for f in ABSL_BUILTIN:
        tool.flags.setdefault(f, f != "helpon" and f != "helpmatch")


def parse_usage(tool, text):
    """The usage text before the flag list: 'Commands:' and '--flag a|b|c' choices."""
    usage = text.split("Flags from", 1)[0]
    lines = usage.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Commands:":
            tool.commands = {}
            for cl in lines[i + 1:]:
                if not cl.strip():
                    break
                m = re.match(r"^  ([a-z][a-z0-9-]*)(?: ([a-z][a-z0-9-]*)\b)?", cl)
                if m:
                    subs = tool.commands.setdefault(m.group(1), set())
                    if m.group(2):
                        subs.add(m.group(2))
            break
    for m in CHOICE.finditer(usage):
        tool.choices.setdefault(m.group(1), set()).update(m.group(2).split("|"))


def parse_gbench(tool, text):
    """Google Benchmark's --help: '[--benchmark_filter=<regex>]', '{true|false}' for a bool."""
    for m in re.finditer(r"\[--([A-Za-z0-9_]+)(=[^\]]*)?\]", text):
        tool.flags[m.group(1)] = "{true|false}" in (m.group(2) or "")
    tool.flags.setdefault("help", True)


def parse_argparse(tool, text):
    """argparse's --help: '  -h, --help', '  --zoomd ZOOMD', '  --keep'."""
    for line in text.splitlines():
        m = re.match(r"^\s{2}(?:-\w(?: \S+)?, )?--([A-Za-z0-9_-]+)(?:[ =](\S+))?", line)
        if m:
            tool.flags[m.group(1)] = m.group(2) is None


def tool_from_binary(name, path):
    text, rc = run_help([path, "--help"], cwd=os.path.dirname(path))
    if text is None:
        raise RuntimeError(f"{name}: cannot run {path} --help: {rc}")
    if re.match(r"\s*benchmark \[--benchmark_", text):
        tool = Tool(name, "gbench", f"{path} --help")
        parse_gbench(tool, text)
        return tool
    tool = Tool(name, "absl", f"{path} --helpfull")
    full, rc = run_help([path, "--helpfull"], cwd=os.path.dirname(path))
    if full is None or not re.search(ABSL_ENTRY.pattern, full, re.M):
        raise RuntimeError(f"{name}: {path} --helpfull lists no flags: {(full or str(rc))[:300]}")
    parse_absl(tool, full)
    # The usage (commands, choices): --help's, which a tool may print alone.
    parse_usage(tool, text)
    if tool.commands is None:
        parse_usage(tool, full)
    return tool


FLAG_DEF = re.compile(r"\bABSL_FLAG\(\s*(.+?)\s*,\s*([A-Za-z_]\w*)\s*,", re.S)
WORKLOAD_DEF = re.compile(r"\bRegisterWorkload\s+\w+\(\s*\"([\w-]+)\"")


def tool_from_sources(name, sources):
    """A binary that is not built: the ABSL_FLAG definitions of its sources."""
    tool = Tool(name, "absl", f"the ABSL_FLAG definitions of its {len(sources)} sources "
                              f"({name} is not built)")
    workloads = set()
    for src in sources:
        try:
            with open(src, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        for m in FLAG_DEF.finditer(text):
            tool.flags[m.group(2)] = m.group(1).strip() == "bool"
        workloads.update(WORKLOAD_DEF.findall(text))
    if not tool.flags:
        tool.kind = "unchecked"
        return tool
    for f in ABSL_BUILTIN:
        tool.flags.setdefault(f, True)
    if workloads:  # zoombench's --benchmarks (its usage line lists the same).
        tool.choices["benchmarks"] = workloads
    return tool


def tool_from_script(rel, source_dir, python):
    path = os.path.join(source_dir, rel)
    text, rc = run_help([python, path, "--help"], cwd=source_dir)
    if text is None or rc != 0 or "usage:" not in text:
        raise RuntimeError(f"{rel}: '{python} {rel} --help' failed ({rc}): {(text or '')[-300:]}")
    tool = Tool(rel, "argparse", f"{rel} --help")
    parse_argparse(tool, text)
    return tool


def makefile_targets(source_dir):
    targets = set()
    try:
        with open(os.path.join(source_dir, "Makefile")) as f:
            for line in f:
                m = re.match(r"^([A-Za-z0-9_.%/-]+(?:\s+[A-Za-z0-9_.%/-]+)*)\s*:(?![=:])", line)
                if m:
                    targets.update(m.group(1).split())
    except OSError:
        pass
    return targets


# --------------------------------------------------------- commands in the docs

def strip_comment(line):
    """The line without its shell comment (a '#' that starts a word, unquoted)."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
        i += 1
    return line


def shell_lines(text):
    """(line number offset, logical line) of a block: continuations joined."""
    out = []
    pending, start = "", None
    for i, raw in enumerate(text.split("\n")):
        line = raw
        if start is None:
            start = i
            if line.startswith("$ "):   # a console prompt
                line = line[2:]
        line = strip_comment(line)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending, start = "", None
    if pending:
        out.append((start, pending))
    return out


def tokenize(line):
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>`$")
    lex.whitespace_split = True
    lex.commenters = ""
    return list(lex)


def simple_commands(tokens):
    cmd = []
    for t in tokens:
        if t in SHELL_OPS or (t and set(t) <= set(";&|()`$")):
            if cmd:
                yield cmd
            cmd = []
        else:
            cmd.append(t)
    if cmd:
        yield cmd


def extract(md_path, rel):
    """(rel, line, text, inline) of each shell line of a code block, and of each
    inline code span (the checker decides which of them run our tools)."""
    with open(md_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    i = 0
    prose = []  # (line number, text) outside fenced blocks
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if m:
            fence, info = m.group(2), m.group(3).lower()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                j += 1
            if info in SHELL_BLOCKS:
                block = "\n".join(lines[i + 1:j])
                for off, logical in shell_lines(block):
                    found.append((rel, i + 2 + off, logical.strip(), False))
            i = j + 1
            continue
        prose.append((i + 1, lines[i]))
        i += 1
    # Inline code spans (they may wrap a line) that start with one of our binaries.
    text = "\n".join(l for _, l in prose)
    starts = []
    pos = 0
    for n, l in prose:
        starts.append((pos, n))
        pos += len(l) + 1
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = " ".join(m.group(1).split())
        line_no = max(n for p, n in starts if p <= m.start())
        found.append((rel, line_no, span, True))
    return found


# ------------------------------------------------------------------- checking

class Checker:
    def __init__(self, source_dir, build_dir, binaries, sources):
        self.source_dir = source_dir
        self.build_dir = build_dir
        self.binaries = binaries      # name -> path
        self.sources = sources        # name -> [source files]
        self.tools = {}               # cache: name -> Tool
        self.scripts = {}             # cache: rel -> Tool
        self.make_targets = None
        self.notes = []
        self.checked = {}             # tool name -> commands checked
        self.verbose = False
        self._all_flags = None
        self._unconfigured = None
        self.dirs = None              # build subdirectories configured (None: all)

    def tool(self, name):
        if name not in self.tools:
            path = self.binaries[name]
            if os.path.isfile(path) and os.access(path, os.X_OK):
                tool = tool_from_binary(name, path)
            else:
                tool = tool_from_sources(name, self.sources.get(name, []))
                self.notes.append(f"{name}: not built at {path}: checked against "
                                  + (tool.origin if tool.kind != "unchecked"
                                     else "nothing (no flag definitions in its sources): "
                                          "its commands' flags are not checked"))
            tool.path = path
            if self.build_dir:
                rel = os.path.relpath(path, self.build_dir)
                tool.rel_path = None if rel.startswith("..") else rel
            self.tools[name] = tool
        return self.tools[name]

    def script(self, rel, python):
        if rel not in self.scripts:
            self.scripts[rel] = tool_from_script(rel, self.source_dir, python)
        return self.scripts[rel]

    def check_file_commands(self, items):
        errors = []
        for rel, line, text, inline in items:
            try:
                tokens = tokenize(text)
            except ValueError as e:
                if not inline and re.search(self.binary_pattern(), text):
                    errors.append(f"{rel}:{line}: cannot parse '{text}': {e}")
                continue
            cmds = list(simple_commands(tokens))
            if inline and tokens and tokens[0].startswith("--"):
                try:
                    problems = self.check_loose_flags(tokens)
                except RuntimeError as e:
                    problems = [str(e)]
                for problem in problems:
                    errors.append(f"{rel}:{line}: {problem}\n    in: `{text}`")
                continue
            if inline:
                # A code span is a command only when it starts with our binary (or make).
                if not tokens or not (tokens[0] == "make" or self.is_ours(tokens[0], inline=True)):
                    continue
                cmds = cmds[:1]
            for cmd in cmds:
                before = sum(self.checked.values())
                try:
                    problems = self.check_command(cmd, inline)
                except RuntimeError as e:
                    problems = [str(e)]
                for problem in problems:
                    errors.append(f"{rel}:{line}: {problem}\n    in: {text}")
                if self.verbose and sum(self.checked.values()) > before:
                    print(f"{rel}:{line}: {'FAIL' if problems else 'ok'}: {shlex.join(cmd)}")
        return errors

    def all_flags(self):
        """Every flag of every binary and loadtest/ script: {name: is_bool}."""
        if self._all_flags is None:
            flags = {}
            tools = [self.tool(b) for b in sorted(self.binaries)]
            python = DEBIAN_PYTHON if os.path.exists(DEBIAN_PYTHON) else sys.executable
            scripts = glob.glob(os.path.join(self.source_dir, "loadtest", "*.py")) + [
                os.path.join(self.source_dir, s) for s in TEST_SCRIPTS
                if os.path.isfile(os.path.join(self.source_dir, s))]
            for path in sorted(scripts):
                with open(path, encoding="utf-8", errors="replace") as f:
                    if "argparse" not in f.read():
                        continue
                try:
                    tools.append(self.script(os.path.relpath(path, self.source_dir), python))
                except RuntimeError as e:
                    self.notes.append(str(e))
            for tool in tools:
                if tool.kind == "unchecked":
                    continue
                for name, is_bool in tool.flags.items():
                    flags[name] = flags.get(name, False) or is_bool
            self._all_flags = flags
        return self._all_flags

    def unconfigured_dirs(self):
        """Source folders that define binaries (zoom_cc_binary) which this build
        does not configure (bench/ and loadtest/ without ZOOM_BUILD_BENCHMARKS)."""
        if self.dirs is None:
            return []
        missing = []
        for d, subdirs, files in os.walk(self.source_dir):
            rel = os.path.relpath(d, self.source_dir)
            subdirs[:] = [s for s in subdirs if not s.startswith((".", "build"))
                          and not (rel == "." and s in ("tests", "cmake", "var"))]
            if "CMakeLists.txt" in files:
                with open(os.path.join(d, "CMakeLists.txt"), encoding="utf-8") as f:
                    if "zoom_cc_binary(" in f.read() and rel not in self.dirs:
                        missing.append(rel)
        return missing

    def check_loose_flags(self, tokens):
        """A code span of flags alone (`--sync always`): each must be some tool's flag."""
        if self._unconfigured is None:
            self._unconfigured = self.unconfigured_dirs()
            if self._unconfigured:
                self.notes.append("code spans of flags alone are not checked: this build does "
                                  f"not configure {', '.join(self._unconfigured)}")
        if self._unconfigured:
            return []
        problems = []
        for tok in tokens:
            if not tok.startswith("--") or len(tok) == 2:
                continue
            m = re.match(r"--([A-Za-z0-9_][A-Za-z0-9_-]*)", tok)
            name = m.group(1) if m else ""
            if not name or name in PLACEHOLDER_FLAGS:
                continue
            flags = self.all_flags()
            if name in flags or (name.startswith("no") and flags.get(name[2:])):
                continue
            close = difflib.get_close_matches(name, list(flags), n=3)
            hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
            problems.append(f"--{name} is a flag of none of our binaries or scripts{hint}")
        return problems

    def binary_pattern(self):
        names = sorted(self.binaries, key=len, reverse=True)
        return r"(^|[\s/])(" + "|".join(map(re.escape, names)) + r")(\s|$)"

    def is_ours(self, word, inline=False):
        base = os.path.basename(word)
        if base not in self.binaries:
            return False
        return word == base or word.startswith("build/") or (not inline and "/" in word
                                                             and not word.startswith("/"))

    def check_command(self, cmd, inline):
        words = list(cmd)
        while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in WRAPPERS):
            words.pop(0)
        if not words:
            return []
        word = words[0]
        if word == "make":
            self.checked["make"] = self.checked.get("make", 0) + 1
            return self.check_make(words[1:])
        # The scripts run under Debian's python3 (python3-grpcio, ...): the
        # one a doc names by its path, else /usr/bin/python3 when there is one.
        python = DEBIAN_PYTHON if os.path.exists(DEBIAN_PYTHON) else sys.executable
        if os.path.basename(word) in ("python3", "python") and len(words) > 1:
            if os.path.isabs(word) and os.path.exists(word):
                python = word
            word, words = words[1], words[1:]
        if word.endswith(".py"):
            rel = os.path.normpath(word)
            path = os.path.join(self.source_dir, rel)
            if (rel.startswith("loadtest/") or rel in TEST_SCRIPTS) and os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    if "argparse" in f.read():
                        tool = self.script(rel, python)
                        self.checked[rel] = self.checked.get(rel, 0) + 1
                        return self.check_args(tool, words[1:], inline)
            return []
        base = os.path.basename(word)
        if word.startswith("build/") and base not in self.binaries:
            subdir = os.path.dirname(word[len("build/"):]) or "."
            if self.dirs is not None and subdir not in self.dirs:
                note = f"{word}: not checked: this build does not configure build/{subdir}"
                if note not in self.notes:
                    self.notes.append(note)
                return []
            return [f"{word}: no binary of this build is called {base} "
                    f"(ours: {', '.join(sorted(self.binaries))})"]
        if not self.is_ours(word, inline):
            return []
        tool = self.tool(base)
        self.checked[base] = self.checked.get(base, 0) + 1
        problems = []
        if word.startswith("build/") and tool.rel_path and word[len("build/"):] != tool.rel_path:
            problems.append(f"{word}: the build puts {base} at build/{tool.rel_path}")
        return problems + self.check_args(tool, words[1:], inline)

    def check_make(self, args):
        if self.make_targets is None:
            self.make_targets = makefile_targets(self.source_dir)
        problems = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-C", "-f", "-j"):
                if a != "-j":
                    return []  # another Makefile: not ours to check
                skip = True
                continue
            if a.startswith("-") or "=" in a or REDIRECTS.match(a) or self.is_placeholder(a):
                continue
            if self.make_targets and a not in self.make_targets:
                problems.append(f"make {a}: the Makefile has no rule '{a}' "
                                f"(its rules: {', '.join(sorted(self.make_targets))})")
        return problems

    def check_args(self, tool, args, inline):
        if tool.kind == "unchecked":
            return []
        problems = []
        positional = []
        i = 0
        while i < len(args):
            raw = args[i]
            i += 1
            if REDIRECTS.match(raw):
                i += 1
                continue
            a = raw.strip("[]()")
            if a == "--":
                positional.extend(args[i:])
                break
            if not a.startswith("--") or len(a) == 2:
                positional.append(a)
                continue
            name, eq, value = a[2:].partition("=")
            flag = self.resolve(tool, name)
            if isinstance(flag, str):
                problems.append(flag)
                continue
            real, negated = flag
            if negated and eq:
                problems.append(f"{tool.name}: --{name} takes no value")
            if not eq and not negated and tool.kind != "gbench" and not tool.bool_flag(real):
                if i < len(args) and not REDIRECTS.match(args[i]):
                    value = args[i]
                    i += 1
                else:
                    problems.append(f"{tool.name}: --{name} needs a value (--{name}=V or --{name} V)")
                    value = None
            if real in tool.choices and value and not negated:
                problems.extend(self.check_choice(tool, real, value))
        if tool.commands is not None:
            problems.extend(self.check_subcommands(tool, [p for p in positional if p]))
        return problems

    def resolve(self, tool, name):
        """(flag, negated) for --name, or the problem as a string."""
        if name in tool.flags:
            return name, False
        if tool.kind == "absl" and name.startswith("no") and name[2:] in tool.flags:
            if tool.flags[name[2:]]:
                return name[2:], True
            return f"{tool.name}: --{name}: --{name[2:]} is not a bool flag, so it has no --no form"
        close = difflib.get_close_matches(name, list(tool.flags), n=3)
        hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
        return f"{tool.name}: unknown flag --{name}{hint} [{tool.origin}]"

    @staticmethod
    def is_placeholder(value):
        return (value in ("...", "…") or "..." in value or "|" in value
                or re.fullmatch(r"[A-Z][A-Z0-9_]*", value) is not None)

    def check_choice(self, tool, flag, value):
        if self.is_placeholder(value):
            return []
        bad = [v for v in value.split(",") if v and v not in tool.choices[flag]]
        if bad:
            return [f"{tool.name}: --{flag}: {', '.join(repr(b) for b in bad)} is not one of "
                    f"{'|'.join(sorted(tool.choices[flag]))} [{tool.origin}]"]
        return []

    def check_subcommands(self, tool, positional):
        if not positional:
            return []
        command = positional[0]
        alternatives = command.split("|") if "|" in command else [command]
        problems = []
        for c in alternatives:
            if self.is_placeholder(c) or c == "help":
                continue
            if c not in tool.commands:
                close = difflib.get_close_matches(c, list(tool.commands), n=2)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                problems.append(f"{tool.name}: unknown command '{c}'{hint} "
                                f"(its commands: {', '.join(sorted(tool.commands))})")
                continue
            subs = tool.commands[c]
            if subs and len(positional) > 1 and len(alternatives) == 1:
                for s in positional[1].split("|"):
                    if not self.is_placeholder(s) and s not in subs:
                        problems.append(f"{tool.name}: unknown command '{c} {s}' "
                                        f"(its {c} commands: {', '.join(sorted(subs))})")
        return problems


def doc_files(source_dir):
    files = [os.path.join(source_dir, "README.md")]
    files += sorted(glob.glob(os.path.join(source_dir, "docs", "*.md")))
    return [f for f in files if os.path.isfile(f)]


def read_manifest(path):
    """(build_dir, {name: path}, {name: [sources]}, [configured build subdirectories])."""
    build_dir, binaries, sources, dirs = None, {}, {}, None
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "build_dir" and len(parts) >= 2:
                build_dir = parts[1]
            elif parts[0] == "dirs" and len(parts) >= 2:
                dirs = [d for d in parts[1].split(";") if d]
            elif parts[0] == "binary" and len(parts) >= 3:
                binaries[parts[1]] = parts[2]
                sources[parts[1]] = [s for s in (parts[3].split(";") if len(parts) > 3 else [])
                                     if s]
    return build_dir, binaries, sources, dirs


def run(source_dir, build_dir, binaries, sources, files=None, quiet=False, verbose=False,
        dirs=None):
    """Checks the docs; returns (errors, checker)."""
    checker = Checker(source_dir, build_dir, binaries, sources)
    checker.dirs = dirs
    checker.verbose = verbose
    errors = []
    for path in files or doc_files(source_dir):
        rel = os.path.relpath(path, source_dir)
        errors += checker.check_file_commands(extract(path, rel))
    if not quiet:
        for n in checker.notes:
            print(f"note: {n}")
        summary = ", ".join(f"{k} {v}" for k, v in sorted(checker.checked.items()))
        print(f"commands checked: {summary or 'none'}")
    return errors, checker


# ------------------------------------------------------------------ self-test

FAKE_HELP = r'''#!/usr/bin/python3
import sys
usage = """zoomfake: a fake. --benchmarks=alpha|beta

Commands:
  create NAME --dim D
  snapshot create NAME
  snapshot list NAME
"""
full = usage + """
  Flags from fake.cc:
    --dim (dimension); default: 0;
    --wait (wait for it); default: false;
    --benchmarks (workloads); default: "alpha";
    --threads (threads); default: "1";
"""
if "--helpfull" in sys.argv:
    print(full); sys.exit(1)
print(usage + "\nTry --helpfull to get a list of all flags.")
sys.exit(1)
'''

SELF_CASES = [
    # (command, expected problem substring or None)
    ("build/bin/zoomfake create x --dim 4 --wait", None),
    ("build/bin/zoomfake create x --dim=4 --nowait", None),
    ("build/bin/zoomfake snapshot list x --threads 1,2", None),
    ("build/bin/zoomfake --benchmarks=alpha,beta", None),
    ("build/bin/zoomfake create x --dim 4 --planted_bad_flag", "unknown flag --planted_bad_flag"),
    ("build/bin/zoomfake create x --planted_bad=3", "unknown flag --planted_bad"),
    ("build/bin/zoomfake create x --nodim", "is not a bool flag"),
    ("build/bin/zoomfake create x --nowait=1", "--nowait takes no value"),
    ("build/bin/zoomfake create x --dim", "--dim needs a value"),
    ("build/bin/zoomfake crate x --dim 4", "unknown command 'crate'"),
    ("build/bin/zoomfake snapshot restore x", "unknown command 'snapshot restore'"),
    ("build/bin/zoomfake --benchmarks=alpha,gamma", "'gamma' is not one of alpha|beta"),
    ("build/elsewhere/zoomfake create x", "the build puts zoomfake at build/bin/zoomfake"),
    ("build/bin/zoomfaker --dim 3", "no binary of this build is called zoomfaker"),
    ("build/notconfigured/zoomother --anything", None),
    ("X=1 build/bin/zoomfake create x ; build/bin/zoomfake create y --bad2", "unknown flag --bad2"),
    ("make run && make tset", "the Makefile has no rule 'tset'"),
]


def self_test(manifest):
    failures = []
    with tempfile.TemporaryDirectory() as d:
        build = os.path.join(d, "build")
        os.makedirs(os.path.join(build, "bin"))
        fake = os.path.join(build, "bin", "zoomfake")
        with open(fake, "w") as f:
            f.write(FAKE_HELP)
        os.chmod(fake, 0o755)
        with open(os.path.join(d, "Makefile"), "w") as f:
            f.write("run: configure\n\t@true\ntest: configure\n\t@true\n")
        os.makedirs(os.path.join(d, "docs"))
        for i, (cmd, want) in enumerate(SELF_CASES):
            doc = os.path.join(d, "docs", f"case{i}.md")
            with open(doc, "w") as f:
                f.write(f"# case\n\n```sh\n{cmd}\n```\n")
            errors, _ = run(d, build, {"zoomfake": fake}, {}, files=[doc], quiet=True,
                            dirs=[".", "bin"])
            got = "\n".join(errors)
            if want is None and errors:
                failures.append(f"'{cmd}' should pass, got:\n{got}")
            elif want is not None and want not in got:
                failures.append(f"'{cmd}' should fail with '{want}', got:\n{got or 'no error'}")
        # A span of flags alone: each must be some binary's.
        doc = os.path.join(d, "docs", "loose.md")
        with open(doc, "w") as f:
            f.write("Set `--dim 3` and `--nowait`, or `--flag=value`; not `--planted_loose 2`.\n")
        errors, _ = run(d, build, {"zoomfake": fake}, {}, files=[doc], quiet=True)
        got = "\n".join(errors)
        if len(errors) != 1 or "--planted_loose" not in got:
            failures.append(f"loose flags: expected only --planted_loose:\n{got}")
        # The same planted flag in an inline span and in a wrapped line.
        doc = os.path.join(d, "docs", "inline.md")
        with open(doc, "w") as f:
            f.write("Run `zoomfake create x\n--planted_inline` or\n\n```sh\n"
                    "build/bin/zoomfake create x \\\n    --planted_wrapped   # a comment's 'quote\n```\n")
        errors, _ = run(d, build, {"zoomfake": fake}, {}, files=[doc], quiet=True)
        got = "\n".join(errors)
        for want in ("--planted_inline", "inline.md:5:", "--planted_wrapped"):
            if want not in got:
                failures.append(f"inline/wrapped: '{want}' not reported:\n{got}")
        # A binary that is not built: its sources' ABSL_FLAG definitions.
        src = os.path.join(d, "fake_main.cc")
        with open(src, "w") as f:
            f.write('ABSL_FLAG(bool, quick, false, "q");\nABSL_FLAG(std::string, out, "", "o");\n'
                    'ABSL_FLAG(std::string, benchmarks, "", "b");\n'
                    'const RegisterWorkload kA("alpha", RunA);\n')
        doc = os.path.join(d, "docs", "unbuilt.md")
        with open(doc, "w") as f:
            f.write("```sh\nbuild/bin/zoomgone --noquick --out x --benchmarks=alpha\n"
                    "build/bin/zoomgone --nout --missing\n```\n")
        errors, checker = run(d, build, {"zoomgone": os.path.join(build, "bin", "zoomgone")},
                              {"zoomgone": [src]}, files=[doc], quiet=True)
        got = "\n".join(errors)
        if ("unbuilt.md:2:" in got or "--nout" not in got or "--missing" not in got
                or not checker.notes):
            failures.append(f"unbuilt binary: expected errors on line 3 only:\n{got}")
    # The real docs and binaries: each binary's first documented command passes,
    # and fails once a bad flag is planted in it.
    if manifest:
        build_dir, binaries, sources, dirs = read_manifest(manifest)
        source_dir = DEFAULT_SOURCE_DIR
        planted_any = False
        for name in ("zoomctl", "zoomd", "zoomload", "zoombench"):
            if name not in binaries or not os.path.isfile(binaries[name]):
                continue
            cmd = first_command(source_dir, name)
            if cmd is None:
                continue
            with tempfile.TemporaryDirectory() as d:
                for suffix, want in (("", None), (" --zz_planted_bad_flag", "--zz_planted_bad_flag"),
                                     (" --zz_planted=1", "--zz_planted")):
                    doc = os.path.join(d, "planted.md")
                    with open(doc, "w") as f:
                        f.write(f"```sh\n{cmd}{suffix}\n```\n")
                    errors, _ = run(source_dir, build_dir, binaries, sources, files=[doc],
                                    quiet=True, dirs=dirs)
                    got = "\n".join(errors)
                    if (want is None) != (not errors) or (want and want not in got):
                        failures.append(f"real {name}: '{cmd}{suffix}': got {got or 'no error'}")
            planted_any = True
        if not planted_any:
            failures.append("no built binary of the manifest has a documented command")
    if failures:
        print("self-test FAILED:\n" + "\n".join(failures))
        return 1
    print(f"self-test passed ({len(SELF_CASES) + 5} planted cases"
          + (", and bad flags planted in the real docs' commands" if manifest else "") + ")")
    return 0


def first_command(source_dir, name):
    for path in doc_files(source_dir):
        for _, _, text, inline in extract(path, path):
            if inline:
                continue
            try:
                for cmd in simple_commands(tokenize(text)):
                    if cmd and os.path.basename(cmd[0]) == name and cmd[0].startswith("build/"):
                        return shlex.join(cmd)
            except ValueError:
                continue
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", help="BUILD/tests/doc_binaries.txt (written by CMake)")
    ap.add_argument("--build_dir", help="a build directory (its tests/doc_binaries.txt)")
    ap.add_argument("--source_dir", default=DEFAULT_SOURCE_DIR)
    ap.add_argument("--self-test", dest="self_test", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command checked")
    args = ap.parse_args(argv)
    manifest = args.manifest
    if not manifest and args.build_dir:
        manifest = os.path.join(args.build_dir, "tests", "doc_binaries.txt")
    if manifest and not os.path.isfile(manifest):
        print(f"no manifest at {manifest} (configure the build with CMake first)")
        return 2
    if args.self_test:
        return self_test(manifest)
    if not manifest:
        ap.print_usage()
        return 2
    build_dir, binaries, sources, dirs = read_manifest(manifest)
    for needed in ("zoomd", "zoomctl"):
        if needed not in binaries:
            print(f"{manifest} lists no {needed}")
            return 2
    errors, _ = run(os.path.abspath(args.source_dir), build_dir, binaries, sources,
                    verbose=args.verbose, dirs=dirs)
    if errors:
        print(f"{len(errors)} stale command(s) in the docs (fix the doc, or the binary if it "
              "lost a flag it should have):")
        for e in errors:
            print(e)
        return 1
    print("every documented command checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
