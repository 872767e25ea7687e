"""The sandbox's launcher as a native program: agentd/run/launcher.c, built once per source version.

The first process inside bubblewrap sets the limits, joins the run's cgroups, drops to the user,
reports the PID namespace and execs the command (agentd/run/rlimits.py says what each step keeps).
As `python -I -S rlimits.py` that is an interpreter's start, 13 ms and more under load, on every
run's start; launcher.c does the same steps, in the same order, with the same options, in about
1 ms. It is built with the host's C compiler into agentd's own cache (owned by agentd's user,
writable by nobody else: root runs it inside every sandbox), named by the source's hash so an
upgrade builds anew. Without a compiler, or when the build fails, `binary()` answers None and the
sandbox keeps the Python launcher: slower, never weaker.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import pwd
import shutil
import stat
import subprocess
import tempfile

SOURCE = pathlib.Path(__file__).with_name("launcher.c")
BUILD_SECONDS = 60


def cache_dir() -> pathlib.Path:
    """Where built launchers live: ~/.cache/drover/launcher of agentd's effective user."""
    return pathlib.Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cache" / "drover" / "launcher"


def _private(path: pathlib.Path) -> bool:
    """`path` exists, is ours and nobody else may change it (a planted launcher would run as root)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


@functools.cache
def binary() -> str | None:
    """The path of the built launcher, building it when this source version has none yet; None when
    it cannot be built here (the caller falls back to agentd/run/rlimits.py)."""
    try:
        source = SOURCE.read_bytes()
        directory = cache_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    if not _private(directory):
        return None
    target = directory / f"launcher-{hashlib.sha256(source).hexdigest()[:16]}"
    if _private(target) and os.access(target, os.X_OK):
        return str(target)
    return _build(target)


def _build(target: pathlib.Path) -> str | None:
    """Compile SOURCE into `target` (atomically: a half-written launcher is never run)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    fd, scratch = tempfile.mkstemp(dir=target.parent, prefix=".build-")
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, "-O2", "-o", scratch, str(SOURCE)],
            capture_output=True,
            timeout=BUILD_SECONDS,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd="/",
        )
        if done.returncode != 0:
            return None
        os.chmod(scratch, 0o755)
        os.replace(scratch, target)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
    return str(target)
