"""Outputs that never lose a file: atomic files and atomic result folders.

* :func:`write_file` writes through a temporary file beside the target, flushed to disk,
  then renamed onto it: a reader (or a killed run) sees the old file or the new one.
* :class:`AtomicFolder` builds a whole output folder in a hidden temporary folder beside
  the target (``.NAME.partial-PID-XXXX``), writes the manifest ``dopplermap.json`` (its
  completeness marker) last and only then swaps it into place (one atomic exchange where
  the kernel has ``renameat2``). A kill at any moment leaves the previous folder or the
  complete new one under the target name.
* :func:`exclusive_lock` keeps a second process off a file that one process grows in place
  (a grid search's table): a lock file created atomically, holding the owner's pid.
* :func:`check_out` checks an ``--out`` before any work: missing parent, read-only parent,
  a file, a symbolic link, a non-empty folder that is not a dopplermap output of the same
  kind (refused; never deleted), or an earlier output of the same kind (replaced only with
  ``overwrite``). It also clears what killed runs left beside the target: every hidden
  work folder or file named ``.NAME.WHAT-PID-XXXX`` (:func:`work_folder`) whose process
  is gone.
* :func:`verify_folder` checks a folder against its manifest before it is read: every
  file the run wrote, byte for byte (SHA-256), figures and reports excepted (they are
  redrawn in place).

Every file and folder gets the mode a plain ``open()`` / ``mkdir()`` would give (0666 /
0777 minus the umask), whatever the temporary-file machinery used.

Fault injection for the tests: ``DOPPLERMAP_FAULT=file:K`` kills the process (SIGKILL)
right after the K-th file of an atomic folder is written, ``DOPPLERMAP_FAULT=marker``
just before the manifest is written, ``DOPPLERMAP_FAULT=swap`` right after the swap
(before the old folder is removed) and ``swap:between`` between the two renames of the
fallback swap (systems without ``renameat2``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from .errors import DopplermapInputError, warn

__all__ = ["write_file", "write_text", "write_json", "AtomicFolder", "check_out", "check_out_file",
           "read_manifest", "write_manifest", "verify_folder", "clean_leftovers", "work_folder", "fingerprint", "new_run_id",
           "MANIFEST", "DERIVED", "file_mode", "dir_mode", "exclusive_lock", "lock_path"]

MANIFEST = "dopplermap.json"
_FORMAT = "dopplermap-folder-1"
_FAULT = "DOPPLERMAP_FAULT"


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def file_mode() -> int:
    """Mode of a new file: 0666 minus the umask (as ``open(path, "w")`` gives)."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """Mode of a new folder: 0777 minus the umask (as ``mkdir`` gives)."""
    return 0o777 & ~_umask()


def new_run_id() -> str:
    """A fresh run id (hex): recorded in every file of one output folder."""
    return uuid.uuid4().hex


def _fault(stage: str) -> None:
    if os.environ.get(_FAULT) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


# ----------------------------------------------------------------------------- files


def write_file(path, write, *, binary: bool = True) -> Path:
    """Write ``path`` atomically: ``write(fh)`` fills a temporary file beside it, which is
    flushed, synced and renamed onto ``path``. Returns ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text(path, text: str) -> Path:
    """Write a text file atomically."""
    return write_file(path, lambda fh: fh.write(text), binary=False)


def write_json(path, obj) -> Path:
    """Write a JSON file atomically (indented; numpy scalars and non-finite floats allowed)."""
    return write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


# ------------------------------------------------------------------------ fingerprints


