"""The seccomp filter: its syscall numbers against the kernel's headers (and libseccomp's), its
decisions run through a classic-BPF interpreter for both architectures, and the filter loaded by a real
bubblewrap: user namespaces, mounts, clone3 and io_uring refused, while threads, fork, subprocesses,
git and Python builds work as before."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pathlib
import pwd
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator

import pytest

from agentd.daemon import isolation
from agentd.daemon.config import AgentConfig
from agentd.errors import StartRefused
from agentd.run import seccomp
from agentd.run.confined import Confined, ready_pipe
from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy

HEADERS = {
    "x86_64": pathlib.Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": pathlib.Path("/usr/include/asm-generic/unistd.h"),
}
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
EPERM = seccomp.ERRNO | errno.EPERM
ENOSYS = seccomp.ERRNO | errno.ENOSYS
ALLOW = seccomp.ALLOW
KILL = seccomp.KILL_PROCESS


# --- the numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_the_syscall_numbers_are_the_kernel_headers(arch: str) -> None:
    header = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"{header} is not installed (Debian: linux-libc-dev)")
    defined = {m[1]: int(m[2]) for m in re.finditer(r"^#define __NR_(\w+)\s+(\d+)\s*$", header.read_text(), re.M)}
    assert seccomp.SYSCALLS[arch] == {name: defined[name] for name in seccomp.SYSCALLS[arch]}


def test_every_named_call_has_a_number_on_every_architecture() -> None:
    named = {"clone", "unshare", "ioctl", *seccomp.REFUSED, *seccomp.ABSENT}
    for arch in seccomp.AUDIT_ARCH:
        assert set(seccomp.SYSCALLS[arch]) == named


def test_the_numbers_and_architectures_are_libseccomps() -> None:
    """Debian's libseccomp (python3-seccomp, for the system Python only) resolves the same numbers."""
    code = (
        "import json, sys, seccomp\n"
        "names = json.load(sys.stdin)\n"
        "arches = {'x86_64': seccomp.Arch.X86_64, 'aarch64': seccomp.Arch.AARCH64}\n"
        "print(json.dumps({a: [v & 0xffffffff, {n: seccomp.resolve_syscall(v, n) for n in names}]"
        " for a, v in arches.items()}))\n"
    )
    names = sorted(seccomp.SYSCALLS["x86_64"])
    try:
        done = subprocess.run(
            ["/usr/bin/python3", "-c", code], input=json.dumps(names), capture_output=True, text=True, timeout=30
        )
    except FileNotFoundError:
        pytest.skip("no /usr/bin/python3")
    if "No module named 'seccomp'" in done.stderr:
        pytest.skip("python3-seccomp is not installed (Debian: apt-get install python3-seccomp)")
    assert done.returncode == 0, done.stderr
    for arch, (audit, numbers) in json.loads(done.stdout).items():
        assert audit == seccomp.AUDIT_ARCH[arch]
        assert numbers == seccomp.SYSCALLS[arch]


# --- the decisions, through a classic-BPF interpreter ------------------------------------------------


