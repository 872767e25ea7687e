"""The seccomp filter every sandboxed command runs under, given to bubblewrap (`--seccomp FD`).

Namespaces, capabilities and the session user already keep a command from mounting, loading modules
or setting the clock; the filter closes what they leave open to an unprivileged user: a new user
namespace (`unshare -U` makes the command "root" of its own namespace, with every capability there,
and opens the kernel's namespaced code to it), and other calls a build never needs and the kernel has
often been attacked through: keyrings, bpf, perf events, userfaultfd, io_uring (whose operations
seccomp cannot see), typing into the terminal (TIOCSTI). They answer EPERM, as the kernel itself would
to a caller without the privilege, so tools that probe (a test suite trying a user namespace, a
sandboxing tool falling back) see a plain refusal. clone3 and io_uring answer ENOSYS, as on an older
kernel: glibc then falls back to clone, whose flags the filter can read (clone3 keeps them in memory,
out of a filter's reach). Everything else is allowed: ptrace too (debuggers, strace; the PID namespace
confines it).

`program(arch)` is pure: the classic-BPF program, as the bytes of struct sock_filter[] the kernel
takes. A call from another architecture (32-bit x86 through int 0x80, which has other numbers) kills
the process; so does nothing else. The syscall numbers are the kernel's (tests compare them with the
headers of this machine and with libseccomp's).
"""

from __future__ import annotations

import errno
import platform
import struct

from agentd.run.launch import sealed_file

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
"""AUDIT_ARCH_* of linux/audit.h: what seccomp_data.arch holds for a native call."""
X32_SYSCALL_BIT = 0x40000000
"""x86_64 calls at or above it are the x32 ABI's: answered ENOSYS, as by a kernel built without it."""

SYSCALLS: dict[str, dict[str, int]] = {
    # name: (x86_64, aarch64), from asm/unistd_64.h and asm-generic/unistd.h
    arch: {name: numbers[i] for name, numbers in table.items()}
    for i, arch in enumerate(("x86_64", "aarch64"))
    for table in [
        {
            "clone": (56, 220),
            "unshare": (272, 97),
            "ioctl": (16, 29),
            "setns": (308, 268),
            "mount": (165, 40),
            "umount2": (166, 39),
            "pivot_root": (155, 41),
            "move_mount": (429, 429),
            "open_tree": (428, 428),
            "fsopen": (430, 430),
            "fsconfig": (431, 431),
            "fsmount": (432, 432),
            "fspick": (433, 433),
            "mount_setattr": (442, 442),
            "keyctl": (250, 219),
            "add_key": (248, 217),
            "request_key": (249, 218),
            "bpf": (321, 280),
            "perf_event_open": (298, 241),
            "userfaultfd": (323, 282),
            "init_module": (175, 105),
            "finit_module": (313, 273),
            "delete_module": (176, 106),
            "kexec_load": (246, 104),
            "kexec_file_load": (320, 294),
            "reboot": (169, 142),
            "swapon": (167, 224),
            "swapoff": (168, 225),
            "acct": (163, 89),
            "settimeofday": (164, 170),
            "clock_settime": (227, 112),
            "clock_adjtime": (305, 266),
            "adjtimex": (159, 171),
            "syslog": (103, 116),
            "quotactl": (179, 60),
            "quotactl_fd": (443, 443),
            "nfsservctl": (180, 42),
            "lookup_dcookie": (212, 18),
            "open_by_handle_at": (304, 265),
            "clone3": (435, 435),
            "io_uring_setup": (425, 425),
            "io_uring_enter": (426, 426),
            "io_uring_register": (427, 427),
        }
    ]
}
"""The numbers of the calls the filter names, per architecture."""

REFUSED = (
    # other namespaces and mounts (unshare and clone: only with a namespace flag, see NAMESPACE_FLAGS)
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # kernel keyrings, eBPF, perf events, userfaultfd: large attack surface, no build needs them
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    # the machine's own state: modules, kexec, reboot, swap, accounting, clocks, the kernel log, quotas
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    "lookup_dcookie",
    # opening a file by its handle walks around directory permissions
    "open_by_handle_at",
)
"""Answered EPERM whatever their arguments."""
ABSENT = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")
"""Answered ENOSYS: as if the kernel had none (glibc falls back from clone3 to clone)."""

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)
"""clone (its flags are arg 0 on x86_64 and aarch64) and unshare are refused with any of these: a new
user namespace is the hole; the others need CAP_SYS_ADMIN, which only a new user namespace would give."""
UNSHARE_FLAGS = NAMESPACE_FLAGS | CLONE_NEWTIME
"""unshare also takes CLONE_NEWTIME, a bit that in clone's flags is part of the exit signal."""
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
"""ioctl requests (arg 1) refused: typing into, or reading, the terminal of whoever is at it."""