def _feed(h, obj, depth: int = 0) -> None:
    if depth > 20:
        raise DopplermapInputError("fingerprint: object nested too deeply")
    if obj is None or isinstance(obj, (bool, int, float, str, np.generic)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif hasattr(obj, "shape") and hasattr(obj, "dtype"):  # numpy / JAX arrays
        a = np.ascontiguousarray(np.asarray(obj))
        h.update(f"array{a.shape}{a.dtype.str};".encode())
        h.update(a.tobytes())
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=str):
            h.update(f"{k!s}=".encode())
            _feed(h, obj[k], depth + 1)
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}[".encode())
        for v in obj:
            _feed(h, v, depth + 1)
        h.update(b"]")
    elif hasattr(obj, "__dataclass_fields__"):
        h.update(f"{type(obj).__qualname__}(".encode())
        for name, field in obj.__dataclass_fields__.items():
            if not field.metadata.get("fingerprint", True):  # a label (a star's name), not an input
                continue
            h.update(f"{name}=".encode())
            _feed(h, getattr(obj, name), depth + 1)
        h.update(b")")
    elif isinstance(obj, Path):
        h.update(f"path:{obj};".encode())
    elif hasattr(obj, "__dict__"):
        _feed(h, {"__type__": type(obj).__qualname__, **vars(obj)}, depth + 1)
    elif callable(obj):  # functions: by name (their code is the package's)
        h.update(f"callable:{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')};".encode())
    else:
        h.update(f"{type(obj).__qualname__}:{obj!r};".encode())


def fingerprint(*objs) -> str:
    """A short stable hash (16 hex digits) of arrays, dataclasses, dicts, lists and scalars:
    equal for equal inputs, different when any value, shape or dtype differs."""
    h = hashlib.sha256()
    for o in objs:
        _feed(h, o)
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------- folder checks


def _load_manifest(folder: Path) -> dict:
    """The manifest of ``folder``; :class:`DopplermapInputError` saying why there is none."""
    p = folder / MANIFEST
    if not p.is_file():
        raise DopplermapInputError(f"{folder}: no {MANIFEST}: not a complete folder written by dopplermap (every "
                                   "dopplermap output has this manifest, written last; without it nothing says the "
                                   "files belong together): rerun into a new folder")
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError) as exc:  # not JSON, not UTF-8, nested past the parser's limit
        raise DopplermapInputError(f"{p}: not a readable dopplermap manifest ({type(exc).__name__}): "
                                   "rerun into a new folder") from None
    if not isinstance(m, dict) or m.get("format") != _FORMAT or not isinstance(m.get("files"), dict):
        raise DopplermapInputError(f"{p}: not a dopplermap manifest (format {_FORMAT!r} with its file list): "
                                   "rerun into a new folder")
    return m


def read_manifest(folder) -> dict | None:
    """The manifest of a dopplermap output folder, or None when it has none (or not JSON)."""
    try:
        return _load_manifest(Path(folder))
    except DopplermapInputError:
        return None


def write_manifest(folder, *, kind: str, run_id: str, inputs, meta=None) -> Path:
    """Write the completeness marker :data:`MANIFEST` of ``folder``: kind, run id, input
    fingerprint and each file's size and SHA-256 (every file below ``folder`` but itself)."""
    folder = Path(folder)
    files = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder) != Path(MANIFEST)}
    return write_json(folder / MANIFEST, {"format": _FORMAT, "kind": kind, "run_id": run_id, "inputs": inputs,
                                          "files": files, **(meta or {}), "complete": True})


def _folder_kind(folder: Path, unfinished=None) -> str | None:
    """Kind of dopplermap output in ``folder`` ("result", "grid", ...), None if not one."""
    m = read_manifest(folder)
    if m is not None and m.get("complete"):
        return str(m.get("kind"))
    if unfinished is not None and unfinished(folder):
        return "unfinished"
    return None


# the hidden work folders and files of a run beside its target: partial (an atomic folder
# being built), old (the previous folder during a swap), figures (figures drawn by another
# process), tmp (an atomic file being written); each name carries the writer's process id
_WORK = ("partial", "old", "figures", "tmp")
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<what>" + "|".join(_WORK) + r")-(?P<pid>\d+)-[A-Za-z0-9_]+$")