def verdict(program: bytes, arch: int, nr: int, *args: int) -> int:
    """What the kernel's filter would answer for this call (only the opcodes program() uses)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    code = [struct.unpack_from("<HBBI", program, at) for at in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == seccomp.LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == seccomp.RET_K:
            return k
        else:
            taken = {seccomp.JEQ_K: acc == k, seccomp.JGE_K: acc >= k, seccomp.JSET_K: bool(acc & k)}[op]
            pc += jt if taken else jf


THREAD = 0x3D0F00  # glibc's pthread_create: CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT/CHILD_SETTID
FORK = 0x01200011  # glibc's fork: CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD

CASES = [
    # (call, args, answer)
    ("clone", (THREAD,), ALLOW),
    ("clone", (FORK,), ALLOW),
    ("clone", (FORK | seccomp.CLONE_NEWUSER,), EPERM),
    ("clone", (FORK | seccomp.CLONE_NEWNET,), EPERM),
    ("clone", (FORK | seccomp.CLONE_NEWNS | (1 << 40),), EPERM),
    ("clone", (0x11 | (seccomp.CLONE_NEWUSER << 32),), ALLOW),  # the kernel reads only the low 32 bits
    ("unshare", (seccomp.CLONE_NEWUSER,), EPERM),
    ("unshare", (seccomp.CLONE_NEWTIME,), EPERM),
    ("unshare", (seccomp.CLONE_NEWUSER | seccomp.CLONE_NEWNS,), EPERM),
    ("unshare", (0x400 | 0x200,), ALLOW),  # CLONE_FILES|CLONE_FS: no namespace
    ("ioctl", (0, seccomp.TIOCSTI), EPERM),
    ("ioctl", (0, seccomp.TIOCSTI | (1 << 32)), EPERM),  # the high half cannot hide it
    ("ioctl", (0, seccomp.TIOCLINUX), EPERM),
    ("ioctl", (0, 0x5401), ALLOW),  # TCGETS
    *((name, (), EPERM) for name in seccomp.REFUSED),
    *((name, (), ENOSYS) for name in seccomp.ABSENT),
]


@pytest.mark.parametrize("arch", sorted(seccomp.AUDIT_ARCH))
@pytest.mark.parametrize(("call", "args", "answer"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_what_the_filter_answers(arch: str, call: str, args: tuple[int, ...], answer: int) -> None:
    program = seccomp.program(arch)
    assert verdict(program, seccomp.AUDIT_ARCH[arch], seccomp.SYSCALLS[arch][call], *args) == answer


@pytest.mark.parametrize("arch", sorted(seccomp.AUDIT_ARCH))
def test_every_other_call_is_allowed(arch: str) -> None:
    program = seccomp.program(arch)
    named = set(seccomp.SYSCALLS[arch].values())
    for nr in range(0, 460):
        if nr not in named:
            assert verdict(program, seccomp.AUDIT_ARCH[arch], nr, 0xFFFFFFFF, 0x5412) == ALLOW, nr


def test_another_architecture_is_killed_and_x32_is_absent() -> None:
    program = seccomp.program("x86_64")
    i386 = 0x40000003  # AUDIT_ARCH_I386: int 0x80 from a 64-bit process, with other numbers
    assert verdict(program, i386, 1) == KILL
    assert verdict(program, seccomp.AUDIT_ARCH["aarch64"], 0) == KILL
    assert verdict(program, seccomp.AUDIT_ARCH["x86_64"], seccomp.X32_SYSCALL_BIT | 272, 0x10000000) == ENOSYS
    assert verdict(program, seccomp.AUDIT_ARCH["x86_64"], -1) == ENOSYS
    assert verdict(seccomp.program("aarch64"), seccomp.AUDIT_ARCH["x86_64"], 0) == KILL


def test_an_unknown_architecture_has_no_filter() -> None:
    with pytest.raises(ValueError, match="riscv64"):
        seccomp.program("riscv64")


def test_jumps_out_of_range_are_refused() -> None:
    far = [(seccomp.JEQ_K, "end", 0, 1), *[(seccomp.LD_W_ABS, 0, 0, 0)] * 256, "end", (seccomp.RET_K, 0, 0, ALLOW)]
    with pytest.raises(ValueError, match="out of range"):
        seccomp.assemble(far)  # type: ignore[arg-type]


def test_bubblewrap_gets_a_sealed_copy() -> None:
    fd, args = seccomp.for_bwrap("x86_64")
    try:
        assert args == ["--seccomp", str(fd)]
        assert os.pread(fd, 4096, 0) == seccomp.program("x86_64") and os.lseek(fd, 0, os.SEEK_CUR) == 0
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
        with pytest.raises(PermissionError):
            os.write(fd, b"\0" * 8)
    finally:
        os.close(fd)


# --- in a real bubblewrap ----------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A workspace the sandbox's user owns (`nobody` when the tests run as root)."""
    if not os.access("/usr/bin/bwrap", os.X_OK):
        pytest.skip("bubblewrap is not installed")
    if os.geteuid() == 0:
        entry = pwd.getpwnam("nobody")
        os.chown(tmp_path, entry.pw_uid, entry.pw_gid)
    yield tmp_path


def sandboxed(argv: list[str], workspace: pathlib.Path, filtered: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `argv` as the supervisor does: in bubblewrap as `nobody` (as root) under the filter."""
    user = "nobody" if os.geteuid() == 0 else ""
    sandbox = BubblewrapSandbox(SandboxPolicy(user=user, seccomp=filtered))
    read, write = ready_pipe()
    with sandbox.wrap(argv, workspace, dict(ENV), ready_fd=write) as launch:
        assert ("--seccomp" in launch.argv) == filtered
        proc = subprocess.Popen(
            launch.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            **launch.spawn_kwargs(),
        )  # fmt: skip
    os.close(write)
    processes = Confined(proc.pid, read)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        processes.kill()
        processes.close()
    return subprocess.CompletedProcess(launch.argv, proc.returncode, out, err)


PROBE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps({
    "unshare_user": errno_of(libc.unshare(0x10000000)),
    "unshare_mount": errno_of(libc.unshare(0x00020000)),
    "clone3": errno_of(libc.syscall(435, None, 0)),
    "io_uring_setup": errno_of(libc.syscall(425, 1, None)),
    "mount": errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "keyctl": errno_of(libc.syscall(250, 0, 0, 0, 0, 0)),
    "tiocsti": errno_of(libc.ioctl(0, 0x5412, ctypes.c_char_p(b"x"))),
    "seccomp": [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0],
}))
"""


@pytest.mark.skipif(seccomp.machine() != "x86_64", reason="the probe uses x86_64's numbers")
def test_the_filter_refuses_namespaces_mounts_and_the_rest(workspace: pathlib.Path) -> None:
    done = sandboxed([sys.executable, "-c", PROBE], workspace)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "unshare_user": "EPERM",
        "unshare_mount": "EPERM",
        "clone3": "ENOSYS",
        "io_uring_setup": "ENOSYS",
        "mount": "EPERM",
        "keyctl": "EPERM",
        "tiocsti": "EPERM",  # stdin is /dev/null: without the filter, ENOTTY
        "seccomp": "2",
    }


