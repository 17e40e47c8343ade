#!/usr/bin/python3
"""The README stays a front page (issue 46).

  - its first commands are the two of the project, `make run` then `make
    test`, in a code block within its first 40 lines;
  - it is under 300 lines (the reference and the measured tables live in
    docs/, see docs/development.md);
  - it links every docs/*.md, so that none is orphaned.

    tests/docs/check_readme.py [SOURCE_DIR]
    tests/docs/check_readme.py --self-test
"""
import glob
import os
import re
import sys

MAX_LINES = 300
FIRST_LINES = 40


def problems(readme, doc_names):
    lines = readme.split("\n")
    found = []
    if len(lines) >= MAX_LINES:
        found.append(f"README.md has {len(lines)} lines: keep it under {MAX_LINES} "
                     "(move reference text and tables to docs/)")
    # The first commands: the first code block's first two.
    commands = []
    in_block = False
    start = None
    for i, line in enumerate(lines):
        if line.strip().startswith("```"):
            if in_block:
                break
            in_block, start = True, i + 1
            continue
        if in_block:
            cmd = line.split("#", 1)[0].strip()
            if cmd:
                commands.append(cmd)
    if start is None or start > FIRST_LINES:
        found.append(f"README.md: no code block in its first {FIRST_LINES} lines "
                     "(it must open with `make run` and `make test`)")
    elif commands[:2] != ["make run", "make test"]:
        found.append(f"README.md: its first commands (line {start}) are {commands[:2]}, "
                     "not ['make run', 'make test']")
    for name in doc_names:
        if not re.search(r"\]\(docs/" + re.escape(name) + r"(#[^)]*)?\)", readme):
            found.append(f"README.md does not link docs/{name}")
    return found


def self_test():
    good = "# x\n\n```sh\nmake run    # a\nmake test   # b\n```\n\n[a](docs/a.md)\n"
    cases = [
        (good, None),
        (good.replace("make run ", "make build"), "not ['make run', 'make test']"),
        ("# x\n" + "\n" * 50 + good, "no code block in its first 40 lines"),
        (good + "line\n" * 300, "keep it under 300"),
        (good.replace("[a](docs/a.md)", ""), "does not link docs/a.md"),
    ]
    failed = []
    for text, want in cases:
        got = problems(text, ["a.md"])
        if (want is None and got) or (want and not any(want in g for g in got)):
            failed.append(f"expected {want!r}, got {got}")
    if failed:
        print("self-test FAILED:\n" + "\n".join(failed))
        return 1
    print(f"self-test passed ({len(cases)} cases)")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    root = argv[0] if argv else os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    docs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    found = problems(readme, docs)
    for p in found:
        print(p)
    if found:
        return 1
    print(f"README.md: {readme.count(chr(10))} lines, opens with make run / make test, "
          f"links all {len(docs)} docs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
