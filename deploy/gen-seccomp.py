#!/usr/bin/env python3
"""Writes deploy/seccomp-zoomd.json: a container seccomp profile with the
shape of Docker's default (an allowlist; everything else fails with EPERM;
namespace-creating clone flags, clone3 and most personalities refused;
privileged syscalls allowed only with the capability that guards them) plus
io_uring_setup, io_uring_enter and io_uring_register, which Docker's and
podman's defaults refuse.

    python3 deploy/gen-seccomp.py            # rewrite the profile
    python3 deploy/gen-seccomp.py --check    # exit 1 if the file is stale

The lists below are ours, grouped by purpose; tests/deploy checks the file is
what this script writes, and deploy/test-image.sh runs zoomd under it.
"""
import json
import os
import sys

# Syscalls every unprivileged process may use. Names that do not exist on an
# architecture are ignored by the container runtime.
ALLOW = {
    "files": """
        access faccessat faccessat2 open openat openat2 creat close close_range
        read readv pread64 preadv preadv2 write writev pwrite64 pwritev pwritev2
        lseek _llseek readahead fadvise64 fadvise64_64 fallocate
        truncate truncate64 ftruncate ftruncate64 fsync fdatasync sync syncfs
        sync_file_range copy_file_range sendfile sendfile64 splice tee vmsplice
        stat stat64 lstat lstat64 fstat fstat64 fstatat64 newfstatat statx
        statfs statfs64 fstatfs fstatfs64 getdents getdents64
        chdir fchdir getcwd mkdir mkdirat mknod mknodat rmdir
        link linkat symlink symlinkat unlink unlinkat rename renameat renameat2
        readlink readlinkat chmod fchmod fchmodat fchmodat2
        chown chown32 fchown fchown32 fchownat lchown lchown32 umask
        utime utimes utimensat utimensat_time64 futimesat
        getxattr lgetxattr fgetxattr setxattr lsetxattr fsetxattr
        listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr
        readdir flock fcntl fcntl64 ioctl dup dup2 dup3 pipe pipe2 name_to_handle_at
        inotify_init inotify_init1 inotify_add_watch inotify_rm_watch
        fanotify_mark memfd_create memfd_secret
    """,
    "async_io": """
        io_setup io_destroy io_submit io_cancel io_getevents io_pgetevents
        io_pgetevents_time64
    """,
    # The addition: zoomd's fullview reads go through io_uring.
    "io_uring": "io_uring_setup io_uring_enter io_uring_register",
    "memory": """
        brk mmap mmap2 munmap mremap mprotect madvise mincore msync
        mlock mlock2 mlockall munlock munlockall remap_file_pages membarrier
        pkey_alloc pkey_free pkey_mprotect map_shadow_stack
    """,
    "processes": """
        fork vfork execve execveat exit exit_group wait4 waitid waitpid
        getpid getppid gettid getpgid getpgrp setpgid getsid setsid
        getuid getuid32 geteuid geteuid32 getgid getgid32 getegid getegid32
        getresuid getresuid32 getresgid getresgid32 getgroups getgroups32
        setuid setuid32 setgid setgid32 setreuid setreuid32 setregid setregid32
        setresuid setresuid32 setresgid setresgid32 setgroups setgroups32
        setfsuid setfsuid32 setfsgid setfsgid32 capget capset prctl
        getrlimit ugetrlimit setrlimit prlimit64 getrusage getpriority
        setpriority ioprio_get ioprio_set sched_yield sched_getaffinity
        sched_setaffinity sched_getattr sched_setattr sched_getparam
        sched_setparam sched_getscheduler sched_setscheduler
        sched_get_priority_max sched_get_priority_min sched_rr_get_interval
        sched_rr_get_interval_time64 set_tid_address set_robust_list
        get_robust_list rseq getcpu get_thread_area set_thread_area
        pidfd_open pidfd_send_signal process_mrelease seccomp
        landlock_create_ruleset landlock_add_rule landlock_restrict_self
        restart_syscall uname sysinfo
    """,
    "threads_and_waiting": """
        futex futex_time64 futex_waitv futex_wake futex_wait futex_requeue
        nanosleep clock_nanosleep clock_nanosleep_time64 pause
        select _newselect pselect6 pselect6_time64 poll ppoll ppoll_time64
        epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_wait
        epoll_wait_old epoll_pwait epoll_pwait2 eventfd eventfd2
    """,
    "signals": """
        kill tkill tgkill rt_sigaction rt_sigprocmask rt_sigpending
        rt_sigqueueinfo rt_tgsigqueueinfo rt_sigreturn rt_sigsuspend
        rt_sigtimedwait rt_sigtimedwait_time64 sigaltstack sigreturn
        sigprocmask signalfd signalfd4 alarm sigaction signal sigpending
        sigsuspend
    """,
    "time": """
        time gettimeofday clock_gettime clock_gettime64 clock_getres
        clock_getres_time64 adjtimex clock_adjtime clock_adjtime64 times
        getitimer setitimer timer_create timer_delete timer_getoverrun
        timer_gettime timer_gettime64 timer_settime timer_settime64
        timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime
        timerfd_settime64
    """,
    "network": """
        socketpair socketcall bind listen accept accept4 connect shutdown
        getsockname getpeername getsockopt setsockopt send sendto sendmsg
        sendmmsg recv recvfrom recvmsg recvmmsg recvmmsg_time64
    """,
    "ipc": """
        ipc shmget shmat shmdt shmctl semget semop semtimedop semtimedop_time64
        semctl msgget msgsnd msgrcv msgctl mq_open mq_unlink mq_timedsend
        mq_timedsend_time64 mq_timedreceive mq_timedreceive_time64 mq_notify
        mq_getsetattr
    """,
    "misc": "getrandom cachestat",
}