KILL_PROCESS = 0x80000000
ERRNO = 0x00050000
ALLOW = 0x7FFF0000
# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
RET_K = 0x06
# offsets in struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
NR, ARCH = 0, 4


def arg_low(index: int) -> int:
    """The offset of the low 32 bits of argument `index` (little-endian: x86_64 and aarch64). The
    kernel reads these calls' flags and requests as 32-bit ints, so the high half cannot hide a bit."""
    return 16 + 8 * index


Instruction = tuple[int, int | str, int | str, int]
"""code, jump-if-true, jump-if-false, k; a jump is 0 (the next instruction) or a label."""


def program(arch: str) -> bytes:
    """The filter for `arch` ("x86_64" or "aarch64"), as the kernel's struct sock_filter[].
    ValueError for another architecture."""
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for {arch!r} (known: {', '.join(AUDIT_ARCH)})")
    nr = SYSCALLS[arch]
    code: list[Instruction | str] = [
        (LD_W_ABS, 0, 0, ARCH),
        (JEQ_K, 0, "kill", AUDIT_ARCH[arch]),
        (LD_W_ABS, 0, 0, NR),
    ]
    if arch == "x86_64":
        code.append((JGE_K, "enosys", 0, X32_SYSCALL_BIT))
    code += [
        (JEQ_K, "clone", 0, nr["clone"]),
        (JEQ_K, "unshare", 0, nr["unshare"]),
        (JEQ_K, "ioctl", 0, nr["ioctl"]),
        *((JEQ_K, "eperm", 0, nr[name]) for name in REFUSED),
        *((JEQ_K, "enosys", 0, nr[name]) for name in ABSENT),
        (RET_K, 0, 0, ALLOW),
        "clone",
        (LD_W_ABS, 0, 0, arg_low(0)),
        (JSET_K, "eperm", "allow", NAMESPACE_FLAGS),
        "unshare",
        (LD_W_ABS, 0, 0, arg_low(0)),
        (JSET_K, "eperm", "allow", UNSHARE_FLAGS),
        "ioctl",
        (LD_W_ABS, 0, 0, arg_low(1)),
        (JEQ_K, "eperm", 0, TIOCSTI),
        (JEQ_K, "eperm", "allow", TIOCLINUX),
        "kill",
        (RET_K, 0, 0, KILL_PROCESS),
        "eperm",
        (RET_K, 0, 0, ERRNO | errno.EPERM),
        "enosys",
        (RET_K, 0, 0, ERRNO | errno.ENOSYS),
        "allow",
        (RET_K, 0, 0, ALLOW),
    ]
    return assemble(code)


def assemble(code: list[Instruction | str]) -> bytes:
    """struct sock_filter[] of `code`, whose strings are labels of the instruction after them; jumps
    go forward only, at most 255 instructions (the kernel refuses anything else)."""
    labels: dict[str, int] = {}
    instructions: list[Instruction] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(instructions)
        else:
            instructions.append(item)
    out = bytearray()
    for at, (op, jt, jf, k) in enumerate(instructions):
        offsets = [labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= o <= 255 for o in offsets):
            raise ValueError(f"instruction {at}: jump {offsets} out of range")
        out += struct.pack("<HBBI", op, offsets[0], offsets[1], k)
    return bytes(out)


def machine() -> str:
    """This host's architecture in AUDIT_ARCH's names ("arm64" is aarch64's other name)."""
    name = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name.lower(), name)


def for_bwrap(arch: str | None = None) -> tuple[int, list[str]]:
    """A sealed memory file holding the filter for `arch` (default: this host's) at offset 0, and the
    bubblewrap arguments that apply it to the command. The caller passes the descriptor to bwrap
    (pass_fds) and closes it once bwrap started. ValueError on an architecture without a filter."""
    fd = sealed_file("drover-seccomp", program(arch or machine()))
    return fd, ["--seccomp", str(fd)]
