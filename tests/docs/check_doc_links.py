#!/usr/bin/python3
"""Every relative link of the project's Markdown files resolves (issue 46).

For each [text](target) outside code: a relative path must exist (from the
file that links it), and a #anchor must be a heading of the target (GitHub's
slugs: lower case, punctuation dropped, spaces to '-', '-1', '-2' for
repeats). Links to http(s), mailto and absolute paths are not checked.

    tests/docs/check_doc_links.py [SOURCE_DIR]
    tests/docs/check_doc_links.py --self-test
"""
import os
import re
import sys
import tempfile

SKIP_DIRS = {".git", "var", "node_modules", "__pycache__"}
LINK = re.compile(r"(?<!\!)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def markdown_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")
                   and not x.startswith(".")]
        for f in files:
            if f.endswith(".md"):
                yield os.path.join(d, f)


def strip_code(text, spans=True):
    """The text with fenced blocks (and code spans) blanked, lines kept."""
    out = []
    in_block = None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if in_block is None:
                in_block = m.group(1)
            elif line.strip().startswith(in_block):
                in_block = None
            out.append("")
            continue
        out.append("" if in_block else line)
    text = "\n".join(out)
    return re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), text) if spans else text


def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        seen = {}
        result = set()
        for line in strip_code(text, spans=False).split("\n"):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            result.add(s if n == 0 else f"{s}-{n}")
        # <a name="x"> / id="x" anchors.
        result.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
        cache[path] = result
    return cache[path]


def check(root):
    problems = []
    count = 0
    for path in sorted(markdown_files(root)):
        with open(path, encoding="utf-8") as f:
            text = strip_code(f.read())
        rel = os.path.relpath(path, root)
        for m in LINK.finditer(text):
            target = m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue
            count += 1
            line = text.count("\n", 0, m.start()) + 1
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part \
                else path
            if not os.path.exists(dest):
                problems.append(f"{rel}:{line}: {target}: {os.path.relpath(dest, root)} does not exist")
                continue
            if anchor:
                if not dest.endswith(".md"):
                    continue
                if anchor not in anchors(dest):
                    problems.append(f"{rel}:{line}: {target}: no heading #{anchor} in "
                                    f"{os.path.relpath(dest, root)}")
    return problems, count


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        with open(os.path.join(d, "docs", "a.md"), "w") as f:
            f.write("# A (`x.y`, z)\n\n## Security: keys and TLS\n\n## Security: keys and TLS\n\n"
                    "```\n# not a heading\n```\n")
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write("[ok](docs/a.md) [ok](docs/a.md#a-xy-z) [ok](docs/a.md#security-keys-and-tls-1)\n"
                    "[bad file](docs/b.md) [bad anchor](docs/a.md#not-a-heading)\n"
                    "`[in code](docs/c.md)` [web](https://example.com/x.md)\n")
        with open(os.path.join(d, "docs", "c.md"), "w") as f:
            f.write("# Up\n[up](../README.md) [self](#up) [self bad](#nope)\n")
        problems, count = check(d)
    got = "\n".join(problems)
    wants = ["docs/b.md does not exist", "no heading #not-a-heading", "no heading #nope"]
    if len(problems) != 3 or any(w not in got for w in wants) or count != 8:
        print(f"self-test FAILED ({count} links):\n{got}")
        return 1
    print("self-test passed")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    root = argv[0] if argv else os.path.join(os.path.dirname(__file__), "..", "..")
    problems, count = check(os.path.abspath(root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s) of {count}")
        return 1
    print(f"{count} relative links, every one resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
