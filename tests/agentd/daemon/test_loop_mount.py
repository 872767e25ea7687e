"""A run's filesystem mounted with loop ioctls and mount(2), not mount(8): on the real kernel."""

from __future__ import annotations

import os
import pathlib
import struct
import subprocess
import time

import pytest

from agentd.daemon import loop_mount, run_disk

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def test_the_loop_config_names_the_image_and_detaches_at_unmount() -> None:
    raw = loop_mount.loop_config(7, "/w/run_1.disk")
    assert len(raw) == 8 + loop_mount.INFO_BYTES + 64  # sizeof(struct loop_config)
    assert struct.unpack_from("II", raw) == (7, 0)
    info = raw[8 : 8 + loop_mount.INFO_BYTES]
    assert struct.unpack_from("I", info, loop_mount.FLAGS_AT)[0] == loop_mount.LO_FLAGS_AUTOCLEAR
    assert info[loop_mount.NAME_AT : loop_mount.NAME_AT + 14] == b"/w/run_1.disk\0"
    long = loop_mount.loop_config(7, "/" + "x" * 100)[8 : 8 + loop_mount.INFO_BYTES]
    assert long[loop_mount.NAME_AT + 63] == 0  # cut to 63 bytes, still a C string


def attached(image: pathlib.Path) -> list[str]:
    """The loop devices backed by `image`, as the kernel says."""
    found = []
    for device in pathlib.Path("/sys/block").glob("loop*"):
        backing = device / "loop" / "backing_file"
        if backing.exists() and backing.read_text().strip() == str(image):
            found.append(device.name)
    return found


def detached(image: pathlib.Path) -> bool:
    """No loop device is backed by `image` (within 5 s: a kernel may clear a device after the close)."""
    deadline = time.monotonic() + 5
    while attached(image) and time.monotonic() < deadline:
        time.sleep(0.02)
    return attached(image) == []


@root_only
def test_an_image_is_mounted_and_its_device_goes_with_the_unmount(tmp_path: pathlib.Path) -> None:
    image, target = tmp_path / "ws.disk", tmp_path / "ws"
    target.mkdir()
    run_disk._format(image, 16 * 1024**2)
    device = loop_mount.mount_image(str(image), str(target))
    try:
        assert os.path.ismount(target)
        (name,) = attached(image)
        assert f"/dev/{name}" == device
        assert (pathlib.Path("/sys/block") / name / "loop" / "autoclear").read_text().strip() == "1"
        options = next(
            line.split()[3]
            for line in pathlib.Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1] == str(target)
        )
        assert {"nosuid", "nodev"} <= set(options.split(","))
        (target / "f").write_text("written\n")
    finally:
        subprocess.run(["umount", str(target)], check=True)
    assert not os.path.ismount(target) and detached(image)


@root_only
def test_an_image_that_holds_no_filesystem_is_refused_and_leaves_no_device(tmp_path: pathlib.Path) -> None:
    image, target = tmp_path / "zeros.disk", tmp_path / "ws"
    target.mkdir()
    with open(image, "wb") as f:
        f.truncate(16 * 1024**2)
    with pytest.raises(OSError, match="mount /dev/loop"):
        loop_mount.mount_image(str(image), str(target))
    assert not os.path.ismount(target) and detached(image)
