"""What a Task declares it touches: repository paths and globs (`files`), and named resources
(`resources`, `kind:name`). One pure function normalises both; submission checks every declared
entry with it, and claims use it again, so a Task whose entries cannot be normalised is refused at
submit and never reaches dispatch."""

from __future__ import annotations

import posixpath
import re

from drover.errors import InvalidArgument

NAMED = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]*):(.*)$")
GLOB = frozenset("*?[")


def normalise(resource: str) -> str:
    """A declared file or glob becomes a clean repository path (`./src//a.py` -> `src/a.py`; `file:`
    is dropped); a named resource becomes `kind:name` with the kind in lower case (`Table:users` ->
    `table:users`, `endpoint:/api/x`). Raises InvalidArgument for what names nothing in the repository
    (`""`, `.`, `../x`, `table:`)."""
    stripped = resource.strip()
    named = NAMED.match(stripped)
    if named and named.group(1).lower() != "file":
        kind, name = named.group(1).lower(), named.group(2).strip()
        if not name:
            raise InvalidArgument(f"{resource!r} names no {kind}", field="resources")
        return f"{kind}:{name}"
    path = (named.group(2) if named else stripped).strip().replace("\\", "/")
    path = posixpath.normpath(path).lstrip("/") if path else ""
    if path in ("", ".", "..") or path.startswith("../"):
        raise InvalidArgument(f"{resource!r} is not a path inside the repository", field="resources")
    return path
