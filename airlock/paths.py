"""Where things live on disk, and how Airlock writes and reads its small files without being
turned against itself.

A leaf: nothing here imports the rest of Airlock.

* `{node}` in a configured path (state_dir, log_dir, shared_dir, textfile_dir) stands for the node
  name; the dev cluster runs every node on one host, so per-node directories need it.
* A node's shared directory is <shared_dir>/<node>, or shared_dir itself with {node} replaced.
* Writes are atomic (a temporary file with an unpredictable name in the same directory, then
  rename), so a reader never sees half a document and a crash leaves the old one.

Airlock runs as root, and a shared directory is written by every node (see docs/security.md).
A configured directory is the administrator's choice and is opened as configured (it may be a
link to a mount). Everything *below* it is Airlock's own tree, and SafeDir walks it one
component at a time with O_NOFOLLOW: a symbolic link there is refused, never followed, so a
link planted in place of `<shared>/<node>/results` cannot make root prune or write elsewhere.
A directory or document below the root is trusted only when root, this process's user or the
root's owner (who could rename anything in it anyway) owns it and nobody else may write it; a
user of a shared filesystem can create entries there, but only ones they own, which are refused.
Names that come from documents (node names, batch and run ids) are checked against strict
patterns before they become a path component.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NODE = "{node}"
MAX_DOC_BYTES = 4 << 20  # a document larger than this is not one of ours

# Slurm node names: letters, digits, '-', '_' and '.', starting with a letter or digit (so
# never "." or ".."), at most 64 characters.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Ids made by Airlock (run ids: 20260101T000000-123-node; batch ids: batch-1700000000-node).
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,159}")
BATCH_ID = re.compile(r"batch-[0-9]{1,12}-[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW = os.O_NOFOLLOW


class UnsafePath(OSError):
    """A path Airlock refuses to use: a link where its own tree should be, an entry that someone
    else owns or may write, or a name that is not a safe path component. An OSError, so every
    caller's existing policy for an unwritable or unreadable directory applies."""

    def __init__(self, path: str | os.PathLike, why: str, code: int = errno.EPERM):
        super().__init__(code, why, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


# --- names ---------------------------------------------------------------------------------
def valid_node_name(name: Any) -> bool:
    return isinstance(name, str) and NODE_NAME.fullmatch(name) is not None


def valid_run_id(value: Any) -> bool:
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


def valid_batch_id(value: Any) -> bool:
    return isinstance(value, str) and BATCH_ID.fullmatch(value) is not None


def _check_component(name: Any, where: str | os.PathLike = "") -> str:
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name \
            or len(name) > 255:
        raise UnsafePath(os.path.join(str(where), str(name)), "not a safe path component",
                         errno.EINVAL)
    return name


# --- configured paths ------------------------------------------------------------------------
def expand(template: str, node: str) -> str:
    """template with {node} replaced by the node name."""
    return template.replace(NODE, node)


def node_dir(template: str, node: str) -> Path:
    return Path(expand(template, node))


def split_template(template: str, node: str) -> tuple[Path, list[str]]:
    """(the configured root, the components below it that Airlock owns) of a directory template.
    The root is everything before the first component holding {node}; without {node} it is the
    whole path."""
    parts = Path(template).parts
    for i, part in enumerate(parts):
        if NODE in part:
            if not valid_node_name(node):
                raise UnsafePath(template, f"{node!r} is not a valid node name", errno.EINVAL)
            return Path(*parts[:i]) if i else Path("."), [expand(p, node) for p in parts[i:]]
    return Path(template), []


def shared_root(shared_dir: str) -> Path:
    """The configured part of shared_dir: the directory that holds every node's folder (and the
    registration batches)."""
    return split_template(shared_dir, "x")[0] if NODE in shared_dir else Path(shared_dir)


def shared_node_parts(shared_dir: str, node: str) -> tuple[Path, list[str]] | None:
    """(shared root, components to this node's folder), or None when no shared_dir is set."""
    if not shared_dir:
        return None
    if NODE in shared_dir:
        return split_template(shared_dir, node)
    if not valid_node_name(node):
        raise UnsafePath(shared_dir, f"{node!r} is not a valid node name", errno.EINVAL)
    return Path(shared_dir), [node]


def shared_node_dir(shared_dir: str, node: str) -> Path | None:
    """This node's folder under the shared results directory (None when none is configured)."""
    if not shared_dir:
        return None
    if NODE in shared_dir:
        return node_dir(shared_dir, node)
    return Path(shared_dir) / node


def local_node_name() -> str:
    """The Slurm node name of this host: $SLURMD_NODENAME (set in every Slurm hook), else the
    short host name."""
    name = os.environ.get("SLURMD_NODENAME")
    if name:
        return name
    import socket  # a hook always has SLURMD_NODENAME: only other commands pay for socket

    return socket.gethostname().split(".")[0]


# --- the safe tree -------------------------------------------------------------------------
def _trusted(st: os.stat_result, uids: frozenset[int]) -> str:
    """Why an entry below the root cannot be trusted ("" when it can)."""
    if st.st_uid not in uids:
        return f"owned by uid {st.st_uid}, not by root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


class SafeDir:
    """A directory reached from a configured root without following any link below it.

    Use as a context manager (it holds a file descriptor). Every operation is relative to that
    descriptor, so renaming or relinking a parent afterwards cannot redirect it.
    """

    def __init__(self, fd: int, path: Path, uids: frozenset[int]):
        self.fd = fd
        self.path = path
        self.uids = uids

    @classmethod
    def open(cls, root: str | os.PathLike, parts: Sequence[str] = (), create: bool = False,
             mode: int = 0o755) -> SafeDir:
        """root/parts..., the root as configured, each part without following a link and
        created with mode when create is set (the root too, as configured)."""
        root = Path(root)
        if create:
            root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root, _DIR_FLAGS)
        try:
            st = os.fstat(fd)
            uids = frozenset({0, os.geteuid(), st.st_uid})
            d = cls(fd, root, uids)
            for part in parts:
                nxt = d._child(part, create, mode)
                os.close(d.fd)
                d = nxt
                fd = d.fd
            return d
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise

    def _child(self, name: str, create: bool, mode: int) -> SafeDir:
        _check_component(name, self.path)
        path = self.path / name
        if create:
            try:
                os.mkdir(name, mode, dir_fd=self.fd)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and self._is_link(name):
                raise UnsafePath(path, "is a symbolic link; Airlock does not follow links in "
                                 "its own tree", errno.ELOOP) from None
            raise
        try:
            why = _trusted(os.fstat(fd), self.uids)
        except OSError:
            os.close(fd)
            raise
        if why:
            os.close(fd)
            raise UnsafePath(path, why)
        return SafeDir(fd, path, self.uids)

    def _is_link(self, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def sub(self, name: str, create: bool = False, mode: int = 0o755) -> SafeDir:
        return self._child(name, create, mode)

    def chmod(self, mode: int) -> None:
        os.fchmod(self.fd, mode)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- files ---------------------------------------------------------------------------
    def write_text(self, name: str, text: str, mode: int = 0o644) -> Path:
        """Atomically replace name (a link in its place is replaced, never followed)."""
        _check_component(name, self.path)
        tmp = f".{name}.{os.urandom(8).hex()}.tmp"  # O_EXCL below: unguessable and unique
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fchmod(fh.fileno(), mode)  # exactly mode, whatever the umask
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            raise
        return self.path / name

    def write_json(self, name: str, data: Any, mode: int = 0o644) -> Path:
        return self.write_text(name, json.dumps(data, indent=1, sort_keys=True) + "\n", mode)

    def create_exclusive(self, name: str, text: str, mode: int = 0o644) -> bool:
        """Write name only if it does not exist yet (False when it does)."""
        _check_component(name, self.path)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC,
                         mode, dir_fd=self.fd)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            os.fchmod(fh.fileno(), mode)
        return True

    def read_text(self, name: str, limit: int = MAX_DOC_BYTES) -> str:
        """The file's text: a regular file, not a link, trusted (see _trusted), at most limit
        bytes. OSError (UnsafePath for a refused one) otherwise."""
        _check_component(name, self.path)
        path = self.path / name
        try:
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(path, "is a symbolic link; not followed", errno.ELOOP) from None
            raise
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(path, "not a regular file")
            why = _trusted(st, self.uids)
            if why:
                raise UnsafePath(path, why)
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise UnsafePath(path, f"larger than {limit} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsafePath(path, "not UTF-8 text", errno.EINVAL) from None

    def read_json(self, name: str) -> Any:
        """The parsed document; OSError or ValueError when it cannot be read or parsed."""
        return json.loads(self.read_text(name))

    def files(self, suffix: str = "") -> list[str]:
        """Names of the regular files here (links and everything else left out), sorted."""
        out = []
        for name in os.listdir(self.fd):
            if not name.endswith(suffix) or name.startswith("."):
                continue
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append(name)
        return sorted(out)

    def dirs(self) -> list[str]:
        """Names of the subdirectories here (not links), sorted."""
        out = []
        for name in os.listdir(self.fd):
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out.append(name)
        return sorted(out)

    def unlink(self, name: str) -> None:
        """Remove name if it is here (a link is removed itself, never what it points to)."""
        _check_component(name, self.path)
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def prune(self, keep: int, suffix: str = ".json") -> list[str]:
        """Delete all but the last `keep` regular files (by name) ending in suffix; return the
        names removed. Only regular files in this very directory are counted or touched."""
        names = self.files(suffix)
        gone = []
        for name in names[:max(0, len(names) - keep)]:
            try:
                os.unlink(name, dir_fd=self.fd)
                gone.append(name)
            except OSError:
                pass
        return gone


# --- plain files in configured places ----------------------------------------------------------
def atomic_write(path: Path, data: Any, mode: int = 0o644) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n", mode)


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Write path atomically through an unpredictably named temporary file in its directory
    (created as configured when missing). A link at path itself is replaced, not followed."""
    path = Path(path)
    with SafeDir.open(path.parent, create=True) as d:
        d.write_text(path.name, text, mode)


def read_json(path: Path) -> Any | None:
    """The parsed document, or None when it is missing, unreadable or not JSON. A link in
    place of the file itself is not followed."""
    path = Path(path)
    try:
        with SafeDir.open(path.parent) as d:
            return d.read_json(path.name)
    except (OSError, ValueError):
        return None


# --- secrets ------------------------------------------------------------------------------------
def secret_file_problem(st: os.stat_result) -> str:
    """Why a file must not be trusted with a secret ("" when it may): others can read it, or
    someone other than root (or this process's user) owns it and can swap its content."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}, not root; chown root"
    if st.st_mode & 0o077:
        return (f"mode {stat.S_IMODE(st.st_mode):04o} lets group or others read it; "
                "chmod 600")
    return ""


def read_secret_file(path: str, limit: int = 4096) -> tuple[str, str]:
    """(the first line of the file, why it must not be trusted or ""): the file is opened once
    and the open file is judged (fstat), so what was checked is what was read; a link the
    operator configured is followed, as any configured path is. OSError when it cannot be
    opened or read; ValueError when it is not UTF-8 text."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        problem = secret_file_problem(os.fstat(fd))
        data = fh.read(limit) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    return data.decode("utf-8").split("\n", 1)[0].strip(), problem