def test_unshare_of_a_user_namespace_fails(workspace: pathlib.Path) -> None:
    if not shutil.which("unshare"):
        pytest.skip("util-linux unshare is not installed")
    done = sandboxed(["unshare", "-U", "-r", "id", "-u"], workspace)
    assert done.returncode != 0 and "Operation not permitted" in done.stderr, done


def test_without_the_filter_a_user_namespace_was_possible(workspace: pathlib.Path) -> None:
    """What the filter closes (on a kernel letting unprivileged users create user namespaces)."""
    if not shutil.which("unshare"):
        pytest.skip("util-linux unshare is not installed")
    done = sandboxed(["unshare", "-U", "-r", "id", "-u"], workspace, filtered=False)
    if done.returncode != 0:
        pytest.skip(f"this kernel refuses unprivileged user namespaces anyway: {done.stderr.strip()}")
    assert done.stdout == "0\n"


WORKLOAD = r"""
import concurrent.futures, os, subprocess, sys, threading
with concurrent.futures.ThreadPoolExecutor(8) as pool:  # pthread_create: clone3, then clone
    assert sum(pool.map(lambda n: n * n, range(100))) == 328350
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
os.makedirs("pkg", exist_ok=True)
open("pkg/mod.py", "w").write("def f():\n    return 1\n")
subprocess.run([sys.executable, "-m", "compileall", "-q", "pkg"], check=True)
assert os.listdir("pkg/__pycache__")
git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
subprocess.run(git + ["init", "-q", "repo"], check=True)
open("repo/a.txt", "w").write("a\n")
subprocess.run(git + ["-C", "repo", "add", "a.txt"], check=True)
subprocess.run(git + ["-C", "repo", "commit", "-qm", "first"], check=True)
log = subprocess.run(git + ["-C", "repo", "log", "--format=%s"], capture_output=True, text=True, check=True)
piped = subprocess.run("echo one | tr o O | cat", shell=True, capture_output=True, text=True, check=True)
print(log.stdout + piped.stdout, end="")
"""


def test_builds_work_under_the_filter(workspace: pathlib.Path) -> None:
    done = sandboxed([sys.executable, "-c", WORKLOAD], workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "first\nOne\n"


# --- at agentd's start -------------------------------------------------------------------------------


def test_agentd_refuses_to_start_where_the_filter_cannot_apply(workspace: pathlib.Path) -> None:
    """A bubblewrap that refuses --seccomp (as an old kernel without filters would): agentd says so,
    and that `seccomp = false` starts it, with a warning."""
    bwrap = workspace / "bwrap"
    bwrap.write_text(
        '#!/bin/sh\ncase " $* " in *" --seccomp "*) echo "bwrap: prctl(PR_SET_SECCOMP): Invalid argument" >&2;'
        ' exit 1;; esac\nexec /usr/bin/bwrap "$@"\n'
    )
    bwrap.chmod(0o755)
    with pytest.raises(StartRefused, match=r"cannot apply agentd's seccomp filter .*Invalid argument.*seccomp = false"):
        isolation.prepare(AgentConfig(bwrap=str(bwrap)))
    started = isolation.prepare(AgentConfig(bwrap=str(bwrap), seccomp=False))
    assert "WITHOUT a seccomp filter" in started.said and "create user namespaces" in started.warning
    assert "under a seccomp filter" in isolation.prepare(AgentConfig()).said


from tests.agentd.run.test_sandbox import AGENTD_PATHS, run_as_nobody  # noqa: E402

UNPRIVILEGED = """
import json, pathlib, subprocess, sys, tempfile
sys.path[:0] = {paths!r}
from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy
work = pathlib.Path(tempfile.mkdtemp())
out = []
for filtered in (True, False):
    with BubblewrapSandbox(SandboxPolicy(seccomp=filtered)).wrap(["unshare", "-U", "true"], work, {{}}) as launch:
        done = subprocess.run(launch.argv, capture_output=True, text=True, **launch.spawn_kwargs())
    out.append([launch.argv.count("--unshare-all"), done.returncode, done.stderr])
print(json.dumps(out))
"""


def test_an_agentd_that_is_not_root_filters_too(workspace: pathlib.Path) -> None:
    """Not root, bubblewrap makes a user namespace for the sandbox; the command cannot nest another."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3") or not shutil.which("unshare"):
        pytest.skip("needs root (to run as nobody), /usr/bin/python3 and unshare")
    done = run_as_nobody(UNPRIVILEGED.format(paths=AGENTD_PATHS))
    assert done.returncode == 0, done.stderr
    (unshared, code, err), (_, unfiltered_code, unfiltered_err) = json.loads(done.stdout)
    assert unshared == 1 and code == 1 and "Operation not permitted" in err
    assert unfiltered_code == 0, unfiltered_err  # nesting one was possible in bubblewrap's namespace
