"""A filesystem per run: its workspace is a sparse ext4 image of `run_disk_bytes` mounted on the
workspace directory, so a run writing until ENOSPC fills its own filesystem, not agentd's (the
spool, the other runs' workspaces). The image lies beside the workspace (`<work_dir>/<run>.disk`);
the supervisor attaches it before the workspace is cloned and releases it at the run's end, agentd
releases those a dead supervisor left behind when it starts. A supervisor that released its image
formats a spare one for a next run (`make_spare`): mkfs is paid at a run's end, not at the next one's start.

A sparse image takes on the host only what the run wrote: `capacity` x run_disk_bytes should fit in
the work dir's filesystem for the guarantee to hold (agentd warns at start when it does not).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import tempfile

from agentd.daemon import loop_mount
from agentd.errors import DiskFailed, LoopUnsupported

SUFFIX = ".disk"
# no journal (a run's workspace dies with it) and no reserve to grow (its size is fixed): ~5 ms, not ~12
MKFS = ["mkfs.ext4", "-q", "-F", "-O", "^has_journal,^resize_inode"]
MKFS += ["-E", "root_owner=0:0,nodiscard,lazy_itable_init=1"]
MOUNT_OPTIONS = "loop,nosuid,nodev"  # mount(8)'s, where the kernel cannot do loop_mount's
PROBE_BYTES = 16 * 1024**2
SPARES = ".spare-disks"
"""Formatted, never mounted images waiting for the next runs (`<work_dir>/.spare-disks/<size>-*.disk`)."""
MAX_SPARES = 4


def image_of(workspace_dir: pathlib.Path) -> pathlib.Path:
    return workspace_dir.with_name(workspace_dir.name + SUFFIX)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    if done.returncode != 0:
        raise DiskFailed(f"{argv[0]} failed: {(done.stderr or done.stdout).strip() or done.returncode}")


def attach(workspace_dir: pathlib.Path, size: int) -> bool:
    """Mount a fresh filesystem of `size` bytes on `workspace_dir` (made empty); nothing to do when one
    is mounted there already (a resumed run). Answers whether it mounted one now."""
    if os.path.ismount(workspace_dir):
        return False
    image = image_of(workspace_dir)
    try:
        workspace_dir.mkdir(parents=True, exist_ok=True)
        if not _take_spare(workspace_dir.parent, size, image):
            _format(image, size)
        try:
            loop_mount.mount_image(str(image), str(workspace_dir))
        except LoopUnsupported:
            _run(["mount", "-o", MOUNT_OPTIONS, str(image), str(workspace_dir)])
        with contextlib.suppress(OSError):
            (workspace_dir / "lost+found").rmdir()  # e2fsck makes it again when it needs one
    except (OSError, subprocess.SubprocessError, DiskFailed) as err:
        with contextlib.suppress(OSError):
            image.unlink()
        raise DiskFailed(f"cannot make the run's filesystem at {workspace_dir}: {err}") from None
    return True


def _format(image: pathlib.Path, size: int) -> None:
    """A fresh, empty filesystem of `size` bytes in `image` (only root may read it)."""
    with open(image, "wb") as f:
        f.truncate(size)
    os.chmod(image, 0o600)
    _run([*MKFS, str(image)])


def _spares(work_dir: pathlib.Path, size: int) -> list[pathlib.Path]:
    try:
        names = os.listdir(work_dir / SPARES)  # not Path.glob: ~0.1 ms instead of ~0.9 on a run's start
    except OSError:
        return []
    return [work_dir / SPARES / n for n in sorted(names) if n.startswith(f"{size}-") and n.endswith(SUFFIX)]


def _take_spare(work_dir: pathlib.Path, size: int, image: pathlib.Path) -> bool:
    """Move a spare image of `size` (made by `make_spare`, never mounted) to `image`; False when there is
    none (another run took the last one meanwhile: rename is atomic, each spare goes to one run)."""
    for spare in _spares(work_dir, size):
        try:
            os.rename(spare, image)
        except OSError:
            continue
        return True
    return False


def make_spare(workspace_dir: pathlib.Path, size: int) -> None:
    """Format an image of `size` for a next run beside `workspace_dir`, when fewer than MAX_SPARES wait:
    the run that ends pays mkfs (5 to 100 ms and more under load), not the next run's start. Best
    effort: a failure only means the next run formats its own."""
    spares = workspace_dir.parent / SPARES
    if size <= 0 or len(_spares(workspace_dir.parent, size)) >= MAX_SPARES:
        return
    try:
        spares.mkdir(mode=0o700, exist_ok=True)
        fd, scratch = tempfile.mkstemp(dir=spares, prefix=".making-")
        os.close(fd)
        try:
            _format(pathlib.Path(scratch), size)
            os.rename(scratch, spares / f"{size}-{os.path.basename(scratch)[8:]}{SUFFIX}")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(scratch)
    except (OSError, subprocess.SubprocessError, DiskFailed):
        return


def unmount(path: pathlib.Path) -> None:
    """Unmount what is mounted on `path` (lazily when a process still holds a file); nothing if none."""
    if os.path.ismount(path):
        done = subprocess.run(["umount", str(path)], capture_output=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            subprocess.run(["umount", "--lazy", str(path)], capture_output=True, stdin=subprocess.DEVNULL)


def release(workspace_dir: pathlib.Path) -> None:
    """Unmount the run's filesystem, and a prepared workspace's overlay on its repository first, and
    delete its image."""
    unmount(workspace_dir / "repo")
    unmount(workspace_dir)
    with contextlib.suppress(OSError):
        image_of(workspace_dir).unlink()


def leftovers(work_dir: pathlib.Path, live: set[str]) -> list[pathlib.Path]:
    """Workspace directories of runs not in `live` whose image is still there, or whose repository is
    still an overlay (agentd/run/prepared_workspace.py) of a supervisor that died."""
    try:
        images = {p.with_name(p.name[: -len(SUFFIX)]) for p in work_dir.glob(f"*{SUFFIX}")}
        overlays = {p.parent for p in work_dir.glob("*/repo") if os.path.ismount(p)}
    except OSError:
        return []
    return sorted(p for p in images | overlays if p.name not in live)


def probe(work_dir: pathlib.Path) -> str:
    """Why runs cannot have a filesystem of their own here, or "" when they can."""
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".probe-", dir=work_dir) as scratch:
            mountpoint = pathlib.Path(scratch) / "ws"
            try:
                attach(mountpoint, PROBE_BYTES)
            finally:
                release(mountpoint)
    except (OSError, DiskFailed) as err:
        return str(err)
    return ""