def work_folder(path, what: str) -> Path:
    """A new hidden work folder ``.NAME.WHAT-PID-XXXX`` beside ``path`` (same file system, so
    its files can be renamed into place); one a killed run leaves is removed by the next
    :func:`check_out` of ``path``."""
    if what not in _WORK:
        raise ValueError(f"work folder kind {what!r} is not one of {_WORK}")
    path = _named(path)
    parent = path.parent if str(path.parent) else Path(".")
    return Path(tempfile.mkdtemp(prefix=f".{path.name}.{what}-{os.getpid()}-", dir=parent))


def _named(path) -> Path:
    """``path`` with a real last component (``.``, ``..`` and ``dir/`` resolved)."""
    path = Path(path)
    return path.resolve() if path.name in ("", ".", "..") else path


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------------ the lock

LOCK_SUFFIX = ".lock"
_LOCK_GRACE_S = 60.0
"""Age after which a lock file without a readable owner (a writer killed between creating
it and writing its pid) counts as stale."""
_HELD: set[str] = set()  # locks this process holds (taking one again is a no-op)


def lock_path(path) -> Path:
    """The lock file of ``path`` (:func:`exclusive_lock`): ``NAME.lock`` beside it."""
    path = Path(path)
    return path.with_name(path.name + LOCK_SUFFIX)


def _owner_text() -> str:
    return f"{os.getpid()} {socket.gethostname()}\n"


def _lock_owner(lock: Path) -> tuple[int | None, str | None, str | None]:
    """``(pid, host, text)`` of a lock file; ``(None, None, text)`` if it holds no owner (yet)
    and ``(None, None, None)`` if it is gone."""
    try:
        text = lock.read_text()
    except FileNotFoundError:
        return None, None, None
    except (OSError, UnicodeDecodeError):
        return None, None, ""
    parts = text.split()
    if len(parts) == 2 and parts[0].isdigit():
        return int(parts[0]), parts[1], text
    return None, None, text


def _lock_is_stale(lock: Path, pid, host, text) -> bool:
    if pid is None:  # no owner written: stale only once old (its writer may be writing now)
        try:
            return time.time() - lock.stat().st_mtime > _LOCK_GRACE_S
        except FileNotFoundError:
            return False
    return host == socket.gethostname() and pid != os.getpid() and not _pid_alive(pid)


def _create_lock(lock: Path) -> int | None:
    """A descriptor of the new lock file, or None if it exists (created atomically: one process wins)."""
    try:
        return os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, file_mode())
    except FileExistsError:
        return None


def _take_lock(lock: Path, what: str) -> None:
    for _ in range(5):
        fd = _create_lock(lock)
        if fd is not None:
            with os.fdopen(fd, "w") as fh:
                fh.write(_owner_text())
                fh.flush()
                os.fsync(fh.fileno())
            return
        pid, host, text = _lock_owner(lock)
        if text is None:  # released meanwhile: try again
            continue
        if not _lock_is_stale(lock, pid, host, text):
            who = "another process" if pid is None else f"process {pid}" + (
                f" on {host}" if host != socket.gethostname() else "")
            raise DopplermapInputError(f"{what} is in use by {who} (lock {lock}); wait for it to finish, or "
                                       "remove the lock file if no such process runs")
        # a dead owner's lock: move it aside (one process can), then check it was that one
        aside = lock.with_name(f".{lock.name}.stale-{os.getpid()}")
        try:
            os.rename(lock, aside)
        except FileNotFoundError:
            continue
        if _lock_owner(aside)[2] != text:  # another process took the stale lock over first: put its lock back
            with contextlib.suppress(OSError):
                os.link(aside, lock)
            aside.unlink(missing_ok=True)
            continue
        aside.unlink(missing_ok=True)
        owner = "no owner written" if pid is None else f"process {pid}, no longer running"
        warn(f"{lock}: took over a stale lock ({owner}); {what} was left by a killed run")
    raise DopplermapInputError(f"{what}: could not take the lock {lock} (other processes keep taking it); try again")


