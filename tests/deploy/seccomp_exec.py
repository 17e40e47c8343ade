#!/usr/bin/python3
"""Runs a command under a container seccomp profile (the JSON format of
Docker, podman and the OCI runtime spec), applied the way runc applies it to
a process without capabilities on this machine's architecture:

    seccomp_exec.py PROFILE.json [--drop NAME,...] -- COMMAND ARGS...

Rules that need a capability (includes.caps) are left out, rules that apply
unless a capability is held (excludes.caps) are kept, arch conditions are
matched against this machine, and syscall names this architecture lacks are
skipped (as runc does). --drop removes syscalls from every ALLOW rule (e.g.
the io_uring ones, to get the engines' default behaviour). Needs python3-seccomp.
"""
import json
import os
import platform
import sys

import seccomp

ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
OPS = {
    "SCMP_CMP_NE": seccomp.NE, "SCMP_CMP_LT": seccomp.LT, "SCMP_CMP_LE": seccomp.LE,
    "SCMP_CMP_EQ": seccomp.EQ, "SCMP_CMP_GE": seccomp.GE, "SCMP_CMP_GT": seccomp.GT,
    "SCMP_CMP_MASKED_EQ": seccomp.MASKED_EQ,
}


def action(rule, default_errno):
    name = rule["action"]
    if name == "SCMP_ACT_ALLOW":
        return seccomp.ALLOW
    if name == "SCMP_ACT_ERRNO":
        return seccomp.ERRNO(rule.get("errnoRet", default_errno))
    if name == "SCMP_ACT_KILL":
        return seccomp.KILL
    raise ValueError(f"unsupported action {name}")


def build_filter(profile, drop):
    arch = ARCHES.get(platform.machine(), platform.machine())
    default_errno = profile.get("defaultErrnoRet", 1)
    if profile["defaultAction"] != "SCMP_ACT_ERRNO":
        raise ValueError("only SCMP_ACT_ERRNO default actions are supported")
    f = seccomp.SyscallFilter(defaction=seccomp.ERRNO(default_errno))
    applied = 0
    for rule in profile["syscalls"]:
        inc, exc = rule.get("includes", {}), rule.get("excludes", {})
        if inc.get("caps"):
            continue
        if inc.get("arches") and arch not in inc["arches"]:
            continue
        if exc.get("arches") and arch in exc["arches"]:
            continue
        act = action(rule, default_errno)
        args = []
        for a in rule.get("args") or []:
            if a["op"] == "SCMP_CMP_MASKED_EQ":
                args.append(seccomp.Arg(a["index"], seccomp.MASKED_EQ, a["value"], a.get("valueTwo", 0)))
            else:
                args.append(seccomp.Arg(a["index"], OPS[a["op"]], a["value"]))
        for name in rule["names"]:
            if rule["action"] == "SCMP_ACT_ALLOW" and name in drop:
                continue
            try:
                f.add_rule(act, name, *args)
                applied += 1
            except (RuntimeError, ValueError, OSError):
                pass  # not a syscall of this architecture
    return f, applied


def main(argv):
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    sep = argv.index("--")
    opts, cmd = argv[1:sep], argv[sep + 1:]
    drop = set()
    if len(opts) == 3 and opts[1] == "--drop":
        drop = set(opts[2].split(","))
    elif len(opts) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(opts[0]) as fp:
        profile = json.load(fp)
    f, applied = build_filter(profile, drop)
    if applied < 100:
        print(f"seccomp_exec: only {applied} rules applied", file=sys.stderr)
        return 1
    f.load()
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