# Allowed only with the capability (the default grants none of these).
BY_CAPABILITY = {
    "CAP_SYS_ADMIN": """
        bpf clone clone3 fanotify_init fsconfig fsmount fsopen fspick
        lookup_dcookie mount mount_setattr move_mount open_tree perf_event_open
        quotactl quotactl_fd setdomainname sethostname setns syslog umount
        umount2 unshare
    """,
    "CAP_SYS_BOOT": "reboot",
    "CAP_SYS_CHROOT": "chroot",
    "CAP_SYS_MODULE": "delete_module init_module finit_module",
    "CAP_SYS_PACCT": "acct",
    "CAP_SYS_PTRACE": "kcmp pidfd_getfd process_madvise process_vm_readv process_vm_writev ptrace",
    "CAP_SYS_RAWIO": "iopl ioperm",
    "CAP_SYS_TIME": "settimeofday stime clock_settime clock_settime64",
    "CAP_SYS_TTY_CONFIG": "vhangup",
    "CAP_SYS_NICE": "get_mempolicy mbind set_mempolicy set_mempolicy_home_node",
    "CAP_SYSLOG": "syslog",
    "CAP_BPF": "bpf",
    "CAP_PERFMON": "perf_event_open",
    "CAP_DAC_READ_SEARCH": "open_by_handle_at",
}

# clone(2) flags that make namespaces; without CAP_SYS_ADMIN, clone is
# allowed only when none of them is set.
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
# personality(2) values programs legitimately ask for: PER_LINUX,
# UNAME26, PER_LINUX32, PER_LINUX32|UNAME26 and the query 0xffffffff.
PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF]
AF_VSOCK = 40
ENOSYS = 38
EPERM = 1


def names(text):
    return sorted(set(text.split()))


def profile():
    allow = sorted(set(n for group in ALLOW.values() for n in group.split()))
    rules = [{"names": allow, "action": "SCMP_ACT_ALLOW"}]
    rules.append({
        "names": ["socket"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}],
    })
    rules += [{
        "names": ["personality"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": p, "op": "SCMP_CMP_EQ"}],
    } for p in PERSONALITIES]
    rules.append({
        "names": ["arm_fadvise64_64", "arm_sync_file_range", "breakpoint", "cacheflush",
                  "set_tls", "sync_file_range2"],
        "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["arm", "arm64"]},
    })
    rules.append({
        "names": ["arch_prctl", "modify_ldt"], "action": "SCMP_ACT_ALLOW",
        "includes": {"arches": ["amd64", "x32", "x86"]},
    })
    mask = sum(CLONE_NAMESPACE_FLAGS.values())
    rules.append({
        "names": ["clone"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": mask, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        "excludes": {"caps": ["CAP_SYS_ADMIN"], "arches": ["s390", "s390x"]},
    })
    # clone3 passes its flags in memory, out of seccomp's reach: answer
    # ENOSYS so libc falls back to clone, where the flags are checked.
    rules.append({
        "names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS,
        "excludes": {"caps": ["CAP_SYS_ADMIN"]},
    })
    for cap, text in BY_CAPABILITY.items():
        rules.append({"names": names(text), "action": "SCMP_ACT_ALLOW",
                      "includes": {"caps": [cap]}})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64",
             "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": rules,
    }


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp-zoomd.json")
    text = json.dumps(profile(), indent=2) + "\n"
    if "--check" in sys.argv[1:]:
        with open(path) as f:
            if f.read() != text:
                print(f"{path} is stale: run python3 deploy/gen-seccomp.py", file=sys.stderr)
                return 1
        return 0
    with open(path, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