@contextlib.contextmanager
def exclusive_lock(path, what: str | None = None):
    """Hold the lock of ``path`` (``NAME.lock`` beside it) for the ``with`` block.

    The lock file is created with ``O_CREAT | O_EXCL`` (atomic: one process wins) and holds
    ``pid host``. A second process is refused (:class:`DopplermapInputError`, one line naming
    the owner's pid and the lock); a lock whose owner no longer runs (same host) is taken
    over with a warning. The lock is removed on leaving the block, if it is still this
    process's. Taking a lock this process already holds is a no-op. ``what`` names the
    locked thing in the messages (default: ``path``).
    """
    path = Path(path)
    lock = lock_path(path)
    key = str(lock.resolve())
    if key in _HELD:
        yield lock
        return
    _take_lock(lock, what or str(path))
    _HELD.add(key)
    try:
        yield lock
    finally:
        _HELD.discard(key)
        if _lock_owner(lock)[2] == _owner_text():
            lock.unlink(missing_ok=True)


def clean_leftovers(path) -> list[str]:
    """Clear what killed runs left beside ``path``; returns one note per thing done.

    A work folder or file of a dead process (:data:`_WORK`: a partial folder, figures drawn
    for it, a temporary file) is removed (it was never complete); an old folder whose swap
    completed is removed; an old folder with no folder under the target name (a kill between
    the two renames of a system without ``renameat2``) is put back. Leftovers of a live
    process (a concurrent run) are only reported.
    """
    path = Path(path)
    notes = []
    parent = path.parent if str(path.parent) else Path(".")
    try:
        entries = list(parent.iterdir())
    except OSError:
        return notes
    for e in sorted(entries):
        m = _LEFTOVER.match(e.name)
        if not m or m["name"] != path.name or e.is_symlink() or not (e.is_dir() or m["what"] == "tmp"):
            continue
        if int(m["pid"]) == os.getpid():  # this run's own (figures drawn while it writes)
            continue
        if _pid_alive(int(m["pid"])):
            notes.append(f"{e} belongs to a running dopplermap process (pid {m['pid']}); left alone")
            continue
        if m["what"] == "old" and not path.exists():
            os.rename(e, path)
            notes.append(f"restored the previous output {path} from {e.name} (a run was killed while swapping)")
        else:
            if e.is_dir():
                shutil.rmtree(e, ignore_errors=True)
            else:
                e.unlink(missing_ok=True)
            notes.append(f"removed {e.name}, left by a killed run")
    return notes


def _refuse_link(path: Path, option: str | None, given) -> None:
    """A symbolic link as an output is refused: the output is replaced by a rename, which
    would replace the link itself and leave the place it points to as it was."""
    if path.is_symlink():
        label = f"{option} {given}" if option else str(given)
        raise DopplermapInputError(f"{label} is a symbolic link (to {os.readlink(path)}); an output is replaced "
                                   "as a whole, which would replace the link, not what it points to: give the "
                                   "real path")


