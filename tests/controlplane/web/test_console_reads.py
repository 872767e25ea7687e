"""The console's pages only read, and read beside the writer: on SQLite every page answers while another
process holds the database's write lock (`BEGIN IMMEDIATE`), where a read on the writer would wait for
it (30 s busy timeout)."""

from __future__ import annotations

import re
import sqlite3
import time

import httpx

from tests.conftest import Fleet, python_command, task, wait_for

TRUE = python_command("pass")


def test_every_page_answers_while_another_process_holds_the_write_lock(fleet: Fleet) -> None:
    plane = fleet.start_plane("--http-listen", "127.0.0.1:0")
    plane.add_project("pages")

    def console() -> str:
        text = "\n".join(p.read_text() for p in plane.data_dir.glob("controlplane-*.log"))
        hit = re.search(r"drover console on (https?://127\.0\.0\.1:\d+)/", text)
        return hit.group(1) if hit else ""

    url = wait_for(console, 30, what="the console to listen")
    with plane.client() as client:  # no agent: the run stays queued
        change = client.submit_change("pages", "shown", [task("t", TRUE)], budget_usd=1)
        run_id = wait_for(lambda: client.get_change(change.id).tasks[0].latest_run_id, 30, what="a run")
    with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as http:
        assert http.post("/login", data={"token": plane.admin_token, "next": "/fleet"}).status_code == 303
        holder = sqlite3.connect(plane.data_dir / "drover.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # a writer of another process (a backup, a CLI command) holds the lock
        try:
            started = time.monotonic()
            pages = {
                p: http.get(p) for p in ("/fleet", "/changes", f"/changes/{change.id}", f"/runs/{run_id}", "/spend")
            }
            elapsed = time.monotonic() - started
        finally:
            holder.rollback()
            holder.close()
    assert {p: r.status_code for p, r in pages.items()} == dict.fromkeys(pages, 200)
    assert "shown" in pages["/changes"].text and run_id in pages[f"/changes/{change.id}"].text
    assert "queued" in pages[f"/runs/{run_id}"].text
    assert elapsed < 15, f"the pages waited {elapsed:.1f} s for the writer"