def check_out(path, kind: str, *, overwrite: bool = False, option: str = "--out", unfinished=None,
              flag: str = "--overwrite") -> Path:
    """Check an output folder before any work; raise :class:`DopplermapInputError` if unusable.

    Accepts a path that does not exist yet (its parent must exist and be writable), an
    empty folder, or an earlier dopplermap output of the same ``kind`` when ``overwrite``.
    Refuses a file, a symbolic link (:func:`_refuse_link`), a read-only place, a non-empty
    folder that is not a dopplermap output of this kind (such a folder is never deleted;
    nor is one without a manifest). ``unfinished(folder) -> bool`` recognises a folder of
    this kind that gets its manifest only when complete (a grid search, written as its
    points finish).
    Also clears the leftovers of killed runs beside it (:func:`clean_leftovers`; each
    thing done is reported as a warning).
    """
    given = path
    try:
        path = _named(path)
        cwd = Path.cwd().resolve()
    except OSError:
        raise DopplermapInputError(f"{option} {given}: the current folder no longer exists") from None
    _refuse_link(path, option, given)
    if path.exists() and (path.resolve() == cwd or path.resolve() in cwd.parents):
        raise DopplermapInputError(f"{option} {given} is the current folder (or holds it); the output folder is "
                                   "replaced as a whole: choose a new sub-folder")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise DopplermapInputError(f"{option} {path}: the parent folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DopplermapInputError(f"{option} {path}: the folder {parent} is not writable")
    for note in clean_leftovers(path):
        warn(note)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise DopplermapInputError(f"{option} {path} exists and is not a folder; choose another {option}")
        try:
            empty = not any(path.iterdir())
        except PermissionError:
            raise DopplermapInputError(f"{option} {path}: the folder is not readable") from None
        if not empty:
            found = _folder_kind(path, unfinished)
            if found is None:
                raise DopplermapInputError(f"{option} {path} is not empty and is not a dopplermap {kind} folder; "
                                           f"nothing was changed: choose another {option}")
            if found not in (kind, "unfinished"):
                raise DopplermapInputError(f"{option} {path} holds a dopplermap {found} output, not a {kind} output; "
                                           f"choose another {option}")
            if not overwrite:
                raise DopplermapInputError(f"{option} {path} holds an earlier {kind} output; pass {flag} to "
                                           f"replace it, or choose another {option}")
        if not os.access(path, os.W_OK | os.X_OK):
            raise DopplermapInputError(f"{option} {path}: the folder is not writable")
    return path


def check_out_file(path, *, overwrite: bool = False, option: str | None = "--out") -> Path:
    """Check an output file before any work (parent exists and is writable, not a folder,
    not a symbolic link, an existing file only with ``overwrite``); clears the temporary
    files killed writers left beside it. ``option``: how the message names the path
    (None: the path alone, for a default output such as ``RESULT_DIR/report.html``)."""
    path = Path(path)
    label = f"{option} {path}" if option else str(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise DopplermapInputError(f"{label}: the parent folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DopplermapInputError(f"{label}: the folder {parent} is not writable")
    _refuse_link(path, option, path)
    if path.is_dir():
        raise DopplermapInputError(f"{label} is a folder; give a file name")
    for note in clean_leftovers(path):
        warn(note)
    if path.exists() and not overwrite:
        raise DopplermapInputError(f"{label} exists; use --overwrite to overwrite it")
    return path


# ------------------------------------------------------------------------ the folder


def _libc_renameat2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _libc_renameat2()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where unsupported."""
    if _RENAMEAT2 is None:
        return False
    r = _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return r == 0


class AtomicFolder:
    """Build an output folder beside its target and swap it into place when complete.

        with AtomicFolder(out, kind="grid", inputs=fp) as folder:
            folder.write("grid.json", lambda p: p.write_text(...))
            folder.tmp  # the temporary folder, for writers that take a folder

    On a normal exit the manifest is written last (kind, run id, input fingerprint, each
    file's size and SHA-256) and the folder replaces the target; on an exception the
    temporary folder is removed and the target is untouched. ``check_out`` is called on
    entry (so a caller that did not check earlier still cannot lose a foreign folder);
    ``names``: how its errors spell the output and the overwrite option (``check_out``'s
    ``option`` and ``flag``; the CLI's by default).
    """

    def __init__(self, path, kind: str, *, overwrite: bool = True, inputs: str | None = None,
                 run_id: str | None = None, unfinished=None, meta: dict | None = None,
                 names: tuple[str, str] = ("--out", "--overwrite")):
        self.path = _named(path)
        self.kind = kind
        self.overwrite = overwrite
        self.inputs = inputs
        self.run_id = run_id or new_run_id()
        self.option, self.flag = names
        self.unfinished = unfinished
        self.meta = dict(meta or {})
        self.tmp: Path | None = None
        self._n = 0

    def __enter__(self):
        check_out(self.path, self.kind, overwrite=self.overwrite, option=self.option, unfinished=self.unfinished,
                  flag=self.flag)
        self.tmp = work_folder(self.path, "partial")
        return self

    def write(self, name: str, write) -> Path:
        """``write(path)`` creates the file ``name`` in the temporary folder."""
        p = self.tmp / name
        write(p)
        self.wrote()
        return p

    def wrote(self) -> None:
        """Count one more file written into :attr:`tmp` (a fault-injection checkpoint)."""
        self._n += 1
        _fault(f"file:{self._n}")

    def _finish(self) -> None:
        for p in self.tmp.rglob("*"):
            os.chmod(p, file_mode() if p.is_file() else dir_mode())
        _fault("marker")
        write_manifest(self.tmp, kind=self.kind, run_id=self.run_id, inputs=self.inputs, meta=self.meta)
        _fsync_dir(self.tmp)
        os.chmod(self.tmp, dir_mode())
        self._swap()

    def _swap(self) -> None:
        path, tmp = self.path, self.tmp
        if not path.exists():
            os.rename(tmp, path)
        elif _exchange(tmp, path):  # tmp now holds the previous folder
            _fault("swap")
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            old = work_folder(path, "old")
            os.rmdir(old)
            os.rename(path, old)
            _fault("swap:between")  # the one moment with nothing under the target name
            os.rename(tmp, path)
            _fault("swap")
            shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(path.parent if str(path.parent) else Path("."))
        self.tmp = None

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self._finish()
            except BaseException:
                if self.tmp is not None:
                    shutil.rmtree(self.tmp, ignore_errors=True)
                raise
        elif self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


DERIVED = (".png", ".pdf", ".svg", ".html")
"""Suffixes of the files :func:`verify_folder` does not check: figures and the HTML report,
which ``dopplermap plot`` and ``dopplermap report`` redraw in place from the checked files."""


def verify_folder(folder, kind: str | None = None) -> dict:
    """Check a folder against its manifest before reading it; returns the manifest.

    One line (:class:`DopplermapInputError`) names the folder, the file and what does not
    match when: there is no manifest (a folder not written by dopplermap, or by hand, is
    not read), the manifest is unreadable, incomplete or of another ``kind``, or a file it
    lists is missing or differs in size or SHA-256 from what the run wrote (an edited
    ``summary.json``, a ``map.fits`` copied in from another run). Files with a
    :data:`DERIVED` suffix are not checked.
    """
    folder = Path(folder)
    m = _load_manifest(folder)
    run = m.get("run_id")
    if not m.get("complete"):
        raise DopplermapInputError(f"{folder}: incomplete dopplermap output (its manifest {MANIFEST} says so)")
    if kind is not None and m.get("kind") != kind:
        raise DopplermapInputError(f"{folder} holds a dopplermap {m.get('kind')} output, not a {kind} output")
    for name, info in m["files"].items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or not isinstance(info, dict):
            raise DopplermapInputError(f"{folder / MANIFEST}: entry {name!r} is not a file of this folder; "
                                       "not a manifest dopplermap wrote")
        if rel.suffix.lower() in DERIVED:
            continue
        p = folder / rel
        if not p.is_file():
            raise DopplermapInputError(f"{folder}: {name} is missing (listed in {MANIFEST} of run {run})")
        size, want = p.stat().st_size, info.get("sha256")
        if size != info.get("bytes"):
            what = f"{size} bytes where run {run} wrote {info.get('bytes')}"
        elif (found := _sha256(p)) != want:
            what = f"SHA-256 {found[:16]}... where run {run} wrote {str(want)[:16]}..."
        else:
            continue
        raise DopplermapInputError(f"{folder}: {name} does not match {MANIFEST} ({what}): edited, or copied from "
                                   "another run; rerun, or restore the file")
    return m
